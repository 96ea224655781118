"""Run `grpoctl` with a reward a random tiny model can earn: the share of digits it writes.

The real r1_zero reward is always 0 for an untrained model, so every advantage would be
0 and a test of resume or divergence would pass vacuously. This shaped reward makes each
step's gradient real. Used as `python tests/digit_reward_train.py train ...`.
"""

import os
import sys

import grpoctl.rewards as rewards
from grpoctl.cli import main


def digit_reward(response: str, ground_truth: str) -> dict[str, float]:
    if os.environ.get("GRPOCTL_TEST_CRASH") and "9" in response:
        raise RuntimeError("reward function crashed (test)")
    share = sum(c.isdigit() for c in response) / max(len(response), 1)
    return {"format_reward": 1.0, "answer_reward": share, "reward": share}


rewards.REWARD_FNS["r1_zero"] = digit_reward

if __name__ == "__main__":
    sys.argv = ["grpoctl", *sys.argv[1:]]
    main()
