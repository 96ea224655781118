"""Deterministic evaluation subsets.

The seed's runs evaluate on a 1024-example subset of the ~5k validation set; for
numbers from different runs to be comparable, every run must see the same subset.
So the pick depends only on (the set of examples, size, seed): the examples are
first sorted by id, which makes the input order irrelevant.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from grpoctl.data.examples import Example


def eval_subset(examples: Iterable[Example], size: int | None, seed: int = 0) -> list[Example]:
    """`size` examples drawn by a `random.Random(seed)` from the examples sorted by
    id; all of them (sorted by id) when size is None or at least their number."""
    ordered = sorted(examples, key=lambda example: example.id)
    if size is None or size >= len(ordered):
        return ordered
    if size < 0:
        raise ValueError(f"subset size must be >= 0, got {size}")
    return random.Random(seed).sample(ordered, size)
