"""The per-problem outcomes behind a run's measure: what the paired analysis sets side by side.

Every measure a comparison or a finding reads off a run's evals is a weighted sum of eval
scores: the mean of the last k evals (weights 1/k), one eval (1), best minus final (+1 and
-1), the area under the curve over its length (the trapezoids' halves). The same weights
applied to each problem's own score in those evals give that problem's part of the
measure, and their mean over the problems is the measure itself, as analysis/design.py's
`ArmRuns` needs. A problem's score in an eval is its share of right samples (0 or 1 for
the headline eval; pass@1 for a sampled one), or its pass@k from the same counts; maj@k
cannot be had from the counts, so a maj@k measure is compared over seeds only.

The outcomes come from the registry (registry/outcomes.py), keyed to each eval row's
`subset_hash`: problems pair position by position only between rows of the same subset,
so a run whose evals changed subset has no per-problem measure, and arms whose subsets
differ are refused pairing (`UnpairedProblems`), in one line naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpoctl import metrics
from grpoctl.analysis.pass_at_k import pass_at_k
from grpoctl.registry.models import EVAL_KINDS
from grpoctl.registry.outcomes import ProblemOutcomes, decode

# A run's stored outcomes: step -> (the eval row's subset_hash, its outcomes as stored, None: not
# recorded), decoded only where a measure weighs them
Stored = Mapping[int, tuple[str, "str | None"]]
Weights = dict[int, float]  # eval step -> its weight in the measure


class UnpairedProblems(ValueError):
    """Outcomes of different problems (their subset_hash differs): they do not pair."""


@dataclass(frozen=True)
class ProblemMeasure:
    """One run's measure, problem by problem, on the problems of `subset_hash` (in id order)."""

    subset_hash: str
    values: tuple[float, ...]
    levels: tuple[str | None, ...] | None = None


def outcome_kind(score: str) -> str:
    """The eval rows whose outcomes lie behind `score`: the sampled eval's for pass@k and
    maj@k, the headline (greedy) eval's for accuracy."""
    return EVAL_KINDS[1] if metrics.is_sampled_score(score) else EVAL_KINDS[0]


def problem_scores(outcome: ProblemOutcomes, score: str = metrics.EVAL_ACCURACY) -> list[float] | None:
    """Each problem's `score` in one eval: its share of right samples for accuracy (greedy)
    and pass@1, its pass@k from the same counts; None for maj@k (the counts do not hold it)
    or a k above the samples drawn."""
    name = metrics.split_eval_set(score)[1]
    if name == metrics.EVAL_ACCURACY:
        return outcome.shares()
    prefix = f"{metrics.EVAL_PREFIX}pass@"
    if name.startswith(prefix):
        k = int(name.removeprefix(prefix))
        if k > outcome.samples:
            return None
        return [pass_at_k(outcome.samples, c, k) for c in outcome.correct]
    return None


def weighted(stored: Stored, weights: Weights, score: str = metrics.EVAL_ACCURACY) -> ProblemMeasure | None:
    """The measure sum(w * eval score) of one run, problem by problem; None when an eval it
    weighs has no outcomes recorded (or no per-problem score), or its evals graded different
    problems."""
    parts = []
    for step, weight in weights.items():
        subset, text = stored.get(step, ("", None))
        outcome = None if text is None else decode(text)
        scores = None if outcome is None else problem_scores(outcome, score)
        if outcome is None or scores is None:
            return None
        parts.append((subset, outcome, weight, scores))
    if not parts or len({subset for subset, *_ in parts}) > 1 or len({len(s) for *_, s in parts}) > 1:
        return None
    values = [0.0] * len(parts[0][3])
    for _, _, weight, scores in parts:
        if weight:
            values = [v + weight * s for v, s in zip(values, scores, strict=True)]
    return ProblemMeasure(parts[0][0], tuple(values), parts[0][1].levels)


def check_paired(arms: Mapping[str, Mapping[object, ProblemMeasure]]) -> None:
    """Refuse, in one line, to pair per-problem measures of different problems: every run of
    every arm must share one subset_hash."""
    seen: dict[str, str] = {}
    for label, runs in arms.items():
        for measure in runs.values():
            seen.setdefault(measure.subset_hash, label)
    if len(seen) > 1:
        shown = ", ".join(f"{label} graded subset {subset[:12]}" for subset, label in seen.items())
        raise UnpairedProblems(f"per-problem outcomes not paired: the arms graded different problems ({shown})")


def with_outcomes(registry: Any, runs: list[Any], score: str, eval_set: str | None = None) -> None:
    """Load the per-problem outcomes behind `score` into each run (an analysis.compare
    ComparedRun: its `outcomes`, by eval kind) that lacks them, in one read of the registry."""
    kind = outcome_kind(score)
    missing = [rd for rd in runs if kind not in rd.outcomes and rd.run.id is not None]
    if missing:
        stored = registry.eval_outcomes([rd.run.id for rd in missing], eval_set, kind)
        for rd in missing:
            rd.outcomes[kind] = stored[rd.run.id]
