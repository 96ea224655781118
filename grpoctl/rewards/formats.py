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

from collections.abc import Callable, Sequence

from grpoctl.rewards.default import grade, grade_many
from grpoctl.rewards.extract import last_boxed, question_only_working, r1_zero_answer, r1_zero_working


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


def _r1_zero_graded(response: str) -> tuple[bool, str]:
    """(formatted, the answer to grade or "") as r1_zero_reward reads them."""
    formatted, answer = r1_zero_answer(response)
    return formatted, answer or ""


def _question_only_graded(response: str) -> tuple[bool, str]:
    answer = last_boxed(response)
    return answer is not None, answer or ""


# Each built-in reward's reading of a response, so that a batch is graded in one call.
_GRADED_ANSWER: dict[Callable, Callable[[str], tuple[bool, str]]] = {
    r1_zero_reward: _r1_zero_graded,
    question_only_reward: _question_only_graded,
}


def score_many(
    reward_fn: Callable[[str, str], dict[str, float]], responses: Sequence[str], truths: Sequence[str]
) -> list[dict[str, float]]:
    """`reward_fn` of each (response, truth), the same as calling it on each in turn, but with
    the built-in rewards' answers graded in one `grade_many` call: with grading workers
    (reward.grading_workers) they are graded in parallel. Any other function (a test's) is
    called on each."""
    graded_answer = _GRADED_ANSWER.get(reward_fn)
    if graded_answer is None:
        return [reward_fn(r, t) for r, t in zip(responses, truths, strict=True)]
    read = [graded_answer(r) for r in responses]
    pending = [i for i, (formatted, answer) in enumerate(read) if formatted and answer]
    verdicts = dict(zip(pending, grade_many([(read[i][1], truths[i]) for i in pending]), strict=True))
    return [_scores(formatted, verdicts.get(i, False)) for i, (formatted, _) in enumerate(read)]


def r1_zero_extracted(response: str) -> str | None:
    """The answer r1_zero_reward grades, or None when the response is not in its format."""
    formatted, answer = r1_zero_answer(response)
    return answer if formatted and answer else None


def question_only_extracted(response: str) -> str | None:
    """The answer question_only_reward grades (the last `\\boxed{}`), or None."""
    return last_boxed(response) or None


# The answer each reward grades, by reward name (maj@k votes on these).
ANSWER_EXTRACTORS = {"r1_zero": r1_zero_extracted, "question_only": question_only_extracted}

# Whether a response writes working before its answer, by reward name: what a response in
# that format can be, short of the bare answer (train/working_share; the length-collapse flag).
WRITES_WORKING = {"r1_zero": r1_zero_working, "question_only": question_only_working}
