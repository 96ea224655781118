"""A user-written reward plugin: a preference for short responses (the lab's worked example).

    grpoctl train experiments/lab-brevity.yaml

adds it to the answer reward at a small weight (reward.components). grpoctl imports this
file by its path, in a worker process of its own, and calls `brevity` once per rollout
with the response text, the ground-truth answer and the problem's record; a call that
raises or takes more than reward.timeout_s scores 0 and is counted (train/grading_errors,
train/grading_timeouts), and the run goes on.
"""

from __future__ import annotations

MAX_CHARS = 100  # the lab's longest worked answers are about 80 characters


def brevity(response: str, truth: str, example: dict) -> float:
    """1 for an empty response, falling linearly to 0 at MAX_CHARS characters and beyond."""
    return max(0.0, 1.0 - len(response) / MAX_CHARS)


def shape(response: str, truth: str, example: dict) -> dict[str, float]:
    """A plugin may return named parts instead of one number: each is recorded per step
    (train/reward/<component>.<part>), and their sum is the component's reward."""
    lines = response.count("=")  # the lab's working writes one `a+b=c` per line
    return {"brevity": brevity(response, truth, example), "working": -0.1 * lines}
