"""Per-token policy-gradient losses: the four variants the seed ablates, plus extras.

Every loss here is per token, shape (batch, seq); how tokens are summed into one
number (length normalization) is the train step's job. Advantages and rewards
are one number per sequence, (batch, 1) or (batch,), broadcast over its tokens.

Extras beyond CS336, each off by default:
  - clip-higher (DAPO): a larger upper clip bound, `cliprange_high`, lets
    low-probability tokens that turned out good grow faster, fighting entropy collapse;
  - sequence-level importance ratio (GSPO): one ratio per sequence, the geometric
    mean of its token ratios, so a single noisy token cannot swing its clipping;
  - a KL penalty to a reference policy with the k3 estimator (always >= 0, unbiased);
  - truncated importance sampling (TIS) for the sampler/trainer mismatch: the rollouts
    were drawn by the sampler (vLLM, or the lean decoder), whose log-probs differ a
    little from the trainer's; each token's policy-gradient loss is weighed by
    min(pi_old / pi_sampler, cap), detached.
"""

import torch

from grpoctl.rules import IMPORTANCE_LEVELS, LOSS_TYPES, RATIO_FREE_LOSSES

from .masked import masked_mean_or_zero, masked_min_max


def _per_sequence(values: torch.Tensor) -> torch.Tensor:
    """(batch,) or (batch, 1) -> (batch, 1), ready to broadcast over tokens."""
    return values.reshape(-1, 1)


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
) -> torch.Tensor:
    """REINFORCE: -A * log p per token.

    raw_rewards_or_advantages: (batch, 1); policy_log_probs: (batch, seq). Returns (batch, seq).
    """
    return -_per_sequence(raw_rewards_or_advantages).to(policy_log_probs.dtype) * policy_log_probs


def compute_importance_ratio(
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    importance_level: str = "token",
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """pi / pi_old, per token or per sequence, as a (batch, seq) tensor.

    policy_log_probs, old_log_probs, response_mask: (batch, seq).
    "token": exp(log p - old log p) at each position.
    "sequence" (GSPO): exp(mean over response tokens of (log p - old log p)), the same
    value at every position of the sequence; needs response_mask.
    """
    log_ratio = policy_log_probs - old_log_probs
    if importance_level == "token":
        return torch.exp(log_ratio)
    if importance_level == "sequence":
        if response_mask is None:
            raise ValueError("importance_level='sequence' needs response_mask to average over response tokens")
        seq_log_ratio = masked_mean_or_zero(log_ratio, response_mask, dim=-1).unsqueeze(-1)
        return torch.exp(seq_log_ratio).expand_as(log_ratio)
    raise ValueError(f"unknown importance_level {importance_level!r}; valid levels: {', '.join(IMPORTANCE_LEVELS)}")


def compute_k3_kl(policy_log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi || pi_ref) per token: exp(ref - log p) - (ref - log p) - 1.

    Both (batch, seq). Returns (batch, seq), >= 0, zero exactly where the two agree.
    """
    log_ratio = ref_log_probs - policy_log_probs
    return torch.exp(log_ratio) - log_ratio - 1


def add_kl_penalty(
    loss: torch.Tensor,
    metadata: dict[str, torch.Tensor],
    policy_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor | None,
    kl_beta: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Add kl_beta * k3 to a per-token loss; record k3 as metadata["kl"].

    All tensors (batch, seq). k3 is recorded whenever ref_log_probs is given, even
    with kl_beta == 0, so drift from the reference can be watched without penalizing it.
    """
    if kl_beta and ref_log_probs is None:
        raise ValueError(f"kl_beta={kl_beta} needs ref_log_probs from the reference policy")
    if ref_log_probs is None:
        return loss, metadata
    kl = compute_k3_kl(policy_log_probs, ref_log_probs)
    if kl_beta:
        loss = loss + kl_beta * kl
    return loss, {**metadata, "kl": kl.detach()}


def compute_tis_weights(
    old_log_probs: torch.Tensor, sampled_log_probs: torch.Tensor, cap: float, response_mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TIS weights w = min(exp(old log p - sampler log p), cap), detached, and their statistics.

    All (batch, seq); old_log_probs are the trainer's under the weights that generated the
    rollout, sampled_log_probs the sampler's for the same tokens (after temperature and
    top-p). Returns (w (batch, seq), 1 outside the response; {"tis_delta_mean",
    "tis_delta_max": |old - sampled| over response tokens, "tis_weight_mean",
    "tis_capped_fraction": scalars}).
    """
    mask = response_mask.bool()
    delta = torch.where(mask, old_log_probs.detach() - sampled_log_probs, torch.zeros((), dtype=old_log_probs.dtype))
    raw = torch.exp(delta)
    weights = torch.where(mask, torch.clamp(raw, max=cap), torch.ones((), dtype=raw.dtype))
    _, delta_max = masked_min_max(delta.abs(), mask)
    stats = {
        "tis_delta_mean": masked_mean_or_zero(delta.abs(), mask),
        "tis_delta_max": delta_max,
        "tis_weight_mean": masked_mean_or_zero(weights, mask),
        "tis_capped_fraction": masked_mean_or_zero((raw > cap).float(), mask),
    }
    return weights.detach(), stats


def compute_grpo_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    cliprange: float,
    cliprange_high: float | None = None,
    importance_level: str = "token",
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-style clipped surrogate: -min(ratio * A, clip(ratio, 1 - lo, 1 + hi) * A).

    advantages: (batch, 1); policy_log_probs, old_log_probs, response_mask: (batch, seq).
    lo = cliprange, hi = cliprange_high (defaults to cliprange; larger is DAPO's
    clip-higher). A KL penalty is compute_policy_gradient_loss's to add, for every loss.
    Returns (loss (batch, seq), {"clipped": (batch, seq) bool, True where the clipped
    term was strictly smaller and so was taken, "ratio": (batch, seq) detached}).
    """
    high = cliprange if cliprange_high is None else cliprange_high
    adv = _per_sequence(advantages).to(policy_log_probs.dtype)
    ratio = compute_importance_ratio(policy_log_probs, old_log_probs, importance_level, response_mask)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - cliprange, 1 + high) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, {"clipped": clipped < unclipped, "ratio": ratio.detach()}


def compute_grpo_no_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    importance_level: str = "token",
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Unclipped importance-weighted surrogate: -ratio * A.

    advantages: (batch, 1); the rest (batch, seq). Returns (loss (batch, seq),
    {"clipped": all False, "ratio": (batch, seq) detached}).
    """
    adv = _per_sequence(advantages).to(policy_log_probs.dtype)
    ratio = compute_importance_ratio(policy_log_probs, old_log_probs, importance_level, response_mask)
    return -ratio * adv, {"clipped": torch.zeros_like(ratio, dtype=torch.bool), "ratio": ratio.detach()}


def _require(loss_type: str, **inputs: object) -> None:
    missing = [name for name, value in inputs.items() if value is None]
    if missing:
        raise ValueError(f"loss_type {loss_type!r} needs {', '.join(inputs)}; missing: {', '.join(missing)}")


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    cliprange_high: float | None = None,
    importance_level: str = "token",
    response_mask: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch to one of LOSS_TYPES and optionally add a KL penalty (the one place one is added).

    policy_log_probs, old_log_probs, ref_log_probs, response_mask: (batch, seq);
    raw_rewards, advantages: (batch, 1).
      no_baseline: -raw_reward * log p        reinforce_with_baseline: -A * log p
      grpo_clip: clipped surrogate            grpo_no_clip: -ratio * A
    ref_log_probs / kl_beta: see add_kl_penalty (applies to every loss type).
    token_weights: (batch, seq), detached, multiply the policy-gradient term (not the KL
    penalty): TIS's weights (compute_tis_weights).
    Returns (loss (batch, seq), metadata of (batch, seq) tensors).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; valid types: {', '.join(LOSS_TYPES)}")
    if importance_level not in IMPORTANCE_LEVELS:
        raise ValueError(f"unknown importance_level {importance_level!r}; valid levels: {', '.join(IMPORTANCE_LEVELS)}")
    if importance_level == "sequence" and loss_type in RATIO_FREE_LOSSES:
        raise ValueError(f"importance_level='sequence' needs a ratio: use grpo_clip or grpo_no_clip, not {loss_type!r}")

    metadata: dict[str, torch.Tensor]
    if loss_type == "no_baseline":
        _require(loss_type, raw_rewards=raw_rewards)
        loss, metadata = compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    elif loss_type == "reinforce_with_baseline":
        _require(loss_type, advantages=advantages)
        loss, metadata = compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    elif loss_type == "grpo_clip":
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs, cliprange=cliprange)
        assert cliprange is not None  # for the type checker: _require refused None
        loss, metadata = compute_grpo_clip_loss(
            advantages,
            policy_log_probs,
            old_log_probs,
            cliprange,
            cliprange_high=cliprange_high,
            importance_level=importance_level,
            response_mask=response_mask,
        )
    elif loss_type == "grpo_no_clip":
        _require(loss_type, advantages=advantages, old_log_probs=old_log_probs)
        loss, metadata = compute_grpo_no_clip_loss(
            advantages,
            policy_log_probs,
            old_log_probs,
            importance_level=importance_level,
            response_mask=response_mask,
        )
    else:
        # A name in LOSS_TYPES that no branch above computes must not train as another loss.
        raise ValueError(
            f"loss_type {loss_type!r} is in LOSS_TYPES but compute_policy_gradient_loss has no branch for it"
        )

    if token_weights is not None:
        loss = loss * token_weights.to(loss.dtype)
    return add_kl_penalty(loss, metadata, policy_log_probs, ref_log_probs, kl_beta)
