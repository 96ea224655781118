"""How many CPU threads torch gets: a fixed rule, so that a busy machine slows a run, not stalls it.

torch's default (one thread per core) is the fastest choice on an idle machine and the
worst on a busy one: its OpenMP threads spin at every barrier waiting for the slowest,
so one other CPU-bound process on a 2-core machine took the tiny default from 0.9 s to
5-9 s per step. The tiny model's ops are too small to gain from a second thread anyway.

So `runtime.threads: 0` (the default) means: one thread for a model under
SMALL_MODEL_PARAMS parameters, one per core available to the process otherwise, never
more than $GRPOCTL_THREADS when it is set (`sweep --parallel K` sets it to cores / K for
each child). The rule reads the config, the core count and that variable, never the
load, so the same config on the same machine always gets the same count; the count is
not written into the config, and `runtime.threads` is not part of a run's identity.
OpenMP threads also sleep rather than spin while they wait (OMP_WAIT_POLICY=PASSIVE,
which OpenMP reads once, when torch is imported).

No torch at import: the CLI resolves the count before the heavy imports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from grpoctl.tiny.lab_recipe import LAB_PARAMS, is_lab_path

if TYPE_CHECKING:
    from grpoctl.config import RunConfig

SMALL_MODEL_PARAMS = 50_000_000
THREADS_ENV = "GRPOCTL_THREADS"


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_cap() -> int | None:
    raw = os.environ.get(THREADS_ENV, "").strip()
    return max(1, int(raw)) if raw.isdigit() else None


def model_params(cfg: RunConfig) -> int | None:
    """The policy's parameter count from its config.json (or the tiny sizes); None if unknown."""
    from grpoctl.arch import arch_from_model_path

    path = cfg.model.path
    if is_lab_path(path):
        return LAB_PARAMS
    try:
        return arch_from_model_path("tiny" if path.startswith("tiny") else path, cfg.model.tiny).num_params()
    except Exception:  # no config.json reachable: decide as for a large model
        return None


def resolve_threads(cfg: RunConfig, cores: int | None = None) -> tuple[int, str]:
    """(torch threads, why) for this config on this machine."""
    if cfg.runtime.threads > 0:
        return int(cfg.runtime.threads), "runtime.threads"
    cores = cores or available_cores()
    params = model_params(cfg)
    if params is not None and params < SMALL_MODEL_PARAMS:
        count, why = 1, f"auto: {params / 1e6:.1f}M parameters, too small to split"
    else:
        count, why = cores, f"auto: one per core ({cores})"
    cap = thread_cap()
    if cap is not None and cap < count:
        count, why = cap, f"{why}, capped by ${THREADS_ENV}={cap}"
    return count, why


def wait_passively() -> None:
    """OpenMP threads sleep instead of spinning at barriers; only takes effect before torch's import."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def configure_threads(cfg: RunConfig) -> tuple[int, str]:
    """Apply resolve_threads to torch (importing it); returns what it chose and why."""
    wait_passively()
    import torch

    count, why = resolve_threads(cfg)
    torch.set_num_threads(count)
    return count, why


def per_child_cap(parallel: int, cores: int | None = None) -> int:
    """The thread cap for each of `parallel` concurrent runs: the cores, shared out."""
    return max(1, (cores or available_cores()) // max(1, parallel))
