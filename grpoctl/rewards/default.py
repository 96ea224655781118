"""The process-wide grader that the reward functions use.

By default it grades in-process (workers=0): the trainer calls the reward
functions from its main thread, where math-verify's own timeouts work, and
in-process grading has no start-up or pickling cost. Call
`configure_grading(workers=N)` to grade in a pool of killable worker processes
instead; calls from other threads get a pool either way (see pool.py).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable

from grpoctl.rewards.pool import TIMEOUT_S, Grader

_lock = threading.Lock()
_settings = {"workers": 0, "timeout_s": TIMEOUT_S}
_grader: Grader | None = None


def configure_grading(workers: int = 0, timeout_s: float = TIMEOUT_S) -> None:
    """Choose how the reward functions grade from now on (closes the old grader).
    timeout_s: a worker's CPU seconds per answer before it is killed (pool.py)."""
    global _grader
    if workers < 0 or timeout_s <= 0:
        raise ValueError(f"need workers >= 0 and timeout_s > 0, got {workers} and {timeout_s}")
    with _lock:
        if _grader is not None:
            _grader.close()
            _grader = None
        _settings.update(workers=workers, timeout_s=timeout_s)


def default_grader() -> Grader:
    global _grader
    with _lock:
        if _grader is None:
            _grader = Grader(**_settings)
        return _grader


def grade(pred: str, truth: str) -> bool:
    """Whether pred is mathematically the same answer as truth. Never raises."""
    return default_grader().grade(pred, truth)


def grade_many(pairs: Iterable[tuple[str, str]]) -> list[bool]:
    return default_grader().grade_many(pairs)


@atexit.register
def close_default_grader() -> None:
    """Stop the default grader's worker processes, if it has any."""
    global _grader
    with _lock:
        if _grader is not None:
            _grader.close()
            _grader = None
