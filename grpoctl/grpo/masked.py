"""Reductions that only see the positions a mask selects.

Padded positions of a batch hold whatever the model produced there, and the
training code may hold inf or nan in them (an exp that overflowed on a pad
token, a log of zero). Multiplying by a 0/1 mask would turn those into nan
(0 * inf = nan), so every reduction here selects with torch.where instead: a
masked-out value is replaced, not scaled, and its gradient is exactly zero.
"""

import torch


def _select(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Broadcast `mask` to `tensor`, return (tensor with masked-out entries set to 0, bool mask)."""
    mask = torch.broadcast_to(mask.bool(), tensor.shape)
    return torch.where(mask, tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device)), mask


def masked_normalize(
    tensor: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    normalize_constant: float = 1.0,
) -> torch.Tensor:
    """Sum of the entries selected by `mask`, divided by `normalize_constant`.

    tensor: (...) any shape; mask: broadcastable to it (bool, or 0/1 numbers).
    dim=None sums over everything and returns a scalar; otherwise sums over `dim`,
    which is removed from the shape.
    """
    kept, _ = _select(tensor, mask)
    total = kept.sum() if dim is None else kept.sum(dim=dim)
    return total / normalize_constant


def _sum_and_count(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    kept, mask = _select(tensor, mask)
    if dim is None:
        return kept.sum(), mask.sum()
    return kept.sum(dim=dim), mask.sum(dim=dim)


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the entries selected by `mask`.

    tensor: (...) any shape; mask: broadcastable to it (bool, or 0/1 numbers).
    dim=None averages over everything and returns a scalar; otherwise averages over
    `dim`, which is removed from the shape.

    A slice with no selected entry has no mean: nan (0 / 0), as in the CS336 reference.
    The training path reduces with `masked_mean_or_zero` instead.
    """
    total, count = _sum_and_count(tensor, mask, dim)
    return total / count.to(total.dtype)


def masked_mean_or_zero(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """`masked_mean`, but 0 for a slice with no selected entry (same shapes).

    The training path's reduction: a sequence with an empty response then contributes
    nothing to a loss instead of poisoning it with nan.
    """
    total, count = _sum_and_count(tensor, mask, dim)
    # clamp keeps the division finite; where then zeroes the empty slices.
    mean = total / count.clamp_min(1).to(total.dtype)
    return torch.where(count > 0, mean, torch.zeros((), dtype=mean.dtype, device=mean.device))


def masked_min_max(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scalar min and max over the selected entries (nan, nan when nothing is selected)."""
    mask = torch.broadcast_to(mask.bool(), tensor.shape)
    inf = torch.tensor(float("inf"), dtype=tensor.dtype, device=tensor.device)
    lo = torch.where(mask, tensor, inf).amin()
    hi = torch.where(mask, tensor, -inf).amax()
    nan = torch.full_like(lo, float("nan"))
    any_selected = mask.any()
    return torch.where(any_selected, lo, nan), torch.where(any_selected, hi, nan)
