"""The headline eval: generate once per problem of a fixed subset and grade it.

Greedy by default (eval.greedy), at eval.temperature otherwise. What makes two evals
comparable goes into their row (evals/on_set.py's `eval_row`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.data import Example
from grpoctl.prompts import format_prompt
from grpoctl.rewards import get_reward_fn, grading_stats, score_many
from grpoctl.rollout.base import SamplingSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from grpoctl.config_schema import EvalConfig
    from grpoctl.rollout.base import RolloutBackend
ACCURACY = "accuracy"  # a problem's figure in the breakdown: 1 when it was answered right


@dataclass
class EvalOutcome:
    n: int
    accuracy: float
    format_rate: float
    mean_response_length: float
    timeouts: int
    errors: int = 0  # gradings that failed (scored 0): should stay at zero
    samples: list[dict] = field(default_factory=list)
    per_problem: list[dict[str, float]] = field(default_factory=list)  # {"accuracy": 0 or 1}, for breakdowns

    def row_fields(self) -> dict:
        """This eval's own fields of its EvalResult row (evals/on_set.py adds the rest)."""
        shared = ("n", "accuracy", "format_rate", "mean_response_length")
        return {name: getattr(self, name) for name in shared} | {"grading_timeouts": self.timeouts}

    def metrics(self) -> dict[str, float]:
        return {
            metrics.EVAL_ACCURACY: self.accuracy,
            metrics.EVAL_FORMAT_RATE: self.format_rate,
            metrics.EVAL_RESPONSE_LENGTH: self.mean_response_length,
            metrics.EVAL_GRADING_ERRORS: self.errors,
        }


def eval_sampling(eval_cfg: EvalConfig, stop: Sequence[str]) -> SamplingSettings:
    return SamplingSettings(
        temperature=eval_cfg.temperature,
        top_p=eval_cfg.top_p,
        min_tokens=1,
        max_tokens=eval_cfg.max_tokens,
        stop=tuple(stop),
        greedy=eval_cfg.greedy,
    )


def evaluate(
    backend: RolloutBackend,
    examples: list[Example],
    template: str,
    reward_name: str,
    sampling: SamplingSettings,
    batch_size: int,
    n_samples: int = 4,
    seed: int = 0,
) -> EvalOutcome:
    reward_fn = get_reward_fn(reward_name)
    before = grading_stats()
    correct = formatted = length = 0.0
    samples: list[dict] = []
    per_problem: list[dict] = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts = [format_prompt(template, ex.question) for ex in chunk]
        out = backend.generate(prompts, 1, sampling, seed=seed + start)
        graded = score_many(reward_fn, out.response_texts, [ex.answer for ex in chunk])  # one batch to grade
        for prompt, ex, text, ids, scores in zip(
            prompts, chunk, out.response_texts, out.response_ids, graded, strict=True
        ):
            right = scores["answer_reward"] * scores["format_reward"]
            correct += right
            per_problem.append({ACCURACY: right})
            formatted += scores["format_reward"]
            length += len(ids)
            if len(samples) < n_samples:
                samples.append(dict(kind="eval", prompt=prompt, response=text, ground_truth=ex.answer, **scores))
    n, after = len(examples), grading_stats()
    return EvalOutcome(
        n=n,
        accuracy=correct / n,
        format_rate=formatted / n,
        mean_response_length=length / n,
        timeouts=after["timeouts"] - before["timeouts"],
        errors=after["errors"] - before["errors"],
        samples=samples,
        per_problem=per_problem,
    )
