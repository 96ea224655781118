"""Issue 37's neutral pilot (V1, P37-8): a reward part that is the response's length in
the lab tokenizer's tokens; the run weighs it by c = +0.01 or -0.01 beside the r1_zero
reward (reward.components). Throwaway pilot code, as the rest of this folder."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _tokenizer():
    from grpoctl.tiny.model import build_lab_tokenizer

    return build_lab_tokenizer()


def tokens(response: str, truth: str, example: dict) -> float:
    return float(len(_tokenizer()(response, add_special_tokens=False)["input_ids"]))
