"""Learning-rate schedule: linear warm-up, then constant (as the seed's runs).

Warm-up counts optimizer steps, not GRPO steps: with off-policy reuse one GRPO step
takes several optimizer steps.
"""

from __future__ import annotations

import torch


def build_scheduler(optimizer, optimizer_cfg) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = max(int(optimizer_cfg.warmup_steps), 0)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
