"""Per-token losses: hand values for each variant and extra, gradients, clear errors."""

import math

import pytest
import torch

from grpoctl.grpo import (
    LOSS_TYPES,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_k3_kl,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    masked_mean,
)

# Token ratios 1.5, 0.5, 1.1 in both rows (old log p = 0); A = +1 then -1.
RATIOS = torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]])
LOGP = RATIOS.log()
OLD = torch.zeros(2, 3)
ADV = torch.tensor([[1.0], [-1.0]])


def test_naive_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    expected = torch.tensor([[2.0, 4.0], [-0.5, -3.0]])
    assert torch.equal(compute_naive_policy_gradient_loss(torch.tensor([[2.0], [-1.0]]), logp), expected)
    assert torch.equal(compute_naive_policy_gradient_loss(torch.tensor([2.0, -1.0]), logp), expected)


def test_grpo_clip_by_hand():
    loss, meta = compute_grpo_clip_loss(ADV, LOGP, OLD, cliprange=0.2)
    # A > 0: min(1.5, 1.2) = 1.2, min(0.5, 0.8) = 0.5, 1.1 inside the range.
    # A < 0: min(-1.5, -1.2) = -1.5, min(-0.5, -0.8) = -0.8.
    assert torch.allclose(loss, torch.tensor([[-1.2, -0.5, -1.1], [1.5, 0.8, 1.1]]))
    assert meta["clipped"].tolist() == [[True, False, False], [False, True, False]]
    assert torch.allclose(meta["ratio"], RATIOS)


def test_clip_higher_only_moves_the_upper_bound():
    ratios = torch.tensor([[1.5, 1.25, 0.5]])
    logp = ratios.log()
    sym, sym_meta = compute_grpo_clip_loss(torch.tensor([[1.0]]), logp, torch.zeros(1, 3), cliprange=0.2)
    high, high_meta = compute_grpo_clip_loss(
        torch.tensor([[1.0]]), logp, torch.zeros(1, 3), cliprange=0.2, cliprange_high=0.28
    )
    assert torch.allclose(sym, torch.tensor([[-1.2, -1.2, -0.5]]))
    assert torch.allclose(high, torch.tensor([[-1.28, -1.25, -0.5]]))
    assert sym_meta["clipped"].tolist() == [[True, True, False]]
    assert high_meta["clipped"].tolist() == [[True, False, False]]
    # Lower bound unchanged: A < 0 with ratio 0.5 is held at 1 - 0.2 either way.
    low, _ = compute_grpo_clip_loss(torch.tensor([[-1.0]]), logp, torch.zeros(1, 3), 0.2, cliprange_high=0.28)
    assert low[0, 2].item() == pytest.approx(0.8)


def test_gspo_sequence_ratio_by_hand():
    # Response tokens have log-ratios ln 2 and 0 -> sequence ratio exp(ln2 / 2) = sqrt 2.
    # The masked third position (log-ratio 5) must not count.
    logp = torch.tensor([[math.log(2), 0.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False]])
    old = torch.zeros(1, 3)
    loss, meta = compute_grpo_clip_loss(
        torch.tensor([[1.0]]), logp, old, 0.2, importance_level="sequence", response_mask=mask
    )
    assert torch.allclose(meta["ratio"], torch.full((1, 3), math.sqrt(2)))
    assert torch.allclose(loss, torch.full((1, 3), -1.2))
    assert meta["clipped"].all()

    # Unclipped, the sequence loss is -s * A, and d s / d log p_t = s / |response|.
    loss, _ = compute_grpo_no_clip_loss(
        torch.tensor([[1.0]]), logp, old, importance_level="sequence", response_mask=mask
    )
    masked_mean(loss, mask, dim=-1).sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-math.sqrt(2) / 2, -math.sqrt(2) / 2, 0.0]]))

    with pytest.raises(ValueError, match="response_mask"):
        compute_grpo_clip_loss(torch.tensor([[1.0]]), logp, old, 0.2, importance_level="sequence")


def test_k3_kl_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -0.3]])
    assert torch.equal(compute_k3_kl(logp, logp), torch.zeros(1, 3))
    ref = logp + torch.tensor([[math.log(2), -math.log(2), 0.0]])
    kl = compute_k3_kl(logp, ref)
    assert kl.tolist()[0] == pytest.approx([1 - math.log(2), math.log(2) - 0.5, 0.0], abs=1e-6)
    assert (kl[0, :2] > 0).all()


def test_kl_penalty_is_added_per_token_and_logged_without_it():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = logp + math.log(2)
    zero_adv = torch.zeros(1, 1)
    loss, meta = compute_policy_gradient_loss(
        logp, "reinforce_with_baseline", advantages=zero_adv, ref_log_probs=ref, kl_beta=0.1
    )
    assert torch.allclose(loss, torch.full((1, 2), 0.1 * (1 - math.log(2))))
    logged_only, meta = compute_policy_gradient_loss(
        logp, "reinforce_with_baseline", advantages=zero_adv, ref_log_probs=ref
    )
    assert torch.equal(logged_only, torch.zeros(1, 2)) and "kl" in meta
    # One place adds it, for every loss type: the dispatch (the clip loss itself has none).
    clip_loss, _ = compute_policy_gradient_loss(
        logp, "grpo_clip", advantages=zero_adv, old_log_probs=logp, cliprange=0.2, ref_log_probs=ref, kl_beta=0.1
    )
    assert torch.allclose(clip_loss, loss)
    bare, meta = compute_grpo_clip_loss(zero_adv, logp, logp, 0.2)
    assert torch.equal(bare, torch.zeros(1, 2)) and "kl" not in meta


def test_dispatch_matches_the_variants():
    raw = torch.tensor([[2.0], [0.0]])
    loss, _ = compute_policy_gradient_loss(LOGP, "no_baseline", raw_rewards=raw)
    assert torch.equal(loss, compute_naive_policy_gradient_loss(raw, LOGP))
    loss, _ = compute_policy_gradient_loss(LOGP, "reinforce_with_baseline", advantages=ADV)
    assert torch.equal(loss, compute_naive_policy_gradient_loss(ADV, LOGP))
    loss, meta = compute_policy_gradient_loss(LOGP, "grpo_clip", advantages=ADV, old_log_probs=OLD, cliprange=0.2)
    assert torch.equal(loss, compute_grpo_clip_loss(ADV, LOGP, OLD, 0.2)[0])
    loss, meta = compute_policy_gradient_loss(LOGP, "grpo_no_clip", advantages=ADV, old_log_probs=OLD)
    assert torch.allclose(loss, -RATIOS * ADV) and not meta["clipped"].any()


@pytest.mark.parametrize("other", ["grpo_clip", "grpo_no_clip"])
def test_on_policy_ratio_losses_have_the_reinforce_gradient(other):
    torch.manual_seed(0)
    adv = torch.randn(4, 1)
    logp = (-torch.rand(4, 6) * 3).requires_grad_(True)
    mask = torch.rand(4, 6) > 0.3

    def grad_of(loss_type):
        logp.grad = None
        loss, _ = compute_policy_gradient_loss(
            logp, loss_type, advantages=adv, old_log_probs=logp.detach(), cliprange=0.2
        )
        masked_mean(loss, mask, dim=-1).mean().backward()
        return loss.detach(), logp.grad.clone()

    base_loss, base_grad = grad_of("reinforce_with_baseline")
    loss, grad = grad_of(other)
    assert not torch.allclose(loss, base_loss)
    assert torch.allclose(grad, base_grad, atol=1e-6)


def test_errors_name_what_is_missing_or_valid():
    with pytest.raises(ValueError) as err:
        compute_policy_gradient_loss(LOGP, "ppo", advantages=ADV)
    assert all(name in str(err.value) for name in LOSS_TYPES)
    with pytest.raises(ValueError, match="old_log_probs is missing"):
        compute_policy_gradient_loss(LOGP, "grpo_clip", advantages=ADV, cliprange=0.2)
    with pytest.raises(ValueError, match="cliprange is missing"):
        compute_policy_gradient_loss(LOGP, "grpo_clip", advantages=ADV, old_log_probs=OLD)
    with pytest.raises(ValueError, match="raw_rewards is missing"):
        compute_policy_gradient_loss(LOGP, "no_baseline", advantages=ADV)
    with pytest.raises(ValueError, match="advantages is missing"):
        compute_policy_gradient_loss(LOGP, "reinforce_with_baseline", raw_rewards=ADV)
    with pytest.raises(ValueError, match="ref_log_probs"):
        compute_policy_gradient_loss(LOGP, "reinforce_with_baseline", advantages=ADV, kl_beta=0.1)
    with pytest.raises(ValueError, match="grpo_clip, grpo_no_clip or cispo"):
        compute_policy_gradient_loss(LOGP, "reinforce_with_baseline", advantages=ADV, importance_level="sequence")
    with pytest.raises(ValueError, match="token, sequence"):
        compute_policy_gradient_loss(
            LOGP, "grpo_clip", advantages=ADV, old_log_probs=OLD, cliprange=0.2, importance_level="word"
        )


def test_a_loss_type_without_its_own_branch_is_an_error_not_another_loss(monkeypatch):
    from grpoctl.grpo import losses

    monkeypatch.setattr(losses, "LOSS_TYPES", (*LOSS_TYPES, "fake_loss"))
    with pytest.raises(ValueError, match="'fake_loss' is in LOSS_TYPES but LOSS_FUNCTIONS has no function"):
        compute_policy_gradient_loss(LOGP, "fake_loss", advantages=ADV, old_log_probs=OLD, cliprange=0.2)
