"""One microbatch of a training step: per-token loss -> scalar -> backward.

The optimizer step happens outside, after `gradient_accumulation_steps` calls;
dividing each microbatch loss by that count makes the accumulated gradient the
gradient of the batch mean.

Length normalization decides how a sequence's token losses become one number,
and so how much gradient each token gets:
  mean        per-sequence mean over response tokens (CS336): short answers weigh more per token;
  constant    per-sequence sum / normalize_constant (Dr. GRPO, the max generation length):
              every token weighs the same, whatever the length and the microbatching;
  microbatch  per-sequence sum / longest response in the microbatch: between the two,
              but it depends on how the batch was cut, so accumulation is not exact;
  token       the microbatch's token sum / the response tokens of its whole train batch
              (DAPO's token-mean; TRL's loss_type="dapo", verl's loss_agg_mode="token-mean"):
              every token of the train batch weighs the same, however it was cut, and
              the sum over its microbatches is already the mean (no division by their count).

`PolicyGradientLoss` is the loss settings of a run as one object, built once from the
config; `grpo_microbatch_train_step` is CS336's function over the same code.
"""

from dataclasses import dataclass
from functools import cached_property

import torch

from grpoctl.rules import LENGTH_NORMALIZATIONS

from .losses import LossFunction, LossInputs, check_importance_level, compute_tis_weights, policy_gradient_loss
from .masked import masked_mean_or_zero, masked_min_max, masked_normalize
from .plugins import loss_function


def _only_response(values: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
    """Zero the positions outside the response, (batch, seq) -> (batch, seq).

    Pad positions may hold anything (inf, nan); even with zero upstream gradient,
    exp(inf) in a ratio would backpropagate 0 * inf = nan. Replacing them first
    makes every later step see finite numbers there, with zero gradient.
    """
    if values is None:
        return None
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def _per_sequence_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    length_normalization: str,
    normalize_constant: float | None,
) -> torch.Tensor:
    """(batch, seq) per-token loss -> (batch,) per-sequence loss."""
    if length_normalization == "mean":
        return masked_mean_or_zero(per_token, mask, dim=-1)
    if length_normalization == "constant":
        if normalize_constant is None:
            raise ValueError("length_normalization='constant' needs normalize_constant (the max generation length)")
        return masked_normalize(per_token, mask, dim=-1, normalize_constant=normalize_constant)
    if length_normalization == "microbatch":
        longest = mask.sum(dim=-1).max().clamp_min(1).to(per_token.dtype)
        return masked_normalize(per_token, mask, dim=-1) / longest
    raise ValueError(
        f"unknown length_normalization {length_normalization!r}; valid: {', '.join(LENGTH_NORMALIZATIONS)}"
    )


def token_mean_loss(
    per_token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    batch_response_tokens: float,
) -> torch.Tensor:
    """One microbatch's share of its train batch's token-mean loss.

    per_token_loss, response_mask: (batch, seq); batch_response_tokens: the number of
    response tokens in the whole train batch this microbatch belongs to. Returns a
    scalar: the sum of the microbatch's response-token losses / batch_response_tokens.
    Summed over the train batch's microbatches it is the mean over all their response
    tokens, equal whether the batch was cut into 1, 2 or 4 microbatches.
    """
    return masked_normalize(per_token_loss, response_mask, normalize_constant=float(batch_response_tokens))


@torch.no_grad()
def _log_stats(
    microbatch_loss: torch.Tensor,
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_metadata: dict[str, torch.Tensor],
    entropy_bonus: torch.Tensor | None = None,
    tis: dict[str, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Python floats over the response tokens, fetched with a single device sync."""
    stats = {"loss": microbatch_loss, "token_loss_mean": masked_mean_or_zero(per_token, mask)}
    stats |= tis or {}
    if entropy_bonus is not None:
        stats["entropy_bonus"] = entropy_bonus
    if "clipped" in loss_metadata:
        stats["clip_fraction"] = masked_mean_or_zero(loss_metadata["clipped"].float(), mask)
    if "ratio" in loss_metadata:
        ratio = loss_metadata["ratio"]
        stats["ratio_mean"] = masked_mean_or_zero(ratio, mask)
        stats["ratio_min"], stats["ratio_max"] = masked_min_max(ratio, mask)
    if "kl" in loss_metadata:
        stats["kl"] = masked_mean_or_zero(loss_metadata["kl"], mask)
    values = torch.stack([v.detach().float().reshape(()) for v in stats.values()]).tolist()
    return dict(zip(stats, values, strict=True))


@dataclass(frozen=True)
class PolicyGradientLoss:
    """A run's policy-gradient loss: the loss settings, built once (from cfg.loss).

    See compute_policy_gradient_loss for loss_type (a built-in's name, or a loss plugin's
    spec: grpo/plugins.py), cliprange, cliprange_high, importance_level, kl_beta and the
    cispo bounds, and this module's docstring for length_normalization
    (normalize_constant is `constant`'s divisor: the max generation length).
    entropy_coef > 0 subtracts entropy_coef x token entropy, reduced with the same
    length normalization as the policy-gradient term (an entropy bonus; 0 is off).
    tis_cap (not None) weighs each token's policy-gradient loss by TIS's
    min(pi_old / pi_sampler, tis_cap) (compute_tis_weights; None is off).
    """

    loss_type: str
    length_normalization: str = "mean"
    cliprange: float | None = None
    cliprange_high: float | None = None
    importance_level: str = "token"
    kl_beta: float = 0.0
    normalize_constant: float | None = None
    entropy_coef: float = 0.0
    tis_cap: float | None = None
    cispo_ratio_max: float = 5.0
    cispo_ratio_min: float | None = None

    @cached_property
    def loss_fn(self) -> LossFunction:
        """loss_type's function: the built-in's, or the plugin's (imported once)."""
        check_importance_level(self.loss_type, self.importance_level)
        return loss_function(self.loss_type)

    def microbatch_train_step(
        self,
        policy_log_probs: torch.Tensor,
        response_mask: torch.Tensor,
        gradient_accumulation_steps: int,
        raw_rewards: torch.Tensor | None = None,
        advantages: torch.Tensor | None = None,
        old_log_probs: torch.Tensor | None = None,
        ref_log_probs: torch.Tensor | None = None,
        batch_response_tokens: float | None = None,
        token_entropy: torch.Tensor | None = None,
        sampled_log_probs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """This loss on one microbatch, backpropagated: see grpo_microbatch_train_step.

        batch_response_tokens: the response tokens of the whole train batch, which
        length_normalization="token" divides by (and needs). token_entropy: (batch, seq),
        with its graph; needed when entropy_coef > 0. sampled_log_probs: (batch, seq), the
        sampler's log-probs of the tokens; needed (with old_log_probs) when tis_cap is set.
        """
        mask = response_mask.bool()
        weights, tis = None, None
        if self.tis_cap is not None:
            if sampled_log_probs is None or old_log_probs is None:
                raise ValueError(f"tis_cap={self.tis_cap} needs old_log_probs and the sampler's sampled_log_probs")
            weights, tis = compute_tis_weights(
                _only_response(old_log_probs, mask), _only_response(sampled_log_probs, mask), self.tis_cap, mask
            )
        inputs = LossInputs(
            _only_response(policy_log_probs, mask),
            mask,
            advantages=advantages,
            raw_rewards=raw_rewards,
            old_log_probs=_only_response(old_log_probs, mask),
            cliprange=self.cliprange,
            cliprange_high=self.cliprange_high,
            importance_level=self.importance_level,
            cispo_ratio_max=self.cispo_ratio_max,
            cispo_ratio_min=self.cispo_ratio_min,
        )
        per_token, loss_metadata = policy_gradient_loss(
            self.loss_fn, inputs, _only_response(ref_log_probs, mask), self.kl_beta, weights
        )
        loss, microbatch_loss = self._reduce(per_token, mask, gradient_accumulation_steps, batch_response_tokens)
        bonus = None
        if self.entropy_coef > 0:
            if token_entropy is None:
                raise ValueError(f"entropy_coef={self.entropy_coef} needs token_entropy (with its graph)")
            zero = torch.zeros((), dtype=token_entropy.dtype, device=token_entropy.device)
            per_token_bonus = self.entropy_coef * torch.where(mask, token_entropy, zero)  # pads may hold nan
            bonus_loss, bonus = self._reduce(per_token_bonus, mask, gradient_accumulation_steps, batch_response_tokens)
            loss, microbatch_loss = loss - bonus_loss, microbatch_loss - bonus
        loss.backward()
        return loss.detach(), _log_stats(microbatch_loss, per_token, mask, loss_metadata, bonus, tis)

    def _reduce(
        self, per_token: torch.Tensor, mask: torch.Tensor, gradient_accumulation_steps: int, batch_tokens: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, seq) per-token values -> (the scalar to backpropagate, the microbatch's
        value as logged: the one whose mean over a train batch's microbatches is the batch's)."""
        if self.length_normalization == "token":
            if batch_tokens is None:
                raise ValueError(
                    "length_normalization='token' needs batch_response_tokens "
                    "(the response tokens of the whole train batch)"
                )
            loss = token_mean_loss(per_token, mask, batch_tokens)
            return loss, loss * gradient_accumulation_steps
        microbatch = _per_sequence_loss(per_token, mask, self.length_normalization, self.normalize_constant).mean()
        return microbatch / gradient_accumulation_steps, microbatch


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    length_normalization: str = "mean",
    normalize_constant: float | None = None,
    cliprange_high: float | None = None,
    importance_level: str = "token",
    ref_log_probs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    batch_response_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy-gradient loss of one microbatch, backpropagated.

    policy_log_probs (requires grad), response_mask, old_log_probs, ref_log_probs:
    (batch, seq); raw_rewards, advantages: (batch, 1).
    The per-token loss (see compute_policy_gradient_loss) is reduced per sequence by
    `length_normalization`, averaged over the batch, divided by
    gradient_accumulation_steps, and .backward() is called on it; "token" instead
    divides the microbatch's token sum by batch_response_tokens (token_mean_loss).
    Returns (that scaled loss, detached; metadata of python floats over response
    tokens: loss (unscaled: its mean over a train batch's microbatches is the batch's
    loss), token_loss_mean, and when they apply clip_fraction, ratio_mean /
    ratio_min / ratio_max, kl).
    """
    loss = PolicyGradientLoss(
        loss_type, length_normalization, cliprange, cliprange_high, importance_level, kl_beta, normalize_constant
    )
    return loss.microbatch_train_step(
        policy_log_probs,
        response_mask,
        gradient_accumulation_steps,
        raw_rewards=raw_rewards,
        advantages=advantages,
        old_log_probs=old_log_probs,
        ref_log_probs=ref_log_probs,
        batch_response_tokens=batch_response_tokens,
    )


def sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Negative log-likelihood of the response tokens of one microbatch, backpropagated.

    policy_log_probs (requires grad), response_mask: (batch, seq).
    loss = mean over the batch of -masked_normalize(log p, mask, dim=-1, normalize_constant),
    divided by gradient_accumulation_steps; .backward() is called on it.
    Returns (that scaled loss, detached; {"loss": unscaled, "response_tokens": count}).
    """
    mask = response_mask.bool()
    nll = -masked_normalize(policy_log_probs, mask, dim=-1, normalize_constant=normalize_constant)
    microbatch_loss = nll.mean()
    loss = microbatch_loss / gradient_accumulation_steps
    loss.backward()
    stats = torch.stack([microbatch_loss.detach().float(), mask.sum().float()]).tolist()
    return loss.detach(), {"loss": stats[0], "response_tokens": stats[1]}
