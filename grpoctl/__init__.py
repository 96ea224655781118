"""grpoctl: GRPO on small math LLMs, with every run in an experiment registry."""

__version__ = "0.1.0"
