"""The process-wide grader that the reward functions use.

By default it grades in-process (workers=0): the trainer calls the reward
functions from its main thread, where math-verify's own timeouts work, and
in-process grading has no start-up or pickling cost. Call
`configure_grading(workers=N)` to grade in a pool of killable worker processes
instead; calls from other threads get a pool either way (see pool.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from grpoctl.rewards.pool import TIMEOUT_S, Grader
from grpoctl.rewards.shared import Shared

_settings: tuple[int, float] = (0, TIMEOUT_S)  # (workers, timeout_s)
_grader: Shared[Grader] = Shared(Grader)


def configure_grading(workers: int = 0, timeout_s: float = TIMEOUT_S) -> None:
    """Choose how the reward functions grade from now on (closes the old grader).
    timeout_s: a worker's CPU seconds per answer before it is killed (pool.py)."""
    if workers < 0 or timeout_s <= 0:
        raise ValueError(f"need workers >= 0 and timeout_s > 0, got {workers} and {timeout_s}")
    global _settings
    _grader.close()
    _settings = (workers, timeout_s)


def default_grader() -> Grader:
    return _grader.get(_settings)


def grade(pred: str, truth: str) -> bool:
    """Whether pred is mathematically the same answer as truth. Never raises."""
    return default_grader().grade(pred, truth)


def grade_many(pairs: Iterable[tuple[str, str]]) -> list[bool]:
    return default_grader().grade_many(pairs)


def close_default_grader() -> None:
    """Stop the default grader's worker processes, if it has any."""
    _grader.close()
