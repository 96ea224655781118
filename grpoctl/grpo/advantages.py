"""Group-relative advantages: how much better a rollout did than its siblings.

Rollouts come in contiguous groups of `group_size` answers to the same prompt.
Subtracting the group mean is the baseline (no critic needed); dividing by the
group std is GRPO's scaling, which Dr. GRPO argues against and the seed ablates.
A group whose rewards are all equal (every answer right, or every answer wrong)
carries no signal: its advantages are exactly zero, never nan from 0 / 0.

An advantage estimator is a function of one `AdvantageInputs`; ADVANTAGE_FUNCTIONS is the
table of the built-in ones by name (their names, ADVANTAGE_ESTIMATORS, are declared with
the config key), and an advantage plugin (grpo/plugins.py) is called the same way:
  group_mean  r - mean(group), / std(group) with use_std_normalization (GRPO; Dr. GRPO without);
  rloo        r - mean(the group's other answers) = G/(G-1) x (r - mean(group)) (RLOO);
  batch_std   r - mean(group), / std(rollout batch) (REINFORCE++-baseline, LitePPO, TRL's
              scale_rewards="batch").
rloo and batch_std differ from group_mean by one positive scalar per group or per batch,
which the clipped loss, Adam and gradient clipping nearly undo (tests/test_recipe_identities.py).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpoctl.rules import ADVANTAGE_ESTIMATORS

from .tables import builtin


def _grouped(raw_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(rollout_batch_size,) -> (n_groups, group_size)."""
    if group_size < 1 or raw_rewards.numel() % group_size != 0:
        raise ValueError(f"{raw_rewards.numel()} rewards do not split into groups of {group_size}")
    return raw_rewards.reshape(-1, group_size)


def _flat_groups(grouped: torch.Tensor) -> torch.Tensor:
    """(n_groups, group_size) -> (n_groups, 1) bool: True where every reward in the group is equal."""
    return (grouped == grouped[:, :1]).all(dim=1, keepdim=True)


def flat_groups(raw_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(rollout_batch_size,) rewards -> (n_groups,) bool: True for a group whose rewards are
    all equal (no GRPO signal: what dynamic sampling drops)."""
    return _flat_groups(_grouped(raw_rewards.float(), group_size)).reshape(-1)


def normalize_group_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> torch.Tensor:
    """Advantages from rewards, normalized within each group.

    raw_rewards: (rollout_batch_size,), groups contiguous. Returns (rollout_batch_size,) float:
    r - mean(group), divided by (std(group) + advantage_eps) when normalize_by_std
    (torch's unbiased std). Advantages sum to zero within each group.
    """
    grouped = _grouped(raw_rewards.float(), group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_by_std and group_size > 1:
        centered = centered / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    # The mean of equal floats need not round back to them exactly, and eps may be 0.
    advantages = torch.where(_flat_groups(grouped), torch.zeros_like(centered), centered)
    return advantages.reshape(-1)


def summarize_group_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    format_rewards: torch.Tensor | None = None,
    answer_rewards: torch.Tensor | None = None,
) -> dict[str, float]:
    """Python-float statistics of one rollout batch's rewards, for logging.

    raw_rewards, format_rewards, answer_rewards: (rollout_batch_size,).
    zero_std_group_fraction is the share of groups whose rewards are all equal:
    the share of prompts that teach nothing this step (a flat-reward early warning).
    """
    rewards = raw_rewards.float()
    stats = {
        "reward_mean": rewards.mean(),
        "reward_std": rewards.std() if rewards.numel() > 1 else torch.zeros(()),
        "reward_max": rewards.max(),
        "reward_min": rewards.min(),
        "zero_std_group_fraction": _flat_groups(_grouped(rewards, group_size)).float().mean(),
    }
    if format_rewards is not None:
        stats["format_reward_mean"] = format_rewards.float().mean()
    if answer_rewards is not None:
        stats["answer_reward_mean"] = answer_rewards.float().mean()
    return {name: float(value) for name, value in stats.items()}


def success_count_shares(right: torch.Tensor, group_size: int) -> dict[str, float]:
    """The share of groups by how many of their G rollouts are right, for logging.

    right: (rollout_batch_size,) bool or 0/1, groups contiguous. "rare" is 1 or 2 right of
    G, the groups whose std is smallest among mixed ones, so that dividing by it weighs them
    most; "near_all" is at least G-1 right of G.
    """
    counts = _grouped(right.float(), group_size).sum(dim=1)
    return {
        "rare": float(((counts >= 1) & (counts <= 2)).float().mean()),
        "near_all": float((counts >= group_size - 1).float().mean()),
    }


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Score every rollout with `reward_fn` and normalize rewards within groups.

    reward_fn(response, ground_truth) -> {"reward", and optionally "format_reward",
    "answer_reward"}. Both lists have length rollout_batch_size, groups contiguous.
    Returns (advantages (rollout_batch_size,), raw_rewards (rollout_batch_size,),
    metadata of python floats: reward mean/std/max/min, format and answer reward
    means when reward_fn gives them, zero_std_group_fraction, advantage mean/std).
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(f"got {len(rollout_responses)} responses but {len(repeated_ground_truths)} ground truths")
    scores = [reward_fn(r, gt) for r, gt in zip(rollout_responses, repeated_ground_truths, strict=True)]
    raw_rewards = torch.tensor([float(s["reward"]) for s in scores], dtype=torch.float32)

    def column(key: str) -> torch.Tensor | None:
        if not scores or not all(key in s for s in scores):
            return None
        return torch.tensor([float(s[key]) for s in scores], dtype=torch.float32)

    advantages = normalize_group_rewards(raw_rewards, group_size, advantage_eps, normalize_by_std)
    metadata = summarize_group_rewards(raw_rewards, group_size, column("format_reward"), column("answer_reward"))
    metadata["advantage_mean"] = float(advantages.mean())
    metadata["advantage_std"] = float(advantages.std()) if advantages.numel() > 1 else 0.0
    return advantages, raw_rewards, metadata


@dataclass(frozen=True)
class AdvantageInputs:
    """What every advantage estimator is given: one rollout batch's rewards and the run's
    settings. rewards: (rollout_batch_size,) float32, groups of group_size contiguous;
    advantage_eps and use_std_normalization: the config's loss.* keys."""

    rewards: torch.Tensor
    group_size: int
    advantage_eps: float = 1e-6
    use_std_normalization: bool = True


# An estimator: AdvantageInputs -> advantages, (rollout_batch_size,) float.
AdvantageFunction = Callable[[AdvantageInputs], torch.Tensor]


def group_mean_advantages(x: AdvantageInputs) -> torch.Tensor:
    """r - mean(group), divided by (std(group) + eps) with use_std_normalization (normalize_group_rewards)."""
    return normalize_group_rewards(x.rewards, x.group_size, x.advantage_eps, x.use_std_normalization)


def rloo_advantages(x: AdvantageInputs) -> torch.Tensor:
    """Leave-one-out: r_i - (sum of the group's other rewards) / (group_size - 1), divided
    by (std(group) + eps) with use_std_normalization. (rollout_batch_size,) -> same.

    Equal to group_size / (group_size - 1) x (r - mean(group)); computed as TRL's
    RLOOTrainer does (trl/trainer/rloo_trainer.py), from the group's sum.
    """
    grouped = _grouped(x.rewards.float(), x.group_size)
    if x.group_size < 2:
        raise ValueError("rloo needs groups of at least 2 (a baseline of the others)")
    others_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (x.group_size - 1)
    advantages = grouped - others_mean
    if x.use_std_normalization:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + x.advantage_eps)
    return torch.where(_flat_groups(grouped), torch.zeros_like(advantages), advantages).reshape(-1)


def batch_std_advantages(x: AdvantageInputs) -> torch.Tensor:
    """r - mean(group), divided by (std(rollout batch) + eps): one scale for the whole
    batch (torch's unbiased std, as TRL's scale_rewards="batch"). Needs use_std_normalization
    (config_checks refuses batch_std without it). (rollout_batch_size,) -> same."""
    rewards = x.rewards.float()
    centered = normalize_group_rewards(rewards, x.group_size, x.advantage_eps, normalize_by_std=False)
    scale = (rewards.std() if rewards.numel() > 1 else torch.zeros(())) + x.advantage_eps
    # Every reward equal with eps 0: every advantage is 0 already, not 0 / 0.
    return torch.where(scale > 0, centered / scale, centered)


# The built-in estimators by name, in ADVANTAGE_ESTIMATORS' order (tests/test_recipe_tables.py).
ADVANTAGE_FUNCTIONS: dict[str, AdvantageFunction] = {
    "group_mean": group_mean_advantages,
    "rloo": rloo_advantages,
    "batch_std": batch_std_advantages,
}


def builtin_advantages(name: str) -> AdvantageFunction:
    """The built-in estimator `name`; ValueError naming the valid ones otherwise."""
    names = ("ADVANTAGE_ESTIMATORS", "ADVANTAGE_FUNCTIONS")
    return builtin(ADVANTAGE_FUNCTIONS, ADVANTAGE_ESTIMATORS, name, "advantage estimator", names)
