"""Microbatch train steps: hand values per length normalization, accumulation, masked garbage, metadata."""

import pytest
import torch

from grpoctl.grpo import (
    PolicyGradientLoss,
    compute_policy_gradient_loss,
    grpo_microbatch_train_step,
    sft_microbatch_train_step,
    token_mean_loss,
)

LOGP = [[-1.0, -2.0, -3.0], [-0.5, -1.0, -1.0]]
MASK = torch.tensor([[True, True, False], [True, False, False]])
ADV = torch.tensor([[1.0], [2.0]])


def step(length_normalization, **kwargs):
    logp = torch.tensor(LOGP, requires_grad=True)
    loss, meta = grpo_microbatch_train_step(
        logp,
        MASK,
        2,
        "reinforce_with_baseline",
        advantages=ADV,
        length_normalization=length_normalization,
        **kwargs,
    )
    return loss, meta, logp.grad


def test_mean_normalization_by_hand():
    # seq losses: (1 + 2) / 2 = 1.5 and 2 * 0.5 = 1 -> mean 1.25 -> / 2 steps = 0.625
    loss, meta, grad = step("mean")
    assert loss.item() == pytest.approx(0.625) and not loss.requires_grad
    assert meta["loss"] == pytest.approx(1.25)
    assert torch.allclose(grad, torch.tensor([[-1 / 8, -1 / 8, 0.0], [-1 / 2, 0.0, 0.0]]))


def test_constant_normalization_by_hand():
    # seq losses: 3 / 4 and 1 / 4 -> mean 0.5 -> / 2 = 0.25
    loss, _, grad = step("constant", normalize_constant=4)
    assert loss.item() == pytest.approx(0.25)
    assert torch.allclose(grad, torch.tensor([[-1 / 16, -1 / 16, 0.0], [-1 / 8, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="normalize_constant"):
        step("constant")


def test_microbatch_normalization_by_hand():
    # longest response is 2: seq losses 3 / 2 and 1 / 2 -> mean 1 -> / 2 = 0.5
    loss, _, grad = step("microbatch")
    assert loss.item() == pytest.approx(0.5)
    assert torch.allclose(grad, torch.tensor([[-1 / 8, -1 / 8, 0.0], [-1 / 4, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="mean, constant, microbatch"):
        step("tokens")


def accumulated_grad(length_normalization, n_microbatches):
    """grpo_clip over a batch of 4 whose responses have lengths 6, 1, 2, 2."""
    torch.manual_seed(0)
    logp = (-torch.rand(4, 6) * 3).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(4, 6)
    adv = torch.randn(4, 1)
    lengths = torch.tensor([6, 1, 2, 2])
    mask = torch.arange(6) < lengths[:, None]
    size = 4 // n_microbatches
    for i in range(n_microbatches):
        rows = slice(i * size, (i + 1) * size)
        grpo_microbatch_train_step(
            logp[rows],
            mask[rows],
            n_microbatches,
            "grpo_clip",
            advantages=adv[rows],
            old_log_probs=old[rows],
            cliprange=0.2,
            length_normalization=length_normalization,
            normalize_constant=8,
            batch_response_tokens=int(mask.sum()),
        )
    return logp.grad


@pytest.mark.parametrize("length_normalization", ["mean", "constant", "token"])
def test_accumulated_microbatches_equal_one_batch(length_normalization):
    one = accumulated_grad(length_normalization, 1)
    assert torch.allclose(accumulated_grad(length_normalization, 2), one, atol=1e-6)
    assert torch.allclose(accumulated_grad(length_normalization, 4), one, atol=1e-6)


def test_token_normalization_by_hand():
    # 3 response tokens in the batch; token losses -A log p: 1, 2 and 1 -> 4 / 3, not halved
    # again for the 2 accumulation steps (the sum over microbatches is the mean already).
    loss, meta, grad = step("token", batch_response_tokens=3)
    assert loss.item() == pytest.approx(4 / 3)
    assert meta["loss"] == pytest.approx(8 / 3)  # its mean over the 2 microbatches is the batch loss
    assert torch.allclose(grad, torch.tensor([[-1 / 3, -1 / 3, 0.0], [-2 / 3, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="batch_response_tokens"):
        step("token")


def test_token_normalization_is_the_token_mean_of_ragged_responses():
    """Accumulated over microbatches, "token" is the gradient of the plain mean over every
    response token of the batch (responses of 6, 1, 2 and 2 tokens)."""
    torch.manual_seed(0)
    logp = (-torch.rand(4, 6) * 3).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(4, 6)
    adv = torch.randn(4, 1)
    mask = torch.arange(6) < torch.tensor([6, 1, 2, 2])[:, None]
    per_token, _ = compute_policy_gradient_loss(logp, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    per_token[mask].mean().backward()  # closed form: sum over the 11 tokens / 11
    assert torch.allclose(accumulated_grad("token", 2), logp.grad, atol=1e-7)
    assert not torch.allclose(accumulated_grad("mean", 1), logp.grad, atol=1e-3)  # mean weighs short ones more
    assert token_mean_loss(per_token, mask, 11).item() == pytest.approx(per_token[mask].mean().item())


def test_the_loss_object_is_the_cs336_function():
    loss = PolicyGradientLoss("grpo_clip", "constant", cliprange=0.2, cliprange_high=0.28, normalize_constant=4)
    logp, old = torch.tensor(LOGP, requires_grad=True), torch.tensor(LOGP) - 0.1
    out, meta = loss.microbatch_train_step(logp, MASK, 2, advantages=ADV, old_log_probs=old)
    same = torch.tensor(LOGP, requires_grad=True)
    want, want_meta = grpo_microbatch_train_step(
        same,
        MASK,
        2,
        "grpo_clip",
        advantages=ADV,
        old_log_probs=old,
        cliprange=0.2,
        length_normalization="constant",
        normalize_constant=4,
        cliprange_high=0.28,
    )
    assert torch.equal(out, want) and meta == want_meta and torch.equal(logp.grad, same.grad)


def test_microbatch_normalization_depends_on_the_cut():
    # The second half's longest response is 2, not 6: its tokens weigh 3x more when cut.
    assert not torch.allclose(accumulated_grad("microbatch", 2), accumulated_grad("microbatch", 1), atol=1e-3)


@pytest.mark.parametrize("importance_level", ["token", "sequence"])
def test_garbage_under_the_mask_never_reaches_loss_or_gradient(importance_level):
    logp = torch.tensor([[-1.0, float("inf"), float("nan")], [-0.5, -float("inf"), 30.0]], requires_grad=True)
    mask = torch.tensor([[True, False, False], [True, False, False]])
    old = torch.tensor([[-1.1, float("nan"), -float("inf")], [-0.4, float("inf"), -50.0]])
    ref = torch.tensor([[-0.9, -float("inf"), float("nan")], [-0.6, float("nan"), -80.0]])
    loss, meta = grpo_microbatch_train_step(
        logp,
        mask,
        1,
        "grpo_clip",
        advantages=ADV,
        old_log_probs=old,
        cliprange=0.2,
        importance_level=importance_level,
        ref_log_probs=ref,
        kl_beta=0.1,
    )
    assert torch.isfinite(loss)
    assert torch.isfinite(logp.grad).all() and (logp.grad[~mask] == 0).all()
    assert all(v == v and abs(v) != float("inf") for v in meta.values())


def test_metadata_is_python_floats_over_response_tokens():
    # ratios 1.5, 0.5, 1.1 with A = 1 and cliprange 0.2: only the first is clipped.
    # A masked fourth position with a wild ratio must not show in any statistic.
    logp = torch.tensor([[1.5, 0.5, 1.1, 100.0]]).log().requires_grad_(True)
    mask = torch.tensor([[True, True, True, False]])
    ref = logp.detach().clone()
    ref[0, 0] += torch.tensor(2.0).log()
    _, meta = grpo_microbatch_train_step(
        logp,
        mask,
        1,
        "grpo_clip",
        advantages=torch.tensor([[1.0]]),
        old_log_probs=torch.zeros(1, 4),
        cliprange=0.2,
        ref_log_probs=ref,
    )
    assert all(type(v) is float for v in meta.values())
    assert meta["clip_fraction"] == pytest.approx(1 / 3)
    assert (meta["ratio_min"], meta["ratio_max"]) == pytest.approx((0.5, 1.5))
    assert meta["ratio_mean"] == pytest.approx(3.1 / 3)
    assert meta["token_loss_mean"] == pytest.approx(-(1.2 + 0.5 + 1.1) / 3)
    assert meta["kl"] == pytest.approx((1 - torch.tensor(2.0).log().item()) / 3)

    _, meta = grpo_microbatch_train_step(logp, mask, 1, "reinforce_with_baseline", advantages=torch.tensor([[1.0]]))
    assert set(meta) == {"loss", "token_loss_mean"}


def test_sft_step_by_hand():
    # nll per sequence: 3 / 2 and 0.5 / 2 -> mean 0.875 -> / 2 steps = 0.4375
    logp = torch.tensor(LOGP, requires_grad=True)
    loss, meta = sft_microbatch_train_step(logp, MASK, 2, normalize_constant=2.0)
    assert loss.item() == pytest.approx(0.4375)
    assert meta == {"loss": pytest.approx(0.875), "response_tokens": 3.0}
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 8, -1 / 8, 0.0], [-1 / 8, 0.0, 0.0]]))
