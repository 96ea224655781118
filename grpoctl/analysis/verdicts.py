"""Measuring a declared finding and deciding its verdict (the findings themselves, their
format, families and re-analysis overlays: findings.py).

Each run gets the finding's measure (run_measures.py: the plateau, the final eval, the area
under the curve, the steps to a share of the gain, the grad norm, a series' mean; a speed
measure on a compute axis at the arms' common budget, common_budget here); the variant's runs are compared with the baseline's by the test the design allows
(design.choose: paired over matched seeds, with the problems when outcomes were
recorded); the rules decide whether this setup can show the finding at all
(decide_testable), and `verdict` reads the result in the page's vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import axes, design, paired, stats
from grpoctl.analysis.baseline import seed_keys
from grpoctl.analysis.findings import ENDED, NOT_REPRODUCED, POINT_UNITS, Finding, per_problem
from grpoctl.analysis.problems import (
    ProblemMeasure,
    UnpairedProblems,
    check_paired,
    outcome_kind,
    weighted,
    with_outcomes,
)
from grpoctl.analysis.run_measures import (
    Budget,
    axis_steps_to_share,
    axis_weights,
    curve_of,
    placed,
    run_measure,
    weighted_sum,
)
from grpoctl.analysis.testability import Check, check_all, load_extra


@dataclass
class Arm:
    """One variant's runs, as the numbers the findings read."""

    label: str
    runs: list[Any]  # analysis.compare.ComparedRun
    extra: dict[int, dict] = field(default_factory=dict)  # run id -> measurements needing more data

    def _keyed(self) -> list[tuple[Hashable, Any]]:
        return list(zip(seed_keys([rd.run for rd in self.runs]), self.runs, strict=True))

    def by_seed(self, f: Finding, measure: str | None = None, budget: Budget | None = None) -> dict[Hashable, float]:
        """Each run's number for the finding's measure (or `measure`, on the finding's curve), by
        seed; a speed measure on a compute axis over the arms' common `budget` (common_budget)."""
        measure = measure or f.measure
        out = {}
        for key, rd in self._keyed():
            if budget is not None and measure == "steps_to_share":
                value = axis_steps_to_share(rd, f, budget)
            elif budget is not None and measure == "auc":
                value = weighted_sum(curve_of(rd, f.curve), axis_weights(measure, rd, f, budget))
            else:
                value = run_measure(
                    measure,
                    curve_of(rd, f.curve),
                    rd.series.get(f.curve if measure == "series" else metrics.GRAD_NORM, []),
                    f.after_step,
                    f.share,
                    f.window,
                    f.steps,
                )
            if value is not None:
                out[key] = value
        return out

    def per_seed(self, measure: str, after_step: int = 1) -> list[float]:
        return list(self.by_seed(Finding("", "", "", "", measure, "higher", (), after_step=after_step)).values())

    def problems(
        self, f: Finding, measure: str | None = None, budget: Budget | None = None
    ) -> dict[Hashable, ProblemMeasure]:
        """Each run's measure problem by problem, by seed, where its outcomes are loaded and
        recorded (an eval measure only)."""
        measure = measure or f.measure
        if not per_problem(measure, f.curve):
            return {}
        kind = outcome_kind(f.curve)
        out = {}
        for key, rd in self._keyed():
            stored = getattr(rd, "outcomes", {}).get(kind)
            weights = axis_weights(measure, rd, f, budget)
            if stored and weights:
                problems = weighted(stored, weights, f.curve)
                if problems is not None:
                    out[key] = problems
        return out


@dataclass
class Result:
    """A finding against the runs."""

    finding: Finding
    baseline: str
    not_run: bool = False  # its study, variant or baseline has no ended run
    checks: list[Check] = field(default_factory=list)  # one per rule
    deciding: Check | None = None  # the rule the verdict rests on (testability.check_all)
    testable: bool = False
    variant_values: list[float] = field(default_factory=list)
    baseline_values: list[float] = field(default_factory=list)
    choice: design.Choice | None = None  # the test the design allowed
    diff: stats.Difference | None = None
    equivalence: paired.PairedEquivalence | None = None
    p: float | None = None  # the test's p: its own for a direction, TOST's for "same"
    p_family: float | None = None  # Holm over the page's testable findings
    mde: float | None = None
    mde_family: float | None = None  # at Holm's strictest alpha (alpha / family size)
    seeds_needed: tuple[int, bool] | None = None  # to resolve the observed difference, under the test applied
    seeds_for_seed_effect: tuple[int, bool] | None = None
    robustness: dict[str, design.Choice | None] = field(default_factory=dict)
    unpaired: str = ""  # why recorded per-problem outcomes were not paired
    unended: int = 0  # runs of its arms still running (or interrupted, failed): left out
    budget: Budget | None = None  # a speed measure on a compute axis: the range every run was read over
    note: str = ""
    verdict: str = ""

    @property
    def seeds(self) -> tuple[int, int]:
        return len(self.variant_values), len(self.baseline_values)

    @property
    def test(self) -> str:
        """The short name of the test behind the difference ("" when none ran)."""
        return self.choice.name if self.choice is not None and self.diff is not None else ""

    @property
    def problem_level(self) -> str | None:
        """Whether the interval covers the problems; None for a measure no problem has a part in."""
        f = self.finding
        if not per_problem(f.measure, f.curve):
            return None
        if self.unpaired:
            return paired.LABELS["problems not paired"]
        return self.choice.problem_level if self.choice is not None else None

    @property
    def rule_value(self) -> float | None:
        """The deciding rule's number (its worst case)."""
        return None if self.deciding is None else self.deciding.value

    @property
    def rule_values(self) -> dict[str, float]:
        return {} if self.deciding is None else self.deciding.per_arm


def decide_testable(result: Result, variant: Arm, base: Arm, max_tokens: int | None) -> None:
    result.checks, result.deciding = check_all(result.finding.testable, variant, base, max_tokens)
    result.testable = bool(result.checks) and all(c.holds for c in result.checks)
    if result.deciding is not None and result.deciding.holds is None:
        result.note = f"not measurable: {result.deciding.rule.label} is missing from the runs"


def _arm_runs(values: dict[Hashable, float], problems: dict[Hashable, ProblemMeasure]) -> design.ArmRuns:
    return design.ArmRuns(values, {k: m.values for k, m in problems.items()})


def common_budget(f: Finding, variant: Arm, base: Arm) -> tuple[Budget | None, int]:
    """The range of the finding's compute axis that every run of both arms covers
    (analysis/axes.py; None where they share none), and how many runs could not be placed
    on the axis (they did not record what it counts: then there is no range)."""
    where = [placed(rd, f) for rd in variant.runs + base.runs]
    missing = sum(p is None for p in where)
    return (None if missing else axes.common_range([p for p in where if p is not None])), missing


def arm_values(f: Finding, variant: Arm, base: Arm) -> tuple[dict[Hashable, float], dict[Hashable, float]]:
    """The finding's measure in both arms by seed, at their common budget on a compute axis
    (none where the axis cannot be read)."""
    budget = None
    if f.axis != axes.STEP:
        budget = common_budget(f, variant, base)[0]
        if budget is None:
            return {}, {}
    return variant.by_seed(f, budget=budget), base.by_seed(f, budget=budget)


def compared(
    f: Finding, variant: Arm, base: Arm, measure: str | None = None, budget: Budget | None = None
) -> tuple[design.Choice, dict[Hashable, float], dict[Hashable, float], str]:
    """The finding's measure (or `measure`) in both arms under the test the design allows,
    at `budget` on a compute axis: (the choice, the variant's and the baseline's values by
    seed, why recorded outcomes were not paired)."""
    v, b = variant.by_seed(f, measure, budget), base.by_seed(f, measure, budget)
    v_problems, b_problems = variant.problems(f, measure, budget), base.problems(f, measure, budget)
    unpaired = ""
    try:
        check_paired({variant.label: v_problems, base.label: b_problems})
    except UnpairedProblems as exc:
        v_problems, b_problems, unpaired = {}, {}, str(exc)
    delta = f.delta if f.expect == "same" and measure is None else None
    ceiling = f.ceiling if f.unit in POINT_UNITS else math.inf  # a count or a series has no ceiling
    choice = design.choose(_arm_runs(v, v_problems), _arm_runs(b, b_problems), delta=delta, ceiling=ceiling)
    return choice, v, b, unpaired


def measure_against(result: Result, variant: Arm, base: Arm) -> None:
    f = result.finding
    if f.axis != axes.STEP:
        result.budget, missing = common_budget(f, variant, base)
        if missing:  # runs recorded before what the axis counts: these runs cannot show the finding
            result.testable = False
            counted = axes.READS.get(f.axis, f.axis)
            result.note = result.note or (
                f"not measurable: {counted} is missing from {missing} of the arms' "
                f"{len(variant.runs) + len(base.runs)} runs"
            )
            return
        if result.budget is None:
            result.note = result.note or f"the runs cover no common range of {axes.UNITS[f.axis]}"
            return
    choice, v, b, result.unpaired = compared(f, variant, base, budget=result.budget)
    result.variant_values, result.baseline_values = list(v.values()), list(b.values())
    if len(v) < 2 or len(b) < 2:
        result.note = result.note or f"{len(v)} against {len(b)} seeds: a test over seeds needs 2+ in each arm"
        return
    if choice.difference is None:
        result.note = result.note or choice.note
        return
    result.choice, result.diff = choice, choice.difference
    result.mde = choice.mde
    result.seeds_needed = choice.seeds_needed
    if f.expect == "same":
        result.equivalence = choice.equivalence
        assert result.equivalence is not None
        # both arms at the ceiling: the TOST p says nothing, and no verdict is given
        result.p = None if result.equivalence.outcome else result.equivalence.p
    else:
        result.p = choice.difference.p
    if f.seed_effect is not None:
        result.seeds_for_seed_effect = design.seeds_for(choice, f.seed_effect)
    if per_problem(f.measure, f.curve):
        for name, measure in ROBUSTNESS.items():
            other = compared(f, variant, base, measure, result.budget)[0]
            result.robustness[name] = other if other.difference is not None else None


# The same comparison under other measures: a verdict that flips between them rests on
# where the curves happen to be at the end, not on a difference in how runs learn.
ROBUSTNESS = {"last-3": "plateau", "final": "final", "AUC": "auc"}


def short_of(low: float, high: float, effect: float) -> bool:
    """The interval lies wholly on zero's side of `effect`: it rules the effect out."""
    return low > effect if effect < 0 else high < effect


def verdict(result: Result, alpha: float = stats.ALPHA, family: int = 1) -> str:
    """The verdict's words, from the family-adjusted p and the expected direction. An
    equivalence claim's family p is its TOST's; "it differs" needs the difference's own p
    adjusted for the `family` size too (Bonferroni, Holm's first step: conservative), so
    neither reading of a "same" finding escapes the page's family."""
    f = result.finding
    if result.not_run:
        return "not run"
    if not result.testable:
        return "not testable here"
    if result.diff is None and result.variant_values and result.baseline_values:
        values = set(result.variant_values + result.baseline_values)
        if len(values) == 1 and len(result.variant_values) > 1 and len(result.baseline_values) > 1:
            return f"not seen: {values.pop():g} in every run of both arms"
    if result.equivalence is not None and result.equivalence.outcome:
        return result.equivalence.outcome  # both at the ceiling
    if result.diff is None or result.p_family is None:
        few = min(result.seeds) < 2
        return "no test" + (f": {result.seeds[0]} seed(s) against {result.seeds[1]}" if few else "")
    d = result.diff
    if f.expect == "same":
        if result.p_family < alpha:
            return f"reproduced: equivalent within {f.margin}"
        if d.p * max(family, 1) < alpha and not (-f.delta < d.low and d.high < f.delta):
            return "contradicted: it differs"
        return f"inconclusive: neither equivalence within {f.margin} nor a difference is shown"
    if result.p_family < alpha:
        seen = "higher" if d.diff > 0 else "lower"
        return "reproduced" if seen == f.expect else f"contradicted: {seen}"
    if f.seed_effect is not None and short_of(d.low, d.high, f.seed_effect):
        return f"{NOT_REPRODUCED}: the interval excludes the seed's effect"
    if f.min_effect is not None and short_of(d.low, d.high, f.min_effect):
        return f"{NOT_REPRODUCED}: the interval excludes the declared minimum"
    return "inconclusive: not resolved at these seeds"


def _ended(runs: list) -> tuple[list, int]:
    """The runs that ended (finished or diverged), and how many others were left out."""
    kept = [rd for rd in runs if getattr(rd.run, "status", "finished") in ENDED]
    return kept, len(runs) - len(kept)


def _seeds_left(f: Finding, arms: dict[str, list]) -> list[str]:
    """Each arm that has not yet ended a run for every seed the study declares, in words:
    a verdict read off part of the seeds would be read before the study is done."""
    if f.seeds is None:
        return []
    out = []
    for label, runs in arms.items():
        ended = {rd.run.seed for rd in runs} & set(f.seeds)
        if len(ended) < len(f.seeds):
            out.append(f"`{label}` has {len(ended)} of its {len(f.seeds)} seeds ended")
    return out


def evaluate(tables: dict, findings: list[Finding], extra: dict[int, dict], max_tokens: dict[str, int]) -> list[Result]:
    """Every finding against its study's table (analysis.compare.CompareTable by study),
    with one Holm family over the testable ones. `extra`: per run id, the numbers the
    testability rules need beyond the table (testability.load_extra)."""
    results = []
    for f in findings:
        table = tables.get(f.study)
        if table is None or table.versus is None:
            results.append(Result(f, f.baseline, not_run=True, note="not run"))
            continue
        rows = {r.label: r for r in table.rows}
        baseline = table.versus.baseline
        result = Result(f, baseline)
        arms = {}
        for label in (f.variant, baseline):
            runs, left_out = _ended(rows[label].runs) if label in rows else ([], 0)
            result.unended += left_out
            arms[label] = runs
        missing = [label for label, runs in arms.items() if not runs]
        if missing:
            result.not_run = True
            result.note = "not run: " + " and ".join(f"`{m}`" for m in missing) + " has no ended run yet"
            results.append(result)
            continue
        partial = _seeds_left(f, arms)
        if partial:
            result.not_run = True
            result.note = "not run yet: " + "; ".join(partial)
            results.append(result)
            continue
        variant = Arm(f.variant, arms[f.variant], extra)
        base = Arm(baseline, arms[baseline], extra)
        decide_testable(result, variant, base, max_tokens.get(f.study))
        measure_against(result, variant, base)
        results.append(result)
    # the family: findings that ran, are testable by every rule, and have a test; and each
    # finding not run yet, at p = 1 until it runs. Holm's step-down can then only lower the
    # others' adjusted p as studies land (a real p is at most 1, and a pending finding that
    # turns out untestable leaves the family): a verdict read while a round is under way
    # stands when it is done.
    family = {i: r.p for i, r in enumerate(results) if not r.not_run and r.testable and r.p is not None}
    pending = {i: 1.0 for i, r in enumerate(results) if r.not_run}
    adjusted = {i: p for i, p in stats.holm_family({**family, **pending}).items() if i not in pending}
    m = len(family) + len(pending)
    for i, r in enumerate(results):
        r.p_family = adjusted.get(i)
        if r.choice is not None and m:
            r.mde_family = design.mde_at(r.choice, stats.ALPHA / m)
        r.verdict = verdict(r, family=m)
    return results


def measure_family(registry, findings: list[Finding], tables: dict) -> list[Result]:
    """Every finding of one family measured on the registry, Holm over the testable ones.

    tables: study -> its CompareTable, one for each study that has runs (a study missing
    from it has not been run, and its findings say so); analysis.compare.family_results
    builds them.
    """
    import json

    runs = {rd.run.id: rd.run for t in tables.values() for row in t.rows for rd in row.runs}
    extra = load_extra(registry, list(runs.values()))
    max_tokens = {}
    for study, t in tables.items():
        members = [rd for row in t.rows for rd in row.runs]
        if members:
            max_tokens[study] = json.loads(members[0].run.config).get("rollout", {}).get("max_tokens")
        # the per-problem outcomes behind each eval curve its findings read (one read per kind)
        mine = [f for f in findings if f.study == study]
        for curve in dict.fromkeys(f.curve for f in mine if metrics.is_eval(f.curve)):
            with_outcomes(registry, members, curve, t.eval_set)
        with_series(registry, members, mine)
    return evaluate(tables, findings, extra, max_tokens)


def with_series(registry, runs: list, findings: list[Finding]) -> None:
    """Load into each run's series (analysis.compare.ComparedRun) the per-step series the
    findings read beyond compare's: a series measure's curve, what a compute axis counts."""
    names = {f.curve for f in findings if f.measure == "series"}
    names |= {axes.READS[f.axis] for f in findings if f.axis in axes.READS}
    for rd in runs:
        wanted = sorted(n for n in names if n not in rd.series)
        if wanted:
            rd.series.update({n: [] for n in wanted} | registry.metric_series(rd.run.id, wanted))
