# (formats: not yet built)
