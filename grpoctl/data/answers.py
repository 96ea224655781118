"""Pulling the final answer out of a worked solution.

MATH solutions end with the answer in `\\boxed{...}` (sometimes `\\fbox{...}`); the
full MATH release has no separate answer field, so this is the answer there (found by
the rewards' linear-time brace matcher, grpoctl.rewards.extract.last_boxed: one for the
project, since the input is untrusted). GSM8K solutions end with a line `#### 42`.
"""

from __future__ import annotations

import re

# "1,450,000" or "-3,000.5": a plain number written with thousands separators.
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")

GSM8K_MARKER = "####"


def strip_thousands_commas(answer: str) -> str:
    """`1,450,000` -> `1450000`; anything that is not such a number is returned
    unchanged (a comma in `(1,2)` is meaningful)."""
    if _THOUSANDS.fullmatch(answer):
        return answer.replace(",", "")
    return answer


def split_gsm8k(text: str) -> tuple[str, str] | None:
    """Split a GSM8K answer field into (worked solution, final answer) at the last
    `####`; None when the marker is missing."""
    head, marker, tail = text.rpartition(GSM8K_MARKER)
    if not marker:
        return None
    return head.strip(), strip_thousands_commas(tail.strip())
