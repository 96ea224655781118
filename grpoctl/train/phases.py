"""A step's phases, each timed and its memory measured by one context.

    phases = Phases(memory)
    with phases("rollout"):
        ...                     # -> time/rollout, mem/{peak,reserved,device_free}_after_rollout

A phase that runs several times in a step (backward and optimizer, once per optimizer
step) adds up its time and keeps its highest memory figures. Phases nest (backward and
optimizer run inside train): the tracker's peak covers only the time since its last
boundary, so an outer phase's peak is the highest of its own and of every phase inside
it. `phases.step()` wraps a whole GRPO step: time/step and mem/peak (and mem/vllm_pool, the
vLLM pool the mem/ figures leave out, where there is one: train/memory.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from grpoctl import metrics
from grpoctl.train.memory import MemoryTracker


class Phases:
    def __init__(self, memory: MemoryTracker):
        self.memory = memory
        self.metrics: dict[str, float] = {}
        self._inner_peaks: list[float] = []  # per open phase: the highest peak of the phases inside it

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        self._inner_peaks.append(0.0)
        try:
            yield
        finally:
            inner = self._inner_peaks.pop()
        seconds = time.perf_counter() - started
        figures = self.memory.boundary(name)
        peak = metrics.mem_peak_after(name)
        figures[peak] = max(figures[peak], inner)
        if self._inner_peaks:
            self._inner_peaks[-1] = max(self._inner_peaks[-1], figures[peak])
        self.metrics[metrics.phase_time(name)] = self.metrics.get(metrics.phase_time(name), 0.0) + seconds
        for key, value in figures.items():
            self.metrics[key] = max(self.metrics.get(key, value), value)

    @contextmanager
    def step(self) -> Iterator[None]:
        """A whole GRPO step: its seconds (time/step) and the highest peak of its phases (mem/peak)."""
        started = time.perf_counter()
        self.memory.start_step()
        yield
        self.metrics[metrics.MEM_PEAK] = self.memory.step_peak()
        pool = self.memory.pool_mib()
        if pool:
            self.metrics[metrics.MEM_VLLM_POOL] = pool
        self.metrics[metrics.STEP_TIME] = time.perf_counter() - started
