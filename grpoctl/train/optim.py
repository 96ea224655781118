"""The optimizer: AdamW, or bitsandbytes' 8-bit AdamW to fit a 24 GB card.

Memory per parameter for the optimizer states: torch's AdamW keeps m and v in the
parameters' dtype (bf16 policy: 2 x 2 B = 4 B), 8-bit AdamW keeps them as uint8 with
one fp32 scale per 256-value block (~2 B). That is the seed's "almost half", not the 4x
that comparing against fp32 states would suggest. bitsandbytes keeps tensors under 4096
values (norm weights, biases) in 32-bit states, a negligible share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from grpoctl.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from grpoctl.config_schema import OptimizerConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], optimizer_cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """`optimizer.name`: adamw | adamw8bit, with lr, betas and weight_decay from the config."""
    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        raise ValueError("build_optimizer got no trainable parameters")
    kwargs = dict(
        lr=float(optimizer_cfg.lr),
        betas=tuple(float(b) for b in optimizer_cfg.betas),
        weight_decay=float(optimizer_cfg.weight_decay),
    )
    name = optimizer_cfg.name
    if name == "adamw":
        return torch.optim.AdamW(trainable, **kwargs)
    if name == "adamw8bit":
        adamw8bit = _bitsandbytes_adamw8bit(trainable[0].device)
        return adamw8bit(trainable, **kwargs)
    raise UserError(f"optimizer.name={name!r} is not one of: adamw, adamw8bit")


def _bitsandbytes_adamw8bit(device: torch.device) -> type[torch.optim.Optimizer]:
    """bitsandbytes' AdamW8bit class, after checking it can step on `device`."""
    try:
        import bitsandbytes as bnb
    except Exception as exc:  # ImportError, or a broken native library
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UserError(
            f"optimizer.name=adamw8bit needs bitsandbytes, which does not import here ({why}); "
            "pip install bitsandbytes, or use optimizer.name=adamw"
        ) from None
    # Importing is not enough: support for each device lives in separate native
    # backends. One step on a throwaway tensor of the 8-bit path's minimum size says
    # whether this device has one, before the real model's states are allocated.
    try:
        probe = torch.nn.Parameter(torch.zeros(4096, device=device))
        probe.grad = torch.ones_like(probe)
        bnb.optim.AdamW8bit([probe], lr=1e-3).step()
    except Exception as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UserError(
            f"optimizer.name=adamw8bit: bitsandbytes {bnb.__version__} cannot run 8-bit AdamW "
            f"on {device.type} ({why}); use optimizer.name=adamw"
        ) from None
    return bnb.optim.AdamW8bit
