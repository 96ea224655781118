"""A GRPO step's rollouts graded, scored and made into training tensors: rewards (the
built-in reward or weighted reward components, then any overlong penalty), advantages
(each reward against the others of its group), and the `RolloutBatch` the inner loop
trains on. Part of train/step.py's step, kept apart so that the step reads as a table of
contents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from grpoctl import metrics
from grpoctl.config import Config
from grpoctl.data import Example
from grpoctl.grpo import AdvantageInputs, collate_prompt_and_output_ids, success_count_shares, summarize_group_rewards
from grpoctl.grpo.plugins import advantage_function
from grpoctl.grpo.shaping import loss_rows, overlong_penalty, permute_rewards
from grpoctl.reward_specs import components_of, is_plugin
from grpoctl.rewards import WRITES_WORKING, get_reward_fn, grading_stats, score_many
from grpoctl.rollout.base import Rollouts
from grpoctl.rules import grader_reward
from grpoctl.train.context import RunContext
from grpoctl.train.graded import Graded


@dataclass
class RolloutBatch:
    """One GRPO step's rollouts as training tensors, all (batch, seq) or (batch,)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor
    raw_rewards: torch.Tensor  # what the loss learns from (no_baseline's weights): permuted under the control
    loss_rows: torch.Tensor  # (batch,) bool: rows whose tokens enter the loss (grpo/shaping.py)
    old_log_probs: torch.Tensor | None = None
    sampled_log_probs: torch.Tensor | None = None  # the sampler's, at the response positions (TIS)
    ref_log_probs: torch.Tensor | None = None
    stats: dict = field(default_factory=dict)  # train/* figures of the rollouts
    scores: list[dict] = field(default_factory=list)  # each rollout's reward dict

    @property
    def seq_lengths(self) -> torch.Tensor:
        """(batch,) positions up to and including each row's last response token."""
        positions = torch.arange(self.response_mask.shape[1]).expand_as(self.response_mask)
        return torch.where(self.response_mask, positions + 1, 0).amax(dim=1).clamp(min=1)

    def loss_mask(self, rows: torch.Tensor) -> torch.Tensor:
        """(len(rows), seq) bool: the response tokens of `rows` that the loss sees."""
        return self.response_mask[rows] & self.loss_rows[rows, None]


def score_rollouts(
    run: RunContext, rollouts: Rollouts, truths: list[str], examples: list[Example] | None = None
) -> RolloutBatch:
    """Rollouts -> training tensors, rewards, group-normalised advantages and their summary."""
    return rollout_batch(run, grade_rollouts(run, rollouts, truths, examples))


def grade_rollouts(
    run: RunContext, rollouts: Rollouts, truths: list[str], examples: list[Example] | None = None
) -> Graded:
    """The reward of each rollout, and the soft overlong punishment (grpo/shaping.py) on it.

    Grading that timed out or failed scores 0, like a wrong answer; both are counted
    (train/grading_timeouts, train/grading_errors), since a broken grader otherwise
    looks like a flat reward. So does a reward plugin's call that raised or hung.
    """
    cfg = run.cfg
    before = grading_stats()
    scores = reward_scores(cfg, rollouts.response_texts, truths, examples or [])
    after = grading_stats()
    rewards = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
    penalty = None
    if cfg.reward.overlong_buffer_len is not None:
        penalty = overlong_penalty(
            torch.tensor([len(r) for r in rollouts.response_ids]),
            cfg.rollout.max_tokens,
            cfg.reward.overlong_buffer_len,
            cfg.reward.overlong_penalty_factor,
        )
        rewards = rewards + penalty
    return Graded(
        rollouts,
        truths,
        scores,
        rewards,
        penalty,
        timeouts=after["timeouts"] - before["timeouts"],
        errors=after["errors"] - before["errors"],
        levels=_levels(examples, len(truths)),
    )


def _levels(examples: list[Example] | None, rollouts: int) -> list[int | None] | None:
    """Each rollout's problem's level (one example per group); None where no problem has one."""
    if not examples or all(ex.level is None for ex in examples):
        return None
    group = rollouts // len(examples)
    return [examples[i // group].level for i in range(rollouts)]


def success_metrics(scores: list[dict], group_size: int, levels: list[int | None] | None) -> dict[str, float]:
    """The share of groups by success count, and sampled accuracy per level (where there are
    levels): a rollout is right when its answer is (answer_reward)."""
    right = [s["answer_reward"] > 0 for s in scores]
    shares = success_count_shares(torch.tensor(right), group_size)
    out = {metrics.GROUPS_RARE_SUCCESS: shares["rare"], metrics.GROUPS_NEAR_ALL_RIGHT: shares["near_all"]}
    for level in sorted({v for v in levels or [] if v is not None}):
        at = [r for r, v in zip(right, levels or [], strict=True) if v == level]
        out[metrics.level_accuracy(level)] = sum(at) / len(at)
    return out


def reward_scores(cfg: Config, texts: list[str], truths: list[str], examples: list[Example]) -> list[dict]:
    """Each rollout's reward dict: prompt.reward's, as it always was; or, with reward plugins or
    reward.components, their weighted sum and each component's value (rewards/plugins.py),
    each plugin given its rollout's problem (`examples`: one per group)."""
    if not cfg.reward.components and not is_plugin(cfg.prompt.reward):
        return score_many(get_reward_fn(cfg.prompt.reward), texts, truths)
    from grpoctl.rewards.plugins import example_record, reward_scorer

    scorer = reward_scorer(
        components_of(cfg.prompt.reward, cfg.reward.components),
        cfg.reward.timeout_s,
        grader_reward(cfg.prompt.reward, cfg.prompt.template),
    )
    group = len(texts) // max(len(examples), 1)
    records = [example_record(examples[i // group]) if examples else {} for i in range(len(texts))]
    return scorer.score(texts, truths, records)


def reward_component_metrics(scores: list[dict]) -> dict[str, float]:
    """Each reward component's mean over the rollouts, as metrics.reward_component names it
    (a rollout whose plugin call failed counts 0); none without components."""
    names = dict.fromkeys(name for s in scores for name in s.get("components", ()))
    return {
        metrics.reward_component(name): math.fsum(s.get("components", {}).get(name, 0.0) for s in scores) / len(scores)
        for name in names
    }


def rollout_batch(run: RunContext, graded: Graded) -> RolloutBatch:
    """Graded rollouts -> training tensors, advantages (loss.advantage_estimator's) and their summary.

    Masking (loss.mask_truncated, grpo/shaping.py) and a short batch's filler groups
    decide which rows the loss sees; every row stays in its group's mean and std.
    """
    cfg, rollouts, scores, raw = run.cfg, graded.rollouts, graded.scores, graded.rewards
    shaping = {}
    if graded.penalty is not None:
        shaping[metrics.OVERLONG_PENALTY] = float(-graded.penalty.mean())
        shaping[metrics.OVERLONG_PENALIZED_FRACTION] = float((graded.penalty < 0).float().mean())
    keep = loss_rows(rollouts.truncated, cfg.loss.mask_truncated)
    if cfg.loss.mask_truncated:
        shaping[metrics.LOSS_MASKED_FRACTION] = float((~keep).float().mean())
    if graded.filler is not None:
        keep &= ~graded.filler
    # The shuffled-reward control learns from another completion's reward; all the figures
    # (train/reward, the group summary) stay the true ones.
    learned = permute_rewards(raw, cfg.seed * 100_003 + run.state.data_position) if cfg.reward.shuffled_control else raw
    estimate = advantage_function(cfg.loss.advantage_estimator)
    advantages = estimate(
        AdvantageInputs(learned, cfg.rollout.group_size, cfg.loss.advantage_eps, cfg.loss.use_std_normalization)
    )
    summary = summarize_group_rewards(
        raw,
        cfg.rollout.group_size,
        format_rewards=torch.tensor([s["format_reward"] for s in scores]),
        answer_rewards=torch.tensor([s["answer_reward"] for s in scores]),
    )
    ids = collate_prompt_and_output_ids(rollouts.prompt_ids, rollouts.response_ids, run.tokenizer.pad_token_id)
    batch = RolloutBatch(
        ids["input_ids"], ids["labels"], ids["response_mask"], advantages, learned, keep, scores=scores
    )
    if cfg.loss.tis_cap is not None and rollouts.sampled_log_probs is None:
        raise RuntimeError(
            f"loss.tis_cap needs the sampler's log-probs, and the {run.backend.name} backend did not report them"
        )
    # TIS weighs by them; without it they still measure the sampler/trainer gap (metrics.SAMPLER_GAP_MEAN).
    if rollouts.sampled_log_probs is not None:
        # Row-major over the response positions, as collate lays the response tokens out.
        drawn = torch.tensor([lp for row in rollouts.sampled_log_probs for lp in row], dtype=torch.float32)
        batch.sampled_log_probs = torch.zeros(batch.response_mask.shape).masked_scatter(batch.response_mask, drawn)
    lengths = [len(r) for r in rollouts.response_ids]
    batch.stats = shaping | {
        metrics.REWARD: summary["reward_mean"],
        metrics.REWARD_STD: summary["reward_std"],
        metrics.FORMAT_REWARD: summary.get("format_reward_mean", 0.0),
        metrics.ANSWER_REWARD: summary.get("answer_reward_mean", 0.0),
        metrics.ZERO_STD_GROUP_FRACTION: summary["zero_std_group_fraction"],
        metrics.RESPONSE_LENGTH: sum(lengths) / len(lengths),
        metrics.RESPONSE_CLIP_FRACTION: sum(rollouts.truncated) / len(rollouts.truncated),
        metrics.GRADING_TIMEOUTS: graded.timeouts,
        metrics.GRADING_ERRORS: graded.errors,
    }
    batch.stats |= reward_component_metrics(scores)
    batch.stats |= success_metrics(scores, cfg.rollout.group_size, graded.levels)
    writes_working = WRITES_WORKING[grader_reward(cfg.prompt.reward, cfg.prompt.template)]
    texts = rollouts.response_texts
    batch.stats[metrics.WORKING_SHARE] = sum(map(writes_working, texts)) / len(texts)
    return batch
