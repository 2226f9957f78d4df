# (tokenizer: not yet built)
