"""Learning-rate schedule: linear warm-up, then constant (the seed's runs) or cosine decay.

Counted in optimizer steps, not GRPO steps: with off-policy reuse one GRPO step takes
several optimizer steps. The cosine decays to `min_lr_ratio` of the peak, so the last
steps make small moves and the final eval measures a settled policy rather than one
caught mid-oscillation.
"""

from __future__ import annotations

import math

import torch


def lr_multiplier(i: int, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """The factor on the peak lr at optimizer step i (0-based)."""
    if warmup and i < warmup:
        return (i + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (i - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer, optimizer_cfg, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = max(int(optimizer_cfg.warmup_steps), 0)
    schedule, min_ratio = optimizer_cfg.lr_schedule, float(optimizer_cfg.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_multiplier(i, warmup, total_steps, schedule, min_ratio)
    )
