"""Memory as a run uses it, measured at the boundaries of a step's phases.

The seed's first lesson on a 24 GB card was to log peak memory at the important
junctures before optimizing anything, so the trainer calls `MemoryTracker.boundary`
after rollout, backward, the optimizer step and eval. What a run *will* use, worked out on paper for
`--dry-run`, is train/memory_estimate.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.formatting import MiB

if TYPE_CHECKING:
    import torch


class MemoryTracker:
    """Per-phase memory figures in MiB, named mem/<what>_after_<phase>.

    CUDA: peak allocated since the previous boundary (PyTorch's own tensors), reserved
    (what its caching allocator holds), and the device's free memory from the driver,
    which alone also sees vLLM's pool. CPU: the peak resident set since the previous
    boundary (Linux; elsewhere the lifetime peak), the resident set now, and the
    system's available memory. vLLM on CPU lives in this process, so RSS includes it.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        import torch

        self.torch = torch
        self.cuda = torch.device(device).type == "cuda"
        self.device = torch.device(device)
        self._step_peak = 0.0
        self._reset_peak()

    def _reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _reset_peak_rss()

    def boundary(self, phase: str) -> dict[str, float]:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            peak = self.torch.cuda.max_memory_allocated(self.device)
            held = self.torch.cuda.memory_reserved(self.device)
            free, _ = self.torch.cuda.mem_get_info(self.device)
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
