"""One evaluation of a policy on one eval set, and the registry row it leaves.

A run calls `evaluate_set` at its eval steps (train/eval_and_checkpoint.py), and
`grpoctl eval` calls it for a checkpoint (train/evaluate_checkpoint.py): the same
settings from the same config keys, graded the same way, recorded by the same row
builder. `sampled=False` is the headline eval (evals/headline.py: one sample per problem,
greedy unless eval.greedy is off); `sampled=True` is pass@k and maj@k from
eval.sampled.n samples per problem (evals/sampled.py).

Everything that makes two evals comparable goes into the row: the decoding settings,
hashes of the subset's ids, of the data file and of the prompt template, and the
grader's name and version (the seed's numbers came from CS336's grader; ours from
math-verify).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.analysis.breakdown import breakdown
from grpoctl.data import Example, subset_hash
from grpoctl.evals.headline import ACCURACY, EvalOutcome, eval_sampling, evaluate
from grpoctl.evals.sampled import (
    SampledOutcome,
    sampled_eval_seed,
    sampled_evaluate,
    sampled_ks,
    sampled_problems,
    sampled_sampling,
)
from grpoctl.prompts import template_hash
from grpoctl.registry.outcomes import encode as encode_outcomes
from grpoctl.rewards import grader_info
from grpoctl.rules import grader_reward

if TYPE_CHECKING:
    from collections.abc import Sequence

    from grpoctl.config import Config
    from grpoctl.data.run_data import EvalSet
    from grpoctl.rollout.base import RolloutBackend, SamplingSettings


@dataclass
class SetEval:
    """What one eval of one set gives: its eval/* figures, the completions to store (the
    headline eval's), and its EvalResult row (without run, step, checkpoint and set name)."""

    outcome: EvalOutcome | SampledOutcome
    figures: dict[str, float]
    row: dict
    samples: list[dict] = field(default_factory=list)


def evaluate_set(
    backend: RolloutBackend,
    cfg: Config,
    eval_set: EvalSet,
    template_name: str,
    template: str,
    *,
    sampled: bool,
    step: int,
) -> SetEval:
    """The policy behind `backend` on `eval_set`: the headline eval, or the sampled one from
    its own seed for `step` (sampled_eval_seed)."""
    reward = grader_reward(cfg.prompt.reward, cfg.prompt.template)
    outcome: EvalOutcome | SampledOutcome
    if sampled:
        examples = sampled_problems(cfg, eval_set.examples)
        sampling = sampled_sampling(cfg)
        outcome = sampled_evaluate(
            backend,
            examples,
            template,
            reward,
            sampling,
            n=cfg.eval.sampled.n,
            ks=sampled_ks(cfg.eval.sampled),
            seed=sampled_eval_seed(cfg.seed, step),
            batch_size=cfg.eval.batch_size,
        )
    else:
        examples = eval_set.examples
        sampling = eval_sampling(cfg.eval, cfg.rollout.stop)
        outcome = evaluate(
            backend,
            examples,
            template,
            reward,
            sampling,
            cfg.eval.batch_size,
            n_samples=cfg.logging.samples_per_step,
            seed=cfg.eval.subset_seed,
        )
    figures = outcome.metrics()
    if not sampled and eval_set.overlong_dropped:
        figures[metrics.OVERLONG_EVAL_DROPPED] = eval_set.overlong_dropped
    row = eval_row(outcome, examples, eval_set, template_name, template, sampling, cfg.eval.group_by)
    return SetEval(outcome, figures, row, outcome.samples if isinstance(outcome, EvalOutcome) else [])


def eval_row(
    outcome: EvalOutcome | SampledOutcome,
    examples: list[Example],
    eval_set: EvalSet,
    template_name: str,
    template: str,
    sampling: SamplingSettings,
    group_by: Sequence[str] = (),
) -> dict:
    """The EvalResult row's fields, either kind (without run, step, checkpoint and set
    name), with the accuracy by level, subject and eval.group_by's fields where the data
    has them, and which problems it got right (`problem_outcomes`)."""
    grader = grader_info()
    return outcome.row_fields() | dict(
        outcomes=problem_outcomes(outcome, examples),
        data_source=eval_set.source,
        data_hash=eval_set.data_hash,
        subset_hash=subset_hash(examples),
        template=template_name,
        template_hash=template_hash(template),
        decoding=json.dumps(sampling.as_dict(), sort_keys=True),
        # The normalization version changes what counts as right (grpoctl-2: equations and
        # decimals), so two evals graded under different rules are told apart.
        grader=f"{grader['name']} {grader['version']} ({grader['normalization']})",
        breakdown=json.dumps(breakdown(examples, outcome.per_problem, list(group_by)), sort_keys=True),
    )


def problem_outcomes(outcome: EvalOutcome | SampledOutcome, examples: list[Example]) -> str | None:
    """The row's per-problem outcomes (registry/outcomes.py): each problem's right samples,
    0 or 1 for the headline eval and 0 to n for a sampled one, with its level, in the
    order of the problems' ids, the order `subset_hash` hashes them in. None when the
    outcome has no figures per problem.

    A sampled eval's seed is `sampled_eval_seed(seed, step)`, and the headline eval is
    greedy (or seeded by eval.subset_seed alone): nothing of an arm's own config enters
    either, so two arms run with the same seed are graded on the same problems with the
    same random numbers, and their outcomes pair problem by problem (common random
    numbers; tests/test_problem_outcomes.py)."""
    if len(outcome.per_problem) != len(examples) or not examples:
        return None
    samples = outcome.n if isinstance(outcome, SampledOutcome) else 1
    order = sorted(range(len(examples)), key=lambda i: examples[i].id)
    correct = [round(outcome.per_problem[i][ACCURACY] * samples) for i in order]
    levels = [examples[i].group_value("level") for i in order]
    return encode_outcomes(correct, samples, levels)
