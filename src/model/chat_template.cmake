# (chat_template: not yet built)
