"""Masked reductions: hand-computed values, and nothing masked ever leaks in."""

import math

import pytest
import torch

from grpoctl.grpo import masked_mean, masked_mean_or_zero, masked_min_max, masked_normalize

T = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[True, True, False], [False, False, False]])


def test_masked_mean_by_hand():
    # A slice with nothing selected has no mean: nan (0 / 0), as in the CS336 reference.
    assert torch.allclose(masked_mean(T, M, dim=-1), torch.tensor([1.5, math.nan]), equal_nan=True)
    assert torch.allclose(masked_mean(T, M, dim=0), torch.tensor([1.0, 2.0, math.nan]), equal_nan=True)
    assert masked_mean(T, M).item() == pytest.approx(1.5)


def test_masked_mean_of_nothing_is_nan_and_the_training_reduction_zero():
    assert math.isnan(masked_mean(T, torch.zeros_like(M)).item())
    assert masked_mean_or_zero(T, torch.zeros_like(M)).item() == 0.0
    assert torch.allclose(masked_mean_or_zero(T, M, dim=-1), torch.tensor([1.5, 0.0]))
    assert torch.allclose(masked_mean_or_zero(T, M, dim=0), torch.tensor([1.0, 2.0, 0.0]))


def test_masked_normalize_by_hand():
    assert torch.allclose(masked_normalize(T, M, dim=-1, normalize_constant=2.0), torch.tensor([1.5, 0.0]))
    assert masked_normalize(T, M, normalize_constant=4.0).item() == pytest.approx(0.75)
    assert masked_normalize(T, M).item() == pytest.approx(3.0)


def test_numeric_masks_work_like_bool_masks():
    assert torch.allclose(masked_mean(T, M.float(), dim=-1), masked_mean(T, M, dim=-1), equal_nan=True)
    assert torch.equal(masked_mean_or_zero(T, M.float(), dim=-1), masked_mean_or_zero(T, M, dim=-1))
    assert torch.equal(masked_normalize(T, M.long(), dim=-1), masked_normalize(T, M, dim=-1))


@pytest.mark.parametrize(
    "reduce",
    [
        lambda t, m: masked_mean_or_zero(t, m, dim=-1).sum(),
        lambda t, m: masked_mean(t, m, dim=-1)[0],  # the row with a selection (the other is nan)
        lambda t, m: masked_mean(t, m),
        lambda t, m: masked_normalize(t, m, dim=-1, normalize_constant=3.0).sum(),
    ],
)
def test_nan_and_inf_under_the_mask_never_leak(reduce):
    dirty = T.clone()
    dirty[0, 2], dirty[1, 0], dirty[1, 1] = float("nan"), float("inf"), -float("inf")
    dirty.requires_grad_(True)
    out = reduce(dirty, M)
    assert out.item() == pytest.approx(reduce(T, M).item())
    out.backward()
    assert torch.isfinite(dirty.grad).all()
    assert (dirty.grad[~M] == 0).all()


def test_masked_min_max():
    lo, hi = masked_min_max(torch.tensor([[5.0, -1.0, float("nan")]]), torch.tensor([[True, True, False]]))
    assert (lo.item(), hi.item()) == (-1.0, 5.0)
    lo, hi = masked_min_max(T, torch.zeros_like(M))
    assert math.isnan(lo.item()) and math.isnan(hi.item())
