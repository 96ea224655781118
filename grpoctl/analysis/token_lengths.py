"""A stored completion's length in its run's tokens, not its bytes.

The registry stores completions as text. On the tiny model a byte is a token (its
tokenizer is byte-level BPE with no merges, tiny/model.py), but on the lab a format tag or
a number up to 199 is one token of 2-9 bytes, so `<answer>59</answer>` is 3 tokens and 19
bytes: a spread in bytes is not the spread the losses divide by. The tokenizer is picked
from the run's `model.path` without building any model: the embedded ones are made in
code (tiny/model.py), any other is read from its directory.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

Counter = Callable[[str], int]


def byte_length(text: str) -> int:
    return len(text.encode())


@cache
def _lab_counter() -> Counter:
    from grpoctl.tiny.model import build_lab_tokenizer

    tokenizer = build_lab_tokenizer()
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


@cache
def _directory_counter(path: str) -> Counter | None:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError):  # not a model directory after all
        return None
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def token_counter(model_path: str) -> tuple[Counter, str]:
    """(a function from text to its length, the unit it counts: "tokens" or "bytes").

    Bytes only where the tokenizer cannot be had here (a hub id, a directory since
    removed), and then the unit says so."""
    from grpoctl.tiny.lab_recipe import is_lab_path

    if model_path == "tiny" or model_path.startswith("tiny@"):
        return byte_length, "tokens"  # one token per byte, by construction
    if is_lab_path(model_path):
        return _lab_counter(), "tokens"  # lab-sft@N share the base's tokenizer
    if Path(model_path).is_dir():
        counter = _directory_counter(model_path)
        if counter is not None:
            return counter, "tokens"
    return byte_length, "bytes"
