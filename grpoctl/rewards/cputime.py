"""Time limits in CPU time, so that a verdict does not depend on how busy the machine is.

A wall-clock limit is a limit on the machine's load as much as on the work: the
same 0.9 s comparison takes 1.8 s of wall time when another process shares its
core, and scored 0 against a 1 s `signal.alarm` in 2 of 6 runs on a busy machine.
CPU time counts only the work, so the grading limits are CPU-time limits:

- in a main thread, `cpu_time_limit` arms `ITIMER_PROF` (the CPU time of this
  process, user and system), whose SIGPROF raises math-verify's TimeoutException
  wherever the Python code is. It replaces math-verify's `signal.alarm`. In a
  grading worker (pool.py) the process is the grading; in the trainer's main
  thread it is nearly so, since grading runs between the phases that use torch's
  threads (time another thread spends meanwhile would count against the limit);
- a grading worker's CPU time is read from outside (`cpu_seconds`), so that the
  pool kills a worker for the CPU time its pair used, not for the time it waited
  for a core (pool.py; a much longer wall-clock limit stays as the backstop for a
  worker that hangs without computing).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

import psutil
from math_verify.errors import TimeoutException


@contextlib.contextmanager
def cpu_time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutException inside the block once this process has spent `seconds`
    of CPU time in it. Main thread only (signals are delivered there).

    An ITIMER_PROF timer already running (a caller's own CPU-time watchdog, as in
    tests/test_bad_inputs.py) is kept: when it would expire first it is left
    alone, and otherwise it is re-armed afterwards with what is left of it.
    """
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_PROF)
    if outer_left and outer_left <= seconds:
        yield  # the caller's limit comes first, and its handler says what happens then
        return

    def expired(signum, frame):
        raise TimeoutException(f"over {seconds} s of CPU time")

    started = time.process_time()
    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if outer_left:
            left = outer_left - (time.process_time() - started)
            signal.setitimer(signal.ITIMER_PROF, max(left, 1e-3), outer_interval)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system) a process has used so far; None if it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system
