"""Per-problem outcomes of an eval row: which problems it got right, stored compactly.

An eval row's `outcomes` column (migration 0009) says, problem by problem, how many of its
samples were right: 0 or 1 for the headline eval (one sample per problem), 0 to n for a
sampled eval of n samples per problem. It is NULL where they were not recorded (every row
written before 0009): "not recorded", never "none right".

The problems are in the order of their ids, sorted: the list that the row's `subset_hash`
hashes (data/fingerprints.py). Two rows with the same subset_hash therefore hold the same
problem at every position, and pair problem by problem; rows whose subset_hash differs do
not pair at all. Each problem's level (where the data grades problems) rides along, for
tables by level.

The text is JSON: {"problems": P, "samples": n, "correct": B, "levels": [...], "level": L}.
B packs each problem's count of right samples into n.bit_length() bits (one bit per problem
for the headline eval: 80 bytes for 640 problems), little-endian, base64; "levels" lists
the distinct levels (null for a problem without one) and L packs each problem's index into
that list the same way. Rows without levels leave both out. Pure Python: the trainer writes
it and `compare` reads it without numpy.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache


def _width(largest: int) -> int:
    return max(1, int(largest).bit_length())


def pack(values: Sequence[int], width: int) -> str:
    """Non-negative integers below 2**width, `width` bits each, as base64 text."""
    number = 0
    for i, value in enumerate(values):
        if not 0 <= value < (1 << width):
            raise ValueError(f"{value} does not fit in {width} bits")
        number |= int(value) << (i * width)
    return base64.b64encode(number.to_bytes((len(values) * width + 7) // 8, "little")).decode("ascii")


def unpack(text: str, width: int, count: int) -> list[int]:
    """The `count` integers `pack` wrote at `width` bits each."""
    number = int.from_bytes(base64.b64decode(text), "little")
    mask = (1 << width) - 1
    return [(number >> (i * width)) & mask for i in range(count)]


@dataclass(frozen=True)
class ProblemOutcomes:
    """One eval row's problems, in id order: right samples of `samples` per problem, and
    each problem's level (None: the data has none for it) when the data grades problems."""

    samples: int
    correct: tuple[int, ...]
    levels: tuple[str | None, ...] | None = None

    @property
    def problems(self) -> int:
        return len(self.correct)

    def shares(self) -> list[float]:
        """Each problem's share of right samples (0 or 1 for the headline eval): their mean
        is the row's accuracy (pass@1 for a sampled row)."""
        return [c / self.samples for c in self.correct]


def encode(correct: Sequence[int], samples: int, levels: Sequence[str | None] | None = None) -> str:
    """The `outcomes` text of a row: right samples per problem (of `samples` each) and, when
    given and not all None, each problem's level; both in the problems' id order."""
    if samples < 1:
        raise ValueError(f"samples per problem must be at least 1, got {samples}")
    if any(not 0 <= c <= samples for c in correct):
        raise ValueError(f"a problem's right samples must lie in 0..{samples}")
    out: dict = {"problems": len(correct), "samples": samples, "correct": pack(correct, _width(samples))}
    if levels is not None and any(level is not None for level in levels):
        if len(levels) != len(correct):
            raise ValueError(f"{len(correct)} problems but {len(levels)} levels")
        distinct = list(dict.fromkeys(levels))
        index = {level: i for i, level in enumerate(distinct)}
        out["levels"] = distinct
        out["level"] = pack([index[level] for level in levels], _width(len(distinct) - 1))
    return json.dumps(out, separators=(",", ":"))


@lru_cache(maxsize=4096)
def decode(text: str) -> ProblemOutcomes:
    """The outcomes an `outcomes` text holds (see the module's docstring); the last few
    thousand are kept, since a finding reads one eval under several measures."""
    data = json.loads(text)
    problems, samples = int(data["problems"]), int(data["samples"])
    correct = tuple(unpack(data["correct"], _width(samples), problems))
    levels = None
    if "levels" in data:
        distinct = [None if v is None else str(v) for v in data["levels"]]
        levels = tuple(distinct[i] for i in unpack(data["level"], _width(len(distinct) - 1), problems))
    return ProblemOutcomes(samples, correct, levels)
