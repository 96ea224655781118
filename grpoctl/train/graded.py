"""`Graded`: a step's rollouts with their grades, before they become training tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from grpoctl.rollout.base import Rollouts


@dataclass
class Graded:
    """Rollouts with their grades. Row i of each field is rollout i; groups are contiguous
    (rows g*n .. g*n+n-1)."""

    rollouts: Rollouts
    truths: list[str]
    scores: list[dict]  # each rollout's reward dict
    rewards: torch.Tensor  # (n,) what GRPO sees: the grader's reward plus any overlong penalty
    penalty: torch.Tensor | None = None  # (n,) <= 0, with the soft overlong punishment on
    timeouts: int = 0  # gradings that hit their time limit
    errors: int = 0  # gradings that raised
    # (n,) True for a dropped group kept only to fill a short dynamic-sampling batch (zero loss weight)
    filler: torch.Tensor | None = None
    levels: list[int | None] | None = None  # each rollout's problem's level, where the data has levels

    def rows(self, idx: Sequence[int]) -> Graded:
        """These rows (a group, say), without the counts and fillers."""
        r, idx = self.rollouts, list(idx)
        return Graded(
            Rollouts(
                [r.prompt_ids[i] for i in idx],
                [r.response_ids[i] for i in idx],
                [r.response_texts[i] for i in idx],
                [r.truncated[i] for i in idx],
                None if r.sampled_log_probs is None else [r.sampled_log_probs[i] for i in idx],
            ),
            [self.truths[i] for i in idx],
            [self.scores[i] for i in idx],
            self.rewards[idx],
            None if self.penalty is None else self.penalty[idx],
            levels=None if self.levels is None else [self.levels[i] for i in idx],
        )

    @staticmethod
    def concat(parts: Sequence[Graded]) -> Graded:
        """Rows one part after another (counts and fillers are the caller's to set)."""
        rollouts = Rollouts([], [], [], [])
        for part in parts:
            rollouts.prompt_ids += part.rollouts.prompt_ids
            rollouts.response_ids += part.rollouts.response_ids
            rollouts.response_texts += part.rollouts.response_texts
            rollouts.truncated += part.rollouts.truncated
        drawn = [p.rollouts.sampled_log_probs for p in parts]
        if all(d is not None for d in drawn):
            rollouts.sampled_log_probs = [row for d in drawn if d is not None for row in d]
        penalties = [p.penalty for p in parts]
        return Graded(
            rollouts,
            [t for p in parts for t in p.truths],
            [s for p in parts for s in p.scores],
            torch.cat([p.rewards for p in parts]),
            None if any(p is None for p in penalties) else torch.cat(penalties),
            levels=None if any(p.levels is None for p in parts) else [v for p in parts for v in p.levels or []],
        )
