"""What happens to a rollout's reward before its group is normalised.

Two of DAPO's knobs for long rollouts, and a control, each off by default:

  soft overlong punishment  (reward.overlong_buffer_len, reward.overlong_penalty_factor)
      r <- r + min(0, -(|y| - (L_max - L_buf)) / L_buf * lambda)
      with L_max = rollout.max_tokens, L_buf the buffer, lambda the factor. A response
      shorter than L_max - L_buf keeps its reward; inside the buffer the penalty grows
      linearly, to -lambda at L_max. Applied to the reward before group normalisation,
      so a group's long answers lose advantage to its short ones.

  overlong masking  (loss.mask_truncated)
      a completion that reached max_tokens without a stop gets zero loss weight. It keeps
      its place in its group's mean and std (its reward is still evidence about the
      prompt), as in TRL's mask_truncated_completions. Its tokens leave the loss: under
      `token` normalisation they leave the train batch's token count; under `mean`,
      `constant` and `microbatch` the sequence contributes a zero loss but still counts in
      the batch mean over sequences (TRL's grpo and dr_grpo do the same).

  shuffled-reward control  (reward.shuffled_control)
      the rewards are permuted across the rollout batch before normalisation, so the
      policy learns from noise with the real reward's distribution. A run that still
      gains under it gained from something other than the reward (format, length drift).
"""

from __future__ import annotations

import torch


def overlong_penalty(
    response_lengths: torch.Tensor, max_tokens: int, buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """DAPO's soft overlong punishment: (batch,) lengths in tokens -> (batch,) penalties <= 0.

    penalty = min(0, -(length - (max_tokens - buffer_len)) / buffer_len * penalty_factor).
    """
    if not 0 < buffer_len <= max_tokens:
        raise ValueError(f"buffer_len must be in (0, max_tokens={max_tokens}], got {buffer_len}")
    expected = max_tokens - buffer_len
    exceed = response_lengths.to(torch.float32) - expected
    return torch.clamp(-exceed / buffer_len * penalty_factor, max=0.0)


def loss_rows(truncated: list[bool], mask_truncated: bool) -> torch.Tensor:
    """(batch,) bool: the rollouts whose tokens enter the loss (all, unless truncated ones are masked)."""
    keep = torch.ones(len(truncated), dtype=torch.bool)
    if mask_truncated:
        keep &= ~torch.tensor(truncated, dtype=torch.bool)
    return keep


def permute_rewards(raw_rewards: torch.Tensor, seed: int) -> torch.Tensor:
    """The rewards of a rollout batch in a random order: the shuffled-reward control.

    Args:
        raw_rewards: (rollout_batch_size,) each completion's reward.
        seed: the permutation's seed (the same batch and seed give the same order).

    Returns:
        (rollout_batch_size,) the same values, each moved to a random completion, across
        groups: a group's advantages then say nothing about its own completions.
    """
    generator = torch.Generator().manual_seed(seed)
    return raw_rewards[torch.randperm(raw_rewards.numel(), generator=generator)]
