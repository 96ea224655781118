"""A user-written loss plugin and advantage plugin (docs/loss-plugins.md).

    grpoctl train lab loss.loss_type=examples/losses/clipped.py:clipped
    grpoctl train lab loss.advantage_estimator=examples/losses/clipped.py:group_median

`clipped` is PPO's clipped surrogate written from the plugin contract alone: a run with it
records the same numbers as `loss.loss_type=grpo_clip` (tests/test_loss_plugins.py), so it
is a starting point to edit. `group_median` is an advantage estimator: each reward against
its group's median instead of its mean. grpoctl imports this file by its path and calls
each function in the trainer's process, once per microbatch (the loss) or per step (the
estimator); a call that raises or returns the wrong shape stops the run with one line.
"""

from __future__ import annotations

import torch


def clipped(inputs):
    """-min(ratio * A, clip(ratio, 1 - lo, 1 + hi) * A) per token, (batch, seq).

    inputs: grpoctl.grpo.LossInputs; its tensors are (batch, seq) but the advantages,
    (batch, 1), and its settings are the config's loss.* keys. Returns the per-token loss
    and what the train step logs: "clipped" (where the clipped term was taken:
    train/clip_fraction) and "ratio" (train/ratio_mean, _min, _max).
    """
    high = inputs.cliprange if inputs.cliprange_high is None else inputs.cliprange_high
    advantages = inputs.advantages.reshape(-1, 1).to(inputs.policy_log_probs.dtype)
    ratio = inputs.importance_ratio()  # pi / pi_old, per token (or per sequence: GSPO)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - inputs.cliprange, 1 + high) * advantages
    return -torch.minimum(unclipped, clipped), {"clipped": clipped < unclipped, "ratio": ratio.detach()}


def group_median(inputs):
    """r - median(group), (rollout_batch_size,): a baseline that one lucky answer cannot move
    (torch.median: the lower of the two middle rewards of an even group).

    inputs: grpoctl.grpo.AdvantageInputs (rewards, groups of group_size contiguous)."""
    grouped = inputs.rewards.reshape(-1, inputs.group_size)
    return (grouped - grouped.median(dim=1, keepdim=True).values).reshape(-1)
