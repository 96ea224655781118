"""THROWAWAY pilot (issue 19, round 2): grpoctl's byte-level tokenizer plus one token per format tag.

Real BPE vocabularies hold common strings as single tokens; here the r1_zero / \\boxed{} tags and the
prompt words are non-special added tokens (matched in raw text, decoded as text, not skipped by
skip_special_tokens). Digits, operators and spaces stay one byte per token.
"""
from __future__ import annotations

TAGS = ["User:", "\nAssistant:", " <think>", " </think>", " <answer>", "</answer>", " \\boxed{"]


def build_tokenizer():
    from tokenizers import AddedToken
    from grpoctl.tiny.model import build_tokenizer as base

    tok = base()
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAGS])
    return tok
