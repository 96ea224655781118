"""Memory as a run uses it, measured at the boundaries of a step's phases.

The seed's first lesson on a 24 GB card was to log peak memory at the important
junctures before optimizing anything, so the trainer calls `MemoryTracker.boundary`
after rollout, backward, the optimizer step and eval. What a run *will* use, worked out on paper for
`--dry-run`, is train/memory_estimate.py.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.formatting import MiB

if TYPE_CHECKING:
    import torch

log = logging.getLogger("grpoctl")
# mem_get_info and memory_reserved are read a moment apart; a few MiB of difference is not
# a miscount.
DRIVER_SLACK = 64 * MiB


class MemoryTracker:
    """Per-phase memory figures in MiB, named mem/<what>_after_<phase>.

    CUDA, what each figure counts:
      - peak_after_<phase>: the most bytes PyTorch's caching allocator had handed out to
        tensors since the previous boundary (torch.cuda.max_memory_allocated), less vLLM's
        memory pool;
      - reserved_after_<phase>: what the caching allocator holds from the driver now
        (torch.cuda.memory_reserved), less the same pool;
      - device_free_after_<phase>: the driver's free memory on the device now
        (torch.cuda.mem_get_info): every process's use, vLLM's pool included while vLLM
        is awake. It is never corrected.
    vLLM's pool (sleep mode: its weights and KV cache, RolloutBackend.memory_pool_bytes) is
    counted by PyTorch from the engine's start to its end, awake or asleep, although it
    holds no device memory while asleep (vLLM issues #17117, #33625). So the first two
    figures leave it out: they are the trainer's own memory (the policy, its gradients and
    optimizer states, activations, and the temporaries of generation, vLLM's included),
    what must fit beside vLLM's share; the pool itself is recorded once per step as
    mem/vllm_pool. Without sleep mode vLLM allocates as any PyTorch code does, and its
    weights and KV cache are in the figures (they hold device memory throughout). The
    figures are checked against the driver: what PyTorch holds less the pool is device
    memory in use, so it cannot exceed what the driver counts in use, and a warning says so
    once if it does (memory counted that is not on the device).

    CPU: the peak resident set since the previous boundary (Linux; elsewhere the lifetime
    peak), the resident set now, and the system's available memory. vLLM on CPU lives in
    this process, so RSS includes it.
    """

    def __init__(self, device: torch.device | str = "cpu", memory_pool: Callable[[], int] | None = None) -> None:
        """`memory_pool`: the bytes PyTorch counts for vLLM's pool, left out of the figures
        (RolloutBackend.memory_pool_bytes); none by default."""
        import torch

        self.torch = torch
        self.cuda = torch.device(device).type == "cuda"
        self.device = torch.device(device)
        self.memory_pool = memory_pool or (lambda: 0)
        self._step_peak = 0.0
        self._warned = False
        self._reset_peak()

    def _reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _reset_peak_rss()

    def pool_mib(self) -> float:
        """vLLM's pool, left out of the CUDA figures (MiB); 0 on CPU and without one."""
        return self.memory_pool() / MiB if self.cuda else 0.0

    def boundary(self, phase: str) -> dict[str, float]:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            pool = self.memory_pool()  # one size from the engine's start, awake or asleep
            peak = self.torch.cuda.max_memory_allocated(self.device) - pool
            held = self.torch.cuda.memory_reserved(self.device) - pool
            free, total = self.torch.cuda.mem_get_info(self.device)
            self._check_against_driver(phase, held, total - free)
        else:
            import psutil

            peak = _peak_rss()
            held = psutil.Process().memory_info().rss
            free = psutil.virtual_memory().available
        self._reset_peak()
        self._step_peak = max(self._step_peak, peak / MiB)
        return {
            metrics.mem_peak_after(phase): peak / MiB,
            metrics.mem_reserved_after(phase): held / MiB,
            metrics.mem_device_free_after(phase): free / MiB,
        }

    def _check_against_driver(self, phase: str, held: int, in_use: int) -> None:
        """What PyTorch holds less vLLM's pool is device memory in use, so it cannot exceed
        what the driver counts in use (which adds the CUDA context, other processes and vLLM's
        pool while awake); if it does, memory that is not on the device is being counted."""
        if held > in_use + DRIVER_SLACK and not self._warned:
            self._warned = True
            log.warning(
                "the mem/ figures may read high: after %s PyTorch holds %.0f MiB (vLLM's pool left out) but the driver "
                "counts only %.0f MiB in use: memory that is not on the device (a sleeping pool) is being counted",
                phase,
                held / MiB,
                in_use / MiB,
            )

    def start_step(self) -> None:
        """Call when a GRPO step starts: step_peak() then covers that step only."""
        self._step_peak = 0.0
        self._reset_peak()

    def step_peak(self) -> float:
        """The highest peak (MiB) seen at any boundary since start_step (the trainer's mem/peak)."""
        return self._step_peak


def _peak_rss() -> int:
    if sys.platform.startswith("linux"):
        status = Path("/proc/self/status").read_text()
        found = re.search(r"VmHWM:\s+(\d+) kB", status)
        if found:
            return int(found.group(1)) * 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _reset_peak_rss() -> None:
    # Writing 5 to clear_refs resets the kernel's resident-set high-water mark (VmHWM),
    # which turns a lifetime peak into a per-phase one. Not possible elsewhere.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
