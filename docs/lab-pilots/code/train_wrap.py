"""THROWAWAY: `grpoctl train` with an optional shuffled-reward control (PILOT_SHUFFLE=1):
rewards are permuted within each rollout batch before group normalization; the logged
train/reward and all evals stay the true ones."""
import os
import sys
import time

import torch

if os.environ.get("PILOT_SHUFFLE") == "1":
    import grpoctl.train.step as step

    _orig = step.normalize_group_rewards
    _g = torch.Generator().manual_seed(12345)

    def shuffled(raw, *a, **k):
        return _orig(raw[torch.randperm(raw.numel(), generator=_g)], *a, **k)

    step.normalize_group_rewards = shuffled
    print("PILOT: rewards permuted within each batch", flush=True)

# time/* phase metrics in CPU seconds of this process (1 torch thread), not wall seconds:
# core 1 is shared with other engineers' jobs, so wall time overstates the cost.
import types

import grpoctl.train.phases as _phases

_phases.time = types.SimpleNamespace(perf_counter=time.process_time)

from grpoctl.cli import main

t0 = time.process_time()
try:
    main()
finally:
    print(f"PILOT process cpu {time.process_time() - t0:.1f} s", file=sys.stderr, flush=True)
