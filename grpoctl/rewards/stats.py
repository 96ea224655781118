"""Process-wide grading counters, so the trainer can log how grading went.

Timeouts and errors are the numbers to watch. A policy that starts emitting junk
shows up in timeouts before it shows up anywhere else, and every timeout cost up
to a second or two of reward time. Errors should stay at zero: each is an answer
scored 0 because grading failed, not because the answer was wrong.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_counts = {"calls": 0, "timeouts": 0, "errors": 0, "fast": 0, "rejected": 0}


def count(key: str, n: int = 1) -> None:
    with _lock:
        _counts[key] += n


def grading_stats(reset: bool = False) -> dict[str, int]:
    """Counters since start (or the last reset):

    - calls: answers graded,
    - timeouts: gradings cut short by a timeout (counted as wrong),
    - errors: gradings that failed (counted as wrong): the comparison raised,
      a grading worker died, or math-verify could not read the truth as math. Any
      non-zero count is worth a look: a broken grader looks like a flat reward.
      It is for the trainer to log per step as `train/grading_errors`,
    - fast: decided by string/number comparison alone, without math-verify,
    - rejected: turned away as hostile before parsing (counted as wrong).

    reset=True zeroes them after reading, for per-step logging.
    """
    with _lock:
        snapshot = dict(_counts)
        if reset:
            for key in _counts:
                _counts[key] = 0
    return snapshot


def reset_grading_stats() -> None:
    grading_stats(reset=True)
