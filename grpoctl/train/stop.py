"""Stopping a run cleanly: the first SIGINT or SIGTERM ends it after (or instead of) the
step in flight, with a checkpoint; a second stops it at once.

See StopRequest for what each signal does, and `runtime.on_signal` for the choice between
finishing the step in flight and abandoning one that has not touched the weights yet.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger("grpoctl")


class AbandonStep(BaseException):
    """Raised by the signal handler inside a step that has not touched the weights yet.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way
    (a grader that scores errors as wrong, say) can swallow it."""


class StopRequest:
    """SIGINT (Ctrl-C) and SIGTERM (preemption: Kubernetes, SLURM and Ray send it) end a
    run cleanly, marked `interrupted`, with a checkpoint that `--resume` continues from.

    On the first signal, with runtime.on_signal=finish_step (the default) the step in
    flight finishes and is checkpointed. With checkpoint_now a step that is still
    generating or grading, which has not touched the weights, the optimizer or the
    scheduler, is abandoned at once and the last completed step is checkpointed; a step
    whose updates have begun finishes first, since no consistent state exists mid-update.
    A second signal of either kind stops at once: the step in flight is not recorded, and
    resume continues from the last checkpoint written.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_signal: str = "finish_step"):
        self.on_signal = on_signal
        self.requested: str | None = None  # the first signal's name
        self.again: str | None = None  # the second's
        self.abortable = False  # inside the part of a step that may be abandoned
        self.closing = False  # the run is recording its end: nothing left to stop
        self._previous: dict = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.closing:
            log.warning(f"{name}: the run is recording its end; it exits in a moment")
            return
        if self.requested or threading.current_thread() is not threading.main_thread():
            self.again = name
            raise KeyboardInterrupt
        self.requested = name
        if self.on_signal == "checkpoint_now" and self.abortable:
            self.abortable = False
            raise AbandonStep
        log.warning(f"{name}: stopping after this step ({'Ctrl-C' if name == 'SIGINT' else name} again to stop now)")

    def reason(self, at_once: bool = False) -> str:
        first = "the user (Ctrl-C)" if self.requested == "SIGINT" else self.requested or "the user (Ctrl-C)"
        if at_once and self.again:
            return (
                f"stopped at once by a second signal ({self.again} after {self.requested}); "
                "the step in flight was not recorded"
            )
        return f"interrupted by {first}"

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


@contextmanager
def abortable(stop: StopRequest | None) -> Iterator[None]:
    """The block during which a checkpoint_now signal abandons the step."""
    if stop is None:
        yield
        return
    stop.abortable = True
    try:
        yield
    finally:
        stop.abortable = False
