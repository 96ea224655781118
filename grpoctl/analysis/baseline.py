"""Each variant of a study against its baseline: the difference, its interval, the
p-value (raw and Holm-corrected within the study), a verdict and the seeds a close call
would need. The test is the one the design allows (analysis/design.py), and every number
names it; this file only decides which numbers go in.

The measure is the mean of a run's last `last_k` evals (at or before `at_step`), then the
mean over the variant's seeds. The tiny model's greedy accuracy moves by up to ten points
from one eval to the next on the same problems, so one eval is a noisy end point;
averaging the last three (steps 40, 50 and 60 of a 60-step tiny run, 80-99 of a seed
run) steadies it while staying at the end of training. `--last-k 1` is the final eval
alone; the eval at step 0, before training, is never averaged in. Best-so-far accuracy
is shown too, but no verdict rests on it: the maximum of several noisy evals is biased
upward.

Arms run with the same seeds are paired seed by seed (the paired t over per-seed
differences), with a problem-level component where the runs recorded per-problem
outcomes (analysis/problems.py gives each run's measure problem by problem); seeds that do
not match get Welch's t. With one seed in each arm only the two runs can be compared (on
the problems: McNemar's exact test, or a two-proportion test when no outcomes were
recorded): its verdict says whether these two runs differ, never which arm is better.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import design, paired, stats
from grpoctl.analysis.problems import ProblemMeasure, Stored, UnpairedProblems, Weights, check_paired, weighted
from grpoctl.rules import EvalPoint

Curve = list[EvalPoint]  # one run's evals, in step order

LAST_K = 3
ONE_SEED = "one seed per arm: this compares the two runs, not the arms; another seed may differ by more"


@dataclass
class RunEvals:
    """One run's eval curve with its seed and, where loaded, its per-problem outcomes by step."""

    seed: int
    evals: Curve
    outcomes: Stored = field(default_factory=dict)


def seed_keys(runs: list[Any]) -> list[Hashable]:
    """The key each run pairs by: its seed; a seed an arm ran twice is told apart by its
    order ((seed, 1) the second time), so it pairs only with the other arm's second."""
    seen: dict[int, int] = {}
    keys: list[Hashable] = []
    for run in runs:
        count = seen.get(run.seed, 0)
        seen[run.seed] = count + 1
        keys.append(run.seed if count == 0 else (run.seed, count))
    return keys


@dataclass
class Arm:
    """One variant's numbers, by seed (seed_keys), for the runs that have an eval."""

    measure: dict[Hashable, float] = field(default_factory=dict)  # mean of its last k evals
    best: dict[Hashable, float] = field(default_factory=dict)  # best-so-far accuracy
    sizes: dict[Hashable, int | None] = field(default_factory=dict)  # problems in its last eval
    problems: dict[Hashable, ProblemMeasure] = field(default_factory=dict)  # the measure, problem by problem

    def runs(self) -> design.ArmRuns:
        size = next(iter(self.sizes.values()), None) if len(self.sizes) == 1 else None
        return design.ArmRuns(self.measure, {k: m.values for k, m in self.problems.items()}, size)


@dataclass
class Versus:
    """One variant against the baseline (the baseline's own row has verdict "baseline")."""

    label: str
    seeds: int
    measure: float | None = None
    measure_sd: float | None = None  # over seeds (2+)
    measure_ci: tuple[float, float] | None = None  # Wilson interval (one seed)
    diff: stats.Difference | None = None  # variant minus baseline
    choice: design.Choice | None = None  # the test the design allowed, with what it gives
    p_holm: float | None = None
    verdict: str = "untested"  # better / worse / within noise / baseline / untested, or the runs' words
    seeds_needed: int | None = None
    seeds_needed_capped: bool = False  # True: more than seeds_needed
    mde: float | None = None  # the smallest difference these seeds detect (alpha, power), for their spread
    tost: paired.PairedEquivalence | None = None  # equivalence within +-stats.EQUIVALENCE_DELTA
    bca: tuple[float, float] | None = None  # with stats.BCA_MIN_SEEDS+ pairs (or per arm, unpaired)
    best_diff: float | None = None
    best_ci: tuple[float, float] | None = None
    best_test: str = ""  # the test behind best_ci
    unpaired: str = ""  # why per-problem outcomes were recorded and not paired
    learned_forgot: dict[str, dict[str, int]] | None = None  # by level: design.learned_forgot
    note: str = ""  # why untested, or the one-seed caveat

    @property
    def test(self) -> str:
        """The test's short name, as every caller prints it ("" when none ran)."""
        return self.choice.name if self.choice is not None else ""

    @property
    def problem_level(self) -> str | None:
        """Whether the interval covers the problems, as a label (paired.LABELS)."""
        if self.unpaired:
            return paired.LABELS["problems not paired"]
        return self.choice.problem_level if self.choice is not None else None


@dataclass
class BaselineComparison:
    baseline: str
    source: str  # where the baseline came from: "the spec" or "--baseline"
    last_k: int
    rows: list[Versus]  # in the table's order, the baseline's included
    tested: int  # comparisons in the Holm family
    metric: str = ""  # the eval measure the curves are of (eval/pass@8); "": eval accuracy


def eval_curve_of(rd: Any, metric: str) -> list[EvalPoint] | None:
    """A run's curve (analysis.compare.ComparedRun) of an eval measure that reads like
    accuracy, each point with its problem count: eval/accuracy (its evals), pass@k or maj@k
    (its sampled evals; the series for a run recorded without their rows); None for any
    other metric."""
    if metric == metrics.EVAL_ACCURACY:
        return rd.evals
    if metrics.is_sampled_score(metric):
        scores = getattr(rd, "scores", {}) or {}
        if metric in scores:
            return scores[metric]
        return [(s, v, None) for s, v in rd.series.get(metric, []) if math.isfinite(v)]
    return None


def last_weights(evals: Curve, k: int, at_step: int | None = None) -> Weights:
    """The evals the last-k mean averages, each with weight 1/k (analysis/problems.py): the
    last k at or before at_step. The eval before any training (step 0) joins only when it
    is the only one: a run evaluated at its start and end has one trained eval, not two."""
    eligible = [e for e in evals if at_step is None or e[0] <= at_step]
    trained = [e for e in eligible if e[0] > 0]
    tail = (trained or eligible)[-k:]
    return {step: 1 / len(tail) for step, _, _ in tail}


def last_evals(evals: Curve, k: int, at_step: int | None = None) -> tuple[float, int | None] | None:
    """(mean accuracy of the last k evals at or before at_step, problems in the last one)."""
    weights = last_weights(evals, k, at_step)
    tail = [e for e in evals if e[0] in weights]
    if not tail:
        return None
    return mean(acc for _, acc, _ in tail), tail[-1][2]


def arm(runs: list[RunEvals], last_k: int, at_step: int | None, score: str = metrics.EVAL_ACCURACY) -> Arm:
    """One variant's numbers from the eval curves of its runs (one per seed)."""
    out = Arm()
    for key, run in zip(seed_keys(runs), runs, strict=True):
        last = last_evals(run.evals, last_k, at_step)
        if last is None:
            continue
        out.measure[key], out.sizes[key] = last
        problems = weighted(run.outcomes, last_weights(run.evals, last_k, at_step), score)
        if problems is not None:
            out.problems[key] = problems
        if at_step is None:
            trained = [acc for step, acc, _ in run.evals if step > 0]  # step 0 is no one's best
            if trained:
                out.best[key] = max(trained)
    return out


def _describe(label: str, a: Arm) -> Versus:
    """The arm on its own: its measure with the spread that fits its seed count."""
    values = list(a.measure.values())
    out = Versus(label, len(values))
    if not values:
        return out
    out.measure = mean(values)
    size = next(iter(a.sizes.values()))
    if len(values) > 1:
        out.measure_sd = stats.spread(values)
    elif size:
        out.measure_ci = stats.wilson(round(out.measure * size), size)
    return out


def paired_problems(a: Arm, base: Arm) -> tuple[Arm, Arm, str]:
    """The two arms with their per-problem measures where they pair; where the arms graded
    different problems, without them, and the one line that says so."""
    try:
        check_paired({"variant": a.problems, "baseline": base.problems})
    except UnpairedProblems as exc:
        strip = lambda x: Arm(x.measure, x.best, x.sizes)  # noqa: E731
        return strip(a), strip(base), str(exc)
    return a, base, ""


def _against(out: Versus, a: Arm, base: Arm) -> None:
    """Fill in the difference, its test and the seeds needed (the verdict waits for Holm)."""
    a, base, out.unpaired = paired_problems(a, base)
    try:
        choice = design.choose(a.runs(), base.runs(), delta=stats.EQUIVALENCE_DELTA)
    except ValueError as exc:  # outcomes of different problem counts under one subset: a broken row
        out.note = str(exc)
        return
    out.choice = choice
    out.note = choice.note or (ONE_SEED if choice.test in paired.RUN_TESTS else "")
    if choice.difference is None:
        return
    out.diff = choice.difference
    out.bca, out.mde, out.tost = choice.bca, choice.mde, choice.equivalence
    if choice.seeds_needed is not None:
        out.seeds_needed, out.seeds_needed_capped = choice.seeds_needed
    out.learned_forgot = _learned_forgot(a, base)
    if a.best and base.best:
        if choice.test in paired.RUN_TESTS:
            out.best_diff = next(iter(a.best.values())) - next(iter(base.best.values()))
            return
        best = design.choose(design.ArmRuns(a.best), design.ArmRuns(base.best))
        out.best_diff = mean(a.best.values()) - mean(base.best.values())
        if best.difference is not None:
            out.best_ci, out.best_test = (best.difference.low, best.difference.high), best.name


def _learned_forgot(a: Arm, base: Arm) -> dict[str, dict[str, int]] | None:
    """Which problems one arm has right and the other wrong, by level, over each arm's
    seeds with outcomes (design.learned_forgot); None without outcomes in both."""
    if not a.problems or not base.problems:
        return None
    import numpy as np

    vectors = [list(arm.problems.values()) for arm in (a, base)]
    means = [np.mean([m.values for m in v], axis=0) for v in vectors]
    if means[0].shape != means[1].shape:
        return None
    return design.learned_forgot(means[0], means[1], vectors[0][0].levels)


def compare_to_baseline(
    curves: dict[str, list[RunEvals]],
    baseline: str,
    source: str,
    last_k: int = LAST_K,
    at_step: int | None = None,
    score: str = metrics.EVAL_ACCURACY,
) -> BaselineComparison:
    """Every variant against the one labelled `baseline`, Holm-corrected across the study.

    curves: variant label -> its runs' eval curves (of `score`), in the table's order.
    """
    arms = {label: arm(runs, last_k, at_step, score) for label, runs in curves.items()}
    base = arms[baseline]
    out = []
    for label in curves:
        versus = _describe(label, arms[label])
        if label == baseline:
            versus.verdict = "baseline"
        else:
            _against(versus, arms[label], base)
        out.append(versus)
    tested = [v for v in out if v.diff is not None]
    for versus, p in zip(tested, stats.holm([v.diff.p for v in tested]), strict=True):
        versus.p_holm = p
        versus.verdict = verdict(versus, p)
    return BaselineComparison(baseline, source, last_k, out, len(tested))


def verdict(versus: Versus, p_holm: float) -> str:
    """better / worse / within noise for a test on the arms; for one run per arm, whether
    these two runs differ (paired.runs_verdict), which says nothing of the arms."""
    assert versus.diff is not None and versus.choice is not None
    if versus.choice.test in paired.RUN_TESTS:
        return paired.runs_verdict(p_holm)
    return stats.verdict(versus.diff.diff, p_holm)
