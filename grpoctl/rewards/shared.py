"""One process-wide object with worker processes behind it: built on first use, rebuilt
when asked for with other settings, and closed at exit so that no worker outlives the
process. The default grader and the reward plugins' scorer are each one of these."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=Closable)


class Shared(Generic[T]):
    """`get(settings)` returns the object built by `build(*settings)`, the same one while
    the settings stay equal; `close()` stops it (the next `get` builds it again)."""

    def __init__(self, build: Callable[..., T]):
        self._build = build
        self._lock = threading.Lock()
        self._settings: Hashable = None
        self._value: T | None = None
        atexit.register(self.close)

    def get(self, settings: tuple) -> T:
        with self._lock:
            if self._value is None or self._settings != settings:
                self._close_locked()
                self._value = self._build(*settings)
                self._settings = settings
            return self._value

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._value is not None:
            self._value.close()
            self._value = None
