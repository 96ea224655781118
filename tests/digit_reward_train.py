"""Run `grpoctl` with a reward a random tiny model can earn: the share of digits it writes.

The real r1_zero reward is always 0 for an untrained model, so every advantage would be
0 and a test of resume or divergence would pass vacuously. This shaped reward makes each
step's gradient real. Used as `python tests/digit_reward_train.py train ...`.
"""

import os
import sys

import grpoctl.rewards as rewards
from grpoctl.cli import main

_broken_grader = None


def _raises(pred: str, truth: str):
    raise RuntimeError("the comparison crashed (test)")


def digit_reward(response: str, ground_truth: str) -> dict[str, float]:
    """With GRPOCTL_TEST_GRADER_ERRORS set, each call also grades an answer with a grader
    whose comparison raises: the real Grader scores it 0 and counts one grading error."""
    global _broken_grader
    if os.environ.get("GRPOCTL_TEST_CRASH") and "9" in response:
        raise RuntimeError("reward function crashed (test)")
    if os.environ.get("GRPOCTL_TEST_GRADER_ERRORS"):
        _broken_grader = _broken_grader or rewards.Grader(check=_raises)
        assert _broken_grader.grade("\\sqrt{2}", ground_truth) is False  # not decidable without the comparison
    share = sum(c.isdigit() for c in response) / max(len(response), 1)
    return {"format_reward": 1.0, "answer_reward": share, "reward": share}


rewards.REWARD_FNS["r1_zero"] = digit_reward

if os.environ.get("GRPOCTL_TEST_UNBOUNDED_LR"):
    # A divergence test needs an lr past what a user may set (optimizer.lr is at most 1).
    from grpoctl.config_checks import RANGES, rule

    RANGES["optimizer.lr"] = rule("(0, inf)")

if __name__ == "__main__":
    sys.argv = ["grpoctl", *sys.argv[1:]]
    main()
