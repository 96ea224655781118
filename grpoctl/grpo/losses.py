"""Per-token policy-gradient losses: the four variants the seed ablates, plus extras.

Every loss is a function of one `LossInputs` returning (per-token loss, metadata), and
LOSS_FUNCTIONS is the table of the built-in ones by name (their names, LOSS_TYPES, are
declared with the config key). A loss plugin (grpo/plugins.py) is called the same way.

Every loss here is per token, shape (batch, seq); how tokens are summed into one
number (length normalization) is the train step's job. Advantages and rewards
are one number per sequence, (batch, 1) or (batch,), broadcast over its tokens.

Extras beyond CS336, each off by default:
  - clip-higher (DAPO): a larger upper clip bound, `cliprange_high`, lets
    low-probability tokens that turned out good grow faster, fighting entropy collapse;
  - sequence-level importance ratio (GSPO): one ratio per sequence, the geometric
    mean of its token ratios, so a single noisy token cannot swing its clipping;
  - a KL penalty to a reference policy with the k3 estimator (always >= 0, unbiased);
  - CISPO (MiniMax-M1): the importance ratio, capped and with its gradient stopped,
    weighs -A * log p, so no token's gradient is ever clipped away;
  - truncated importance sampling (TIS) for the sampler/trainer mismatch: the rollouts
    were drawn by the sampler (vLLM, or the lean decoder), whose log-probs differ a
    little from the trainer's; each token's policy-gradient loss is weighed by
    min(pi_old / pi_sampler, cap), detached.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpoctl.rules import IMPORTANCE_LEVELS, LOSS_TYPES, RATIO_FREE_LOSSES

from .masked import masked_mean_or_zero, masked_min_max
from .tables import builtin


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


def compute_cispo_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    ratio_max: float,
    ratio_min: float | None = None,
    importance_level: str = "token",
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1): -sg(clip(ratio, ratio_min, ratio_max)) * A * log p per token.

    advantages: (batch, 1); the rest (batch, seq). The ratio only weighs each token's
    REINFORCE term: unlike the clipped surrogate, no token's gradient is zeroed. The bounds
    are on the ratio itself, as TRL's epsilon_high under loss_type="cispo"; ratio_min None
    is no floor (MiniMax-M1 and TRL set none). Returns (loss (batch, seq), {"clipped":
    (batch, seq) bool, True where the ratio was outside the bounds, "ratio": detached}).
    """
    adv = _per_sequence(advantages).to(policy_log_probs.dtype)
    ratio = compute_importance_ratio(policy_log_probs, old_log_probs, importance_level, response_mask).detach()
    weight = torch.clamp(ratio, min=ratio_min, max=ratio_max)
    return -weight * adv * policy_log_probs, {"clipped": weight != ratio, "ratio": ratio}


@dataclass(frozen=True)
class LossInputs:
    """What every policy-gradient loss is given: one microbatch and the run's loss settings.

    policy_log_probs: (batch, seq), with the graph to the policy's weights;
    old_log_probs: (batch, seq), the log-probs of the policy that sampled the rollouts
    (detached; on-policy, policy_log_probs' own values); response_mask: (batch, seq) bool;
    advantages, raw_rewards: (batch, 1). Positions outside the response hold zeros.
    The settings are the config's loss.* keys of the same names.
    """

    policy_log_probs: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor | None = None
    raw_rewards: torch.Tensor | None = None
    old_log_probs: torch.Tensor | None = None
    cliprange: float | None = None
    cliprange_high: float | None = None
    importance_level: str = "token"
    cispo_ratio_max: float = 5.0
    cispo_ratio_min: float | None = None

    def importance_ratio(self) -> torch.Tensor:
        """pi / pi_old at importance_level, (batch, seq) (compute_importance_ratio)."""
        return compute_importance_ratio(
            self.policy_log_probs, self._needs("old_log_probs"), self.importance_level, self.response_mask
        )

    def _needs(self, name: str) -> torch.Tensor:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"this loss needs {name}, and {name} is missing")
        return value


# A loss: LossInputs -> (per-token loss (batch, seq), metadata of (batch, seq) tensors; the
# train step reads "clipped" (bool) and "ratio" when they are there).
LossFunction = Callable[[LossInputs], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def _no_baseline(x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return compute_naive_policy_gradient_loss(x._needs("raw_rewards"), x.policy_log_probs), {}


def _reinforce_with_baseline(x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return compute_naive_policy_gradient_loss(x._needs("advantages"), x.policy_log_probs), {}


def _ratio_loss(
    compute: Callable, x: LossInputs, *bounds: float | None, **options: float | None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """compute(advantages, policy_log_probs, old_log_probs, *bounds, ...) at x's importance level and mask."""
    return compute(
        x._needs("advantages"),
        x.policy_log_probs,
        x._needs("old_log_probs"),
        *bounds,
        importance_level=x.importance_level,
        response_mask=x.response_mask,
        **options,
    )


def _grpo_clip(x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if x.cliprange is None:
        raise ValueError("grpo_clip needs cliprange, and cliprange is missing")
    return _ratio_loss(compute_grpo_clip_loss, x, x.cliprange, cliprange_high=x.cliprange_high)


def _grpo_no_clip(x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return _ratio_loss(compute_grpo_no_clip_loss, x)


def _cispo(x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return _ratio_loss(compute_cispo_loss, x, x.cispo_ratio_max, x.cispo_ratio_min)


# The built-in losses by name, in LOSS_TYPES' order (tests/test_recipe_tables.py).
LOSS_FUNCTIONS: dict[str, LossFunction] = {
    "no_baseline": _no_baseline,
    "reinforce_with_baseline": _reinforce_with_baseline,
    "grpo_clip": _grpo_clip,
    "grpo_no_clip": _grpo_no_clip,
    "cispo": _cispo,
}


def builtin_loss(loss_type: str) -> LossFunction:
    """The built-in loss named `loss_type`; ValueError naming the valid ones otherwise."""
    return builtin(LOSS_FUNCTIONS, LOSS_TYPES, loss_type, "loss_type", ("LOSS_TYPES", "LOSS_FUNCTIONS"))


def check_importance_level(loss_type: str, importance_level: str) -> None:
    """ValueError for a sequence-level ratio (GSPO) asked of a loss that has no ratio."""
    if importance_level == "sequence" and loss_type in RATIO_FREE_LOSSES:
        raise ValueError(
            f"importance_level='sequence' needs a ratio: use grpo_clip, grpo_no_clip or cispo, not {loss_type!r}"
        )


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
    cispo_ratio_max: float = 5.0,
    cispo_ratio_min: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The built-in loss `loss_type` (LOSS_FUNCTIONS), with an optional KL penalty.

    policy_log_probs, old_log_probs, ref_log_probs, response_mask: (batch, seq);
    raw_rewards, advantages: (batch, 1).
      no_baseline: -raw_reward * log p        reinforce_with_baseline: -A * log p
      grpo_clip: clipped surrogate            grpo_no_clip: -ratio * A
      cispo: -sg(capped ratio) * A * log p
    ref_log_probs / kl_beta, token_weights: see policy_gradient_loss.
    Returns (loss (batch, seq), metadata of (batch, seq) tensors).
    """
    loss_fn = builtin_loss(loss_type)
    check_importance_level(loss_type, importance_level)
    inputs = LossInputs(
        policy_log_probs,
        torch.ones_like(policy_log_probs, dtype=torch.bool) if response_mask is None else response_mask.bool(),
        advantages=advantages,
        raw_rewards=raw_rewards,
        old_log_probs=old_log_probs,
        cliprange=cliprange,
        cliprange_high=cliprange_high,
        importance_level=importance_level,
        cispo_ratio_max=cispo_ratio_max,
        cispo_ratio_min=cispo_ratio_min,
    )
    return policy_gradient_loss(loss_fn, inputs, ref_log_probs, kl_beta, token_weights)


def policy_gradient_loss(
    loss_fn: LossFunction,
    inputs: LossInputs,
    ref_log_probs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """loss_fn(inputs), weighed and penalized alike for every loss, built-in or plugin.

    token_weights: (batch, seq), detached, multiply the policy-gradient term (not the KL
    penalty): TIS's weights (compute_tis_weights). ref_log_probs (batch, seq) / kl_beta:
    add_kl_penalty, the one place a KL penalty is added. Returns (loss (batch, seq),
    metadata of (batch, seq) tensors).
    """
    if inputs.importance_level not in IMPORTANCE_LEVELS:
        raise ValueError(
            f"unknown importance_level {inputs.importance_level!r}; valid levels: {', '.join(IMPORTANCE_LEVELS)}"
        )
    loss, metadata = loss_fn(inputs)
    if token_weights is not None:
        loss = loss * token_weights.to(loss.dtype)
    return add_kl_penalty(loss, metadata, inputs.policy_log_probs, ref_log_probs, kl_beta)
