"""Verifiable rewards for math: answer extraction, grading and reward functions.

    from grpoctl.rewards import get_reward_fn
    reward_fn = get_reward_fn("r1_zero")
    reward_fn(" 2+2 is 4 </think> <answer>4</answer>", "4")
    # {'format_reward': 1.0, 'answer_reward': 1.0, 'reward': 1.0}

Files, in reading order: extract.py (where the answer is), normalize.py (cheap
string clean-up), equations.py (which sides of `x = 529` must equal the truth),
decimals.py (when `0.333333` answers `\\frac{1}{3}`), guards.py (hostile inputs),
equivalence.py (math-verify), cputime.py (time limits in CPU time, not wall
time), pool.py (time-bounded grading in worker processes),
default.py (the grader the reward functions use), formats.py (the reward
functions), stats.py (counters: timeouts and errors).
"""

from __future__ import annotations

from collections.abc import Callable

from grpoctl.rewards.default import close_default_grader, configure_grading, default_grader, grade, grade_many
from grpoctl.rewards.equivalence import grader_info
from grpoctl.rewards.extract import last_boxed, r1_zero_answer
from grpoctl.rewards.formats import (
    ANSWER_EXTRACTORS,
    WRITES_WORKING,
    question_only_reward,
    r1_zero_reward,
    score_many,
)
from grpoctl.rewards.pool import Grader
from grpoctl.rewards.stats import grading_stats, reset_grading_stats

RewardFn = Callable[[str, str], dict[str, float]]

# One reward per answer format (rules.REWARDS, which prompt.reward is checked against);
# a template names its format's reward (rules.reward_for_template), not a reward of its own.
REWARD_FNS: dict[str, RewardFn] = {
    "r1_zero": r1_zero_reward,
    "question_only": question_only_reward,
}


def get_reward_fn(name: str) -> RewardFn:
    """The reward function for a prompt template name."""
    try:
        return REWARD_FNS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; choose one of: {', '.join(REWARD_FNS)}") from None


__all__ = [
    "ANSWER_EXTRACTORS",
    "REWARD_FNS",
    "Grader",
    "RewardFn",
    "WRITES_WORKING",
    "close_default_grader",
    "configure_grading",
    "default_grader",
    "get_reward_fn",
    "grade",
    "grade_many",
    "grader_info",
    "grading_stats",
    "last_boxed",
    "question_only_reward",
    "r1_zero_answer",
    "r1_zero_reward",
    "reset_grading_stats",
    "score_many",
]
