"""The built-in configs a user can name instead of a file (grpoctl/config.py, BUILTIN_CONFIGS)."""
