"""A step's phases, each timed and its memory measured by one context.

    phases = Phases(memory)
    with phases("rollout"):
        ...                     # -> time/rollout, mem/{peak,reserved,device_free}_after_rollout

A phase that runs several times in a step (backward and optimizer, once per optimizer
step) adds up its time and keeps its highest memory figures. Phases nest (backward and
optimizer run inside train): the tracker's peak covers only the time since its last
boundary, so an outer phase's peak is the highest of its own and of every phase inside
it. `phases.step()` wraps a whole GRPO step: time/step, time/cpu (the process's CPU-seconds),
mem/peak (and mem/vllm_pool, the
vLLM pool the mem/ figures leave out, where there is one: train/memory.py), and the
throughput (tokens per second) of the phases that counted their tokens (`count_tokens`).
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
        self.tokens: dict[str, int] = {}  # per phase with a throughput (metrics.THROUGHPUT_OF_PHASE)
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

    def count_tokens(self, phase: str, tokens: int) -> None:
        """Tokens a phase processed (rollout: generated; train: through forward and backward):
        the step's throughput of the phase is their sum over its seconds."""
        if phase not in metrics.THROUGHPUT_OF_PHASE:
            raise ValueError(f"no throughput is recorded for the {phase} phase")
        self.tokens[phase] = self.tokens.get(phase, 0) + tokens

    @contextmanager
    def step(self) -> Iterator[None]:
        """A whole GRPO step: its seconds (time/step) and CPU-seconds (time/cpu), the highest
        peak of its phases (mem/peak) and the throughput of each phase that counted its tokens."""
        started, cpu_started = time.perf_counter(), time.process_time()
        self.memory.start_step()
        yield
        for phase, tokens in self.tokens.items():
            seconds = self.metrics.get(metrics.phase_time(phase))
            if seconds:
                self.metrics[metrics.THROUGHPUT_OF_PHASE[phase]] = tokens / seconds
        self.metrics[metrics.MEM_PEAK] = self.memory.step_peak()
        pool = self.memory.pool_mib()
        if pool:
            self.metrics[metrics.MEM_VLLM_POOL] = pool
        self.metrics[metrics.STEP_CPU] = time.process_time() - cpu_started
        self.metrics[metrics.STEP_TIME] = time.perf_counter() - started
