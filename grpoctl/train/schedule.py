"""Learning-rate schedule: linear warm-up, then constant (the seed's runs) or cosine decay.

Counted in optimizer steps by default (`optimizer.warmup_unit=optimizer_step`): with
off-policy reuse one GRPO step takes several optimizer steps, and each moves the weights.
`warmup_unit=grpo_step` counts rollout batches instead, as the seed's recipe did, so a
10-step warm-up means 10 GRPO steps however many updates each takes; the lr then holds
for every update of one GRPO step. The cosine decays to `min_lr_ratio` of the peak, so the last
steps make small moves and the final eval measures a settled policy rather than one
caught mid-oscillation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from grpoctl.config_schema import OptimizerConfig


def lr_multiplier(i: int, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """The factor on the peak lr at optimizer step i (0-based)."""
    if warmup and i < warmup:
        return (i + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (i - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, optimizer_cfg: OptimizerConfig, total_steps: int, updates_per_grpo_step: int = 1
) -> torch.optim.lr_scheduler.LambdaLR:
    """The scheduler, stepped once per optimizer step; `total_steps` counts optimizer steps."""
    warmup = max(int(optimizer_cfg.warmup_steps), 0)
    schedule, min_ratio = optimizer_cfg.lr_schedule, float(optimizer_cfg.min_lr_ratio)
    per = updates_per_grpo_step if optimizer_cfg.warmup_unit == "grpo_step" else 1
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_multiplier(i // per, warmup, total_steps // per, schedule, min_ratio)
    )
