# (gguf: not yet built)
