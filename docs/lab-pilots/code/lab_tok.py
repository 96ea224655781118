"""THROWAWAY pilot (issue 19, rounds 2-3): grpoctl's byte-level tokenizer plus added tokens.

Round 2 (LAB_TOK=tags): one non-special added token per format tag (matched in raw text, decoded as text, not
skipped by skip_special_tokens). Digits, operators and spaces stay one byte per token.
Round 3 (LAB_TOK=nums): also one non-special added token per integer 0..NUM_MAX, so every number of the task
(operands, partial results, answers; max 144, perturbed up to 154) is one token, as GPT-style BPE holds 1-3 digit
numbers. Added tokens match leftmost-longest, so "144" is one token, not "14" "4"; larger numbers fall back to bytes.
"""
from __future__ import annotations

import os

TAGS = ["User:", "\nAssistant:", " <think>", " </think>", " <answer>", "</answer>", " \\boxed{"]
NUM_MAX = 199


def build_tokenizer(kind: str | None = None):
    from tokenizers import AddedToken
    from grpoctl.tiny.model import build_tokenizer as base

    kind = kind or os.environ.get("LAB_TOK", "tags")
    tok = base()
    extra = list(TAGS)
    if kind == "nums":
        extra += [str(i) for i in range(NUM_MAX + 1)]
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in extra])
    return tok
