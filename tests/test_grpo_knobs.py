"""The recipe knobs at the edges of the step (issue 22): DAPO's soft overlong punishment,
overlong masking, and the entropy bonus. Each formula against values worked by hand; each
knob's neutral default leaves a run's hash alone; a tiny run records each knob acting."""

from __future__ import annotations

import pytest
import torch
from cli import invoke
from conftest import fast_overrides

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.errors import UserError
from grpoctl.grpo import PolicyGradientLoss
from grpoctl.grpo.logprobs import compute_entropy
from grpoctl.grpo.shaping import loss_rows, overlong_penalty, permute_rewards
from grpoctl.rules import config_hash

# --------------------------------------------------------------------------- soft overlong punishment


def test_overlong_penalty_matches_dapo_worked_by_hand():
    """verl's DAPORewardManager (verl/workers/reward_manager/dapo.py, lines 140-146 at
    0bd4ecb9302bdf8d482c8451ffd7ce3ff323653f): expected_len = max_resp_len - buffer_len,
    exceed_len = response length - expected_len, reward += min(-exceed_len / buffer_len *
    penalty_factor, 0). With max 20 and buffer 4 the free region ends at 16 tokens."""
    lengths = torch.tensor([10, 16, 17, 18, 20])
    assert overlong_penalty(lengths, 20, 4, 1.0).tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(lengths, 20, 4, 0.5).tolist() == [0.0, 0.0, -0.125, -0.25, -0.5]
    # The whole response budget as the buffer: every token costs 1/20 of the factor.
    assert overlong_penalty(torch.tensor([0, 5, 20]), 20, 20, 1.0).tolist() == [0.0, -0.25, -1.0]
    with pytest.raises(ValueError):
        overlong_penalty(lengths, 20, 21, 1.0)


def test_masking_keeps_only_rows_that_stopped():
    """TRL's mask_truncated_completions (trl/trainer/grpo_trainer.py, lines 2416-2421 at
    f2cd57710ae345ea6428ae95363267fcf38a3dc8): a completion whose last token is neither EOS
    nor padding (it hit the length limit) has its completion_mask zeroed, so its tokens
    leave the loss. Its reward is untouched: the group mean and std (lines 2685-2691) are
    taken over every completion, as rollout_batch in train/step.py does."""
    assert loss_rows([False, True, False], mask_truncated=True).tolist() == [True, False, True]
    assert loss_rows([False, True, False], mask_truncated=False).tolist() == [True, True, True]


def test_the_shuffled_control_permutes_rewards_across_groups_reproducibly():
    raw = torch.arange(64, dtype=torch.float32)  # 8 groups of 8, every reward distinct
    shuffled = permute_rewards(raw, seed=3)
    assert sorted(shuffled.tolist()) == raw.tolist()  # the same values: the reward's distribution
    assert torch.equal(shuffled, permute_rewards(raw, seed=3))  # a resumed step shuffles alike
    assert not torch.equal(shuffled, permute_rewards(raw, seed=4))
    # Across groups, not within them: most values land in another group.
    moved = (shuffled.long() // 8 != torch.arange(64) // 8).float().mean()
    assert moved > 0.6, moved


# --------------------------------------------------------------------------- masked rows in the loss


def _random_step(seed: int = 0, batch: int = 4, seq: int = 6):
    g = torch.Generator().manual_seed(seed)
    log_probs = (-torch.rand(batch, seq, generator=g) * 2).requires_grad_()
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, 2:] = False
    advantages = torch.randn(batch, 1, generator=g)
    return log_probs, mask, advantages


def _grad(loss: PolicyGradientLoss, log_probs, mask, advantages, tokens=None, **kw) -> torch.Tensor:
    log_probs.grad = None
    loss.microbatch_train_step(
        log_probs, mask, 1, advantages=advantages, old_log_probs=log_probs.detach(), batch_response_tokens=tokens, **kw
    )
    return log_probs.grad.clone()


@pytest.mark.parametrize("normalization", ["mean", "constant", "token"])
def test_a_masked_row_gets_no_gradient_and_the_rest_are_weighed_as_documented(normalization):
    """The masked row's place in each normalization, as TRL's loss types have it
    (trl/trainer/grpo_trainer.py at f2cd57710ae345ea6428ae95363267fcf38a3dc8): `token` is
    dapo's sum over the batch's kept tokens, divided by num_items_in_batch, which counts
    the mask after truncated rows are zeroed (lines 2427 and 3139-3141); `mean` is grpo's
    per-sequence token mean, clamped at 1 token, then the mean over every sequence, the
    masked one at zero loss (line 3125); `constant` is dr_grpo's sum over
    (sequences x max length), the masked sequence still counted (line 3135)."""
    log_probs, mask, adv = _random_step()
    keep = torch.tensor([True, False, True, True])
    loss = PolicyGradientLoss("grpo_clip", normalization, cliprange=0.2, normalize_constant=6.0)
    loss_mask = mask & keep[:, None]
    grad = _grad(loss, log_probs, loss_mask, adv, tokens=int(loss_mask.sum()))
    assert torch.all(grad[1] == 0)
    # On-policy the clipped surrogate's gradient is -A / (normaliser) per token: worked by hand.
    if normalization == "token":  # the masked row leaves the token count
        expected = -adv * loss_mask / loss_mask.sum()
    elif normalization == "mean":  # it stays in the mean over the 4 sequences, with 0 loss
        expected = -adv * loss_mask / loss_mask.sum(-1, keepdim=True).clamp(min=1) / 4
    else:  # constant: sum / max length, mean over the 4 sequences
        expected = -adv * loss_mask / 6.0 / 4
    torch.testing.assert_close(grad, expected.float(), atol=1e-6, rtol=1e-6)


# --------------------------------------------------------------------------- entropy bonus


@pytest.mark.parametrize("normalization", ["mean", "token"])
def test_the_entropy_bonus_is_subtracted_with_the_losss_normalization(normalization):
    """verl's actor (verl/workers/actor/dp_actor.py, lines 633-638 at
    b178a3cd56f58b2d502255daba591e92833930a7): entropy_agg = agg_loss(entropy, response_mask,
    loss_agg_mode), the policy-gradient term's own aggregation, and policy_loss -=
    entropy_agg * entropy_coeff. agg_loss (verl/trainer/ppo/core_algos.py at the same commit)
    is, for `token`, token-mean: the masked sum over the batch's tokens (lines 1055-1058);
    for `mean`, seq-mean-token-mean: each sequence's token mean, then the mean over
    sequences (lines 1065-1071; verl leaves a fully masked sequence out of that mean, and
    none is here). TRL differs (trl/trainer/grpo_trainer.py, lines 3152-3181 at
    f2cd57710ae345ea6428ae95363267fcf38a3dc8): its bonus is the token-mean entropy whatever
    the loss type; issue 22 asks for the loss's own normalization, verl's form."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    labels = torch.randint(0, 11, (3, 5), generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 3:] = False
    adv = torch.tensor([[1.0], [-0.5], [0.25]])
    coef = 0.3
    tokens = int(mask.sum())

    def forward():
        log_probs = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
        return log_probs, compute_entropy(logits)

    log_probs, entropy = forward()
    loss = PolicyGradientLoss("reinforce_with_baseline", normalization, entropy_coef=coef)
    _, stats = loss.microbatch_train_step(
        log_probs, mask, 1, advantages=adv, batch_response_tokens=tokens, token_entropy=entropy
    )
    got = logits.grad.clone()

    logits.grad = None
    log_probs, entropy = forward()
    per_token = -adv * log_probs - coef * entropy
    if normalization == "token":
        by_hand = (per_token * mask).sum() / tokens
        bonus = (coef * entropy * mask).sum() / tokens
    else:
        by_hand = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
        bonus = ((coef * entropy * mask).sum(-1) / mask.sum(-1)).mean()
    by_hand.backward()
    torch.testing.assert_close(got, logits.grad, atol=1e-6, rtol=1e-5)
    assert stats["entropy_bonus"] == pytest.approx(float(bonus.detach()), rel=1e-5)
    assert stats["loss"] == pytest.approx(float(by_hand.detach()), rel=1e-5)


def test_the_bonus_needs_the_entropy():
    log_probs, mask, adv = _random_step()
    with pytest.raises(ValueError, match="token_entropy"):
        PolicyGradientLoss("reinforce_with_baseline", entropy_coef=0.1).microbatch_train_step(
            log_probs, mask, 1, advantages=adv
        )


def test_the_entropy_graph_is_counted_by_the_memory_estimate():
    from grpoctl.arch import KNOWN_CONFIGS, arch_from_hf_config
    from grpoctl.train.memory_estimate import ENTROPY_GRAPH_BYTES_PER_ELEMENT, estimate_peak_memory

    # What autograd really keeps for the entropy's backward, beyond the logits themselves.
    logits = torch.randn(16, 50, requires_grad=True)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        compute_entropy(logits)
    fresh = {t.data_ptr(): t.numel() * t.element_size() for t in kept if t.data_ptr() != logits.data_ptr()}
    big = sum(size for size in fresh.values() if size >= logits.numel() * 4)
    assert big == ENTROPY_GRAPH_BYTES_PER_ELEMENT * logits.numel()

    qwen = arch_from_hf_config(KNOWN_CONFIGS["Qwen/Qwen2.5-Math-1.5B"])
    preset = ["runtime.device=cuda", "rollout.backend=hf", "rollout.max_tokens=1024"]
    sizes = ["rollout.rollout_batch_size=8", "loop.train_batch_size=8", "loop.gradient_accumulation_steps=8"]
    plain = estimate_peak_memory(qwen, load_config(None, preset + sizes), prompt_tokens=0)
    bonus = estimate_peak_memory(qwen, load_config(None, [*preset, *sizes, "loss.entropy_coef=0.01"]), prompt_tokens=0)
    extra = bonus["entropy bonus graph"]
    assert extra == 1 * 1024 * 151_936 * 8  # microbatch 1 x 1,024 tokens x vocabulary x 8 B: 1.2 GB
    assert bonus.phase_bytes("backward") == plain.phase_bytes("backward") + extra


# --------------------------------------------------------------------------- config


def test_neutral_defaults_leave_the_hash_and_others_change_it():
    base = config_hash(load_config(None, []))
    neutral = [
        "reward.overlong_buffer_len=null",
        "reward.overlong_penalty_factor=1.0",
        "loss.mask_truncated=false",
        "loss.entropy_coef=0",
        "reward.shuffled_control=false",
    ]
    assert config_hash(load_config(None, neutral)) == base
    knobs = (
        "reward.overlong_buffer_len=8",
        "loss.mask_truncated=true",
        "loss.entropy_coef=0.01",
        "reward.shuffled_control=true",
    )
    for knob in knobs:
        assert config_hash(load_config(None, [knob])) != base, knob


@pytest.mark.parametrize(
    "override, message",
    [
        ("reward.overlong_buffer_len=64", "exceeds rollout.max_tokens"),
        ("reward.overlong_buffer_len=0", "reward.overlong_buffer_len"),
        ("reward.overlong_penalty_factor=-1", "reward.overlong_penalty_factor"),
        ("loss.entropy_coef=-0.1", "loss.entropy_coef"),
    ],
)
def test_knob_values_are_range_checked(override, message):
    with pytest.raises(UserError, match=message):
        load_config(None, [override])


# --------------------------------------------------------------------------- a tiny run


@pytest.mark.slow  # two in-process training steps: ~10 s
def test_a_tiny_run_records_each_knob_acting(tmp_path, tiny_model_dir):
    # A random model stops when it samples a digit (about 4% a token here), so within 6
    # tokens some rollouts stop and most are cut off: masked, and inside the 4-token buffer.
    args = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "loop.n_grpo_steps": 2,
            "rollout.max_tokens": 6,
            "eval.max_tokens": 6,
            "rollout.stop": "[0,1,2,3,4,5,6,7,8,9]",
            "reward.overlong_buffer_len": 4,
            "loss.mask_truncated": "true",
            "loss.entropy_coef": 0.01,
            "eval.every": 0,
        },
    )
    db = tmp_path / "registry.db"
    out = invoke("train", "addition", *args, f"--db={db}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    from grpoctl.registry import Registry

    names = [
        metrics.OVERLONG_PENALTY,
        metrics.OVERLONG_PENALIZED_FRACTION,
        metrics.LOSS_MASKED_FRACTION,
        metrics.RESPONSE_CLIP_FRACTION,
        metrics.ENTROPY_BONUS,
    ]
    with Registry(str(db), must_exist=True, readonly=True) as registry:
        series = registry.metric_series(registry.list_runs()[0].id, names)
    for name in names:
        assert [step for step, _ in series[name]] == [1, 2], name
    masked = [v for _, v in series[metrics.LOSS_MASKED_FRACTION]]
    assert masked == [v for _, v in series[metrics.RESPONSE_CLIP_FRACTION]]  # every cut-off rollout is masked
    assert all(0 < v < 1 for v in masked), masked
    # Each cut-off rollout has 6 tokens, the buffer's end: a penalty of the whole factor (1).
    assert all(p >= m for (_, p), m in zip(series[metrics.OVERLONG_PENALTY], masked, strict=True))
    assert all(0 < v <= 1 for _, v in series[metrics.OVERLONG_PENALIZED_FRACTION])
    assert all(v > 0 for _, v in series[metrics.ENTROPY_BONUS])
