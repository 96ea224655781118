"""Warm starts: the supervised runs that build the shipped models (grpoctl/tiny/shipped/)
before GRPO, the tiny addition model's (tiny.py) and the lab's base and SFT starts (lab.py).
They train; the models' shapes, tokenizers and recipes are leaves in grpoctl/tiny/."""
