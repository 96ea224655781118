"""The reward functions: one per prompt template, same shape as CS336's.

Each takes the model's response (the text generated after the prompt) and the
ground-truth answer, and returns three floats:

- format_reward: 1 if the response has the shape the template asks for,
- answer_reward: 1 if, in addition, its answer equals the truth,
- reward: what GRPO optimizes; here the answer reward (a well-formatted wrong
  answer earns nothing, as in the seed).

They are plain functions meant for the trainer's main thread; grading is bounded
in time whatever the response contains (see default.py and pool.py).
"""

from __future__ import annotations

from grpoctl.rewards.default import grade
from grpoctl.rewards.extract import last_boxed, r1_zero_answer


def _scores(formatted: bool, correct: bool) -> dict[str, float]:
    answer = float(formatted and correct)
    return {"format_reward": float(formatted), "answer_reward": answer, "reward": answer}


def r1_zero_reward(response: str, ground_truth: str) -> dict[str, float]:
    """For the r1_zero templates: ` reasoning </think> <answer>ANSWER</answer>`.

    A right answer outside the answer tags, or inside a broken format, scores 0.
    """
    formatted, answer = r1_zero_answer(response)
    if not formatted or not answer:
        return _scores(formatted, False)
    return _scores(True, grade(answer, ground_truth))


def question_only_reward(response: str, ground_truth: str) -> dict[str, float]:
    """For the question_only template: the answer is the last `\\boxed{...}`."""
    answer = last_boxed(response)
    if answer is None:
        return _scores(False, False)
    return _scores(True, bool(answer) and grade(answer, ground_truth))


def r1_zero_extracted(response: str) -> str | None:
    """The answer r1_zero_reward grades, or None when the response is not in its format."""
    formatted, answer = r1_zero_answer(response)
    return answer if formatted and answer else None


def question_only_extracted(response: str) -> str | None:
    """The answer question_only_reward grades (the last `\\boxed{}`), or None."""
    return last_boxed(response) or None


# The answer each reward grades, by reward name (maj@k votes on these).
ANSWER_EXTRACTORS = {"r1_zero": r1_zero_extracted, "question_only": question_only_extracted}
