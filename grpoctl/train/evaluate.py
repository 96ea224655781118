"""Evaluation: generate once per problem of a fixed subset and grade it.

Everything that makes two evals comparable goes with the result: the decoding settings,
hashes of the subset's ids, of the data file and of the prompt template, and the grader's
name and version (the seed's numbers came from CS336's grader; ours from math-verify).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.analysis.breakdown import breakdown
from grpoctl.data import Example, subset_hash
from grpoctl.prompts import format_prompt, template_hash
from grpoctl.rewards import get_reward_fn, grader_info, grading_stats
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
        for prompt, ex, text, ids in zip(prompts, chunk, out.response_texts, out.response_ids, strict=True):
            scores = reward_fn(text, ex.answer)
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


def eval_record(
    outcome: EvalOutcome,
    *,
    examples: list[Example],
    data_source: str,
    data_hash: str,
    template_name: str,
    template: str,
    sampling: SamplingSettings,
    group_by: Sequence[str] = (),
) -> dict:
    """The EvalResult row's fields (without run, step and checkpoint), with the accuracy by
    level, subject and eval.group_by's fields where the data has them."""
    grader = grader_info()
    return dict(
        n=outcome.n,
        accuracy=outcome.accuracy,
        format_rate=outcome.format_rate,
        mean_response_length=outcome.mean_response_length,
        data_source=data_source,
        data_hash=data_hash,
        subset_hash=subset_hash(examples),
        template=template_name,
        template_hash=template_hash(template),
        decoding=json.dumps(sampling.as_dict(), sort_keys=True),
        # The normalization version changes what counts as right (grpoctl-2: equations and
        # decimals), so two evals graded under different rules are told apart.
        grader=f"{grader['name']} {grader['version']} ({grader['normalization']})",
        grading_timeouts=outcome.timeouts,
        breakdown=json.dumps(breakdown(examples, outcome.per_problem, group_by), sort_keys=True),
    )
