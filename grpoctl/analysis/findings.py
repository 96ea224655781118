"""Findings declared before the runs, and what the runs say about them.

A study spec in `experiments/` may list the findings it tests (the seed's claims), each
with the measure that fits its wording, its expected direction, and a rule, with a
threshold, for whether this setup can show it at all:

    findings:
      - id: std-accuracy
        claim: "Dividing by the group's reward std gives higher accuracy (Qwen: 0.72 vs 0.65)."
        variant: std_off            # set against the spec's baseline
        measure: plateau            # plateau | collapse | peak_decline | auc | grad_norm
        expect: lower               # higher | lower | same (the variant's measure against the baseline's)
        seed_effect: -0.07          # optional: the seed's own difference, in the measure's units
        delta: 0.03                 # expect: same only: the equivalence margin (default 3 points)
        after_step: 10              # measure: collapse only: the first eval step counted
        testable: {rule: mixed_groups_at_start, in: every_arm, at_least: 0.2}

Measures, one number per run (then per seed against the baseline's mean):

- plateau: the mean of its last 3 evals (analysis/baseline.py's measure);
- collapse: its minimum eval from `after_step` on (default: every eval after step 0),
  for claims that a run "collapses", a trajectory the last evals can miss;
- peak_decline: its best eval (after step 0) minus its final eval, for "peaks then
  declines";
- auc: the area under its eval curve over its length in steps (the mean accuracy over
  training, trapezoids between evals), for "converges fastest";
- grad_norm: the mean of its per-step `train/grad_norm` over its steps (the one
  gradient-norm measure, also compare's column).

`testable:` is one rule or a list of rules, each a number measured on the runs with a
threshold (analysis/testability.py has them). A finding is measured only on runs that
ended (finished or diverged): a running member's evals so far are not its plateau.

A finding's verdict, in the order it is decided: "not run" (its study, its variant or
its baseline has no ended run yet), "not testable here" (a rule fails), "not seen" (every
run of both arms measured the same number: no run of either "peaks then declines", say),
then what the test says. Only testable findings with a test are in the Holm family.

A page file (experiments/pages/*.yaml) may set a finding's rules in its own
`testable:` (finding id -> rules), in place of the spec's (see `family_findings`).

A spec that breaks the format is refused in one line (exit 2), like its other fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import stats
from grpoctl.analysis.baseline import LAST_K, last_evals
from grpoctl.analysis.health import grad_norm_measure
from grpoctl.analysis.testability import RULES, Check, Rule, check_all, load_extra, parse_rules
from grpoctl.errors import UserError
from grpoctl.spec_file import read_spec

MEASURES = {
    "plateau": f"mean of the last {LAST_K} evals",
    "collapse": "minimum eval after warm-up",
    "peak_decline": "best eval minus final eval",
    "auc": "area under the eval curve",
    "grad_norm": "mean train/grad_norm over steps",
}
EXPECT = ("higher", "lower", "same")
FINDING_KEYS = {"id", "claim", "variant", "measure", "expect", "seed_effect", "delta", "after_step", "testable"}
ENDED = ("finished", "diverged")  # a diverged run is a result (lr x 3.3), not an accident


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    study: str
    variant: str
    measure: str
    expect: str
    testable: tuple[Rule, ...]  # every one must hold
    seed_effect: float | None = None
    delta: float = stats.EQUIVALENCE_DELTA
    after_step: int = 1
    baseline: str = ""  # the spec's baseline, named on the page even before anything ran


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def parse_findings(raw: Any, study: str, variants: list[str], baseline: str | None, where: str) -> list[Finding]:
    """The `findings:` list of a spec, checked: one UserError line for the first problem."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UserError(f"{where}: 'findings' must be a list of findings")
    if baseline is None:
        raise UserError(f"{where}: 'findings' need a 'baseline:' to set each variant against")
    out, seen = [], set()
    for i, item in enumerate(raw):
        at = f"{where}: finding {i + 1}"
        if not isinstance(item, dict):
            raise UserError(f"{at} must be a mapping")
        unknown = sorted(set(map(str, item)) - FINDING_KEYS)
        if unknown:
            raise UserError(f"{at}: unknown key {unknown[0]!r} (known: {', '.join(sorted(FINDING_KEYS))})")
        for key in ("id", "claim", "variant", "measure", "expect", "testable"):
            if key not in item:
                raise UserError(f"{at}: missing '{key}'")
        fid = str(item["id"])
        at = f"{where}: finding '{fid}'"
        if fid in seen:
            raise UserError(f"{at} is declared twice")
        seen.add(fid)
        variant = str(item["variant"])
        if variant not in variants:
            raise UserError(f"{at}: variant {variant!r} is not one of the variants: {', '.join(variants)}")
        if variant == baseline:
            raise UserError(f"{at}: variant {variant!r} is the baseline itself")
        if item["measure"] not in MEASURES:
            raise UserError(f"{at}: measure {item['measure']!r} is not one of: {', '.join(MEASURES)}")
        if item["expect"] not in EXPECT:
            raise UserError(f"{at}: expect {item['expect']!r} is not one of: {', '.join(EXPECT)}")
        if "delta" in item and item["expect"] != "same":
            raise UserError(f"{at}: 'delta' is the equivalence margin of an 'expect: same' finding")
        delta = _number(item.get("delta", stats.EQUIVALENCE_DELTA), f"{at}: delta")
        if delta <= 0:
            raise UserError(f"{at}: delta must be positive, got {delta:g}")
        if "after_step" in item and item["measure"] != "collapse":
            raise UserError(f"{at}: 'after_step' belongs to measure: collapse")
        after = item.get("after_step", 1)
        if isinstance(after, bool) or not isinstance(after, int) or after < 1:
            raise UserError(f"{at}: after_step must be a whole number of steps >= 1, got {after!r}")
        seed_effect = item.get("seed_effect")
        if seed_effect is not None:
            seed_effect = _number(seed_effect, f"{at}: seed_effect")
        out.append(
            Finding(
                fid,
                str(item["claim"]),
                study,
                variant,
                item["measure"],
                item["expect"],
                parse_rules(item["testable"], at),
                seed_effect,
                delta,
                after,
                baseline,
            )
        )
    return out


def read_findings(path: str | Path) -> tuple[str, list[Finding]]:
    """A study spec's name and its declared findings (checked as `grpoctl sweep` checks them)."""
    path = Path(path)
    data = read_spec(path)
    name = str(data.get("name") or path.stem)
    variants = [str(v) for v in (data.get("variants") or {})]
    baseline = data.get("baseline")
    return name, parse_findings(
        data.get("findings"), name, variants, None if baseline is None else str(baseline), str(path)
    )


# --------------------------------------------------------------------------- measuring


def run_measure(measure: str, evals: list, grad_norm: list, after_step: int = 1) -> float | None:
    """One run's number for `measure` (None when it has no data for it)."""
    trained = [(s, a) for s, a, _ in evals if s > 0]
    if measure == "plateau":
        last = last_evals(evals, LAST_K)
        return None if last is None else last[0]
    if measure == "collapse":
        after = [a for s, a in trained if s >= after_step]
        return min(after) if after else None
    if measure == "peak_decline":
        return max(a for _, a in trained) - trained[-1][1] if trained else None
    if measure == "auc":
        return auc(evals)
    if measure == "grad_norm":
        return grad_norm_mean(grad_norm)
    raise ValueError(measure)


def grad_norm_mean(series: list) -> float | None:
    """The one gradient-norm measure, compare's (analysis/health.py); None when not finite."""
    value = grad_norm_measure(series)
    return value if value is not None and math.isfinite(value) else None


def final_eval(evals: list) -> float | None:
    trained = [a for s, a, _ in evals if s > 0]
    return trained[-1] if trained else None


def auc(evals: list) -> float | None:
    """Area under the eval curve from the first eval to the last, over its length in steps:
    the mean accuracy over training (trapezoids between evals)."""
    if len(evals) < 2:
        return None
    area = sum((s1 - s0) * (a0 + a1) / 2 for (s0, a0, _), (s1, a1, _) in pairwise(evals))
    return area / (evals[-1][0] - evals[0][0])


@dataclass
class Arm:
    """One variant's runs, as the numbers the findings read."""

    label: str
    runs: list[Any]  # analysis.compare.ComparedRun
    extra: dict[int, dict] = field(default_factory=dict)  # run id -> measurements needing more data

    def per_seed(self, measure: str, after_step: int = 1) -> list[float]:
        values = [run_measure(measure, rd.evals, rd.series.get(metrics.GRAD_NORM, []), after_step) for rd in self.runs]
        return [v for v in values if v is not None]


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
    diff: stats.Difference | None = None
    equivalence: stats.Equivalence | None = None
    p: float | None = None  # the test's p: Welch's for a direction, TOST's for "same"
    p_family: float | None = None  # Holm over the page's testable findings
    mde: float | None = None
    mde_family: float | None = None  # at Holm's strictest alpha (alpha / family size)
    seeds_for_seed_effect: tuple[int, bool] | None = None
    robustness: dict[str, stats.Difference | None] = field(default_factory=dict)
    unended: int = 0  # runs of its arms still running (or interrupted, failed): left out
    note: str = ""
    verdict: str = ""

    @property
    def seeds(self) -> tuple[int, int]:
        return len(self.variant_values), len(self.baseline_values)

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
        result.note = f"not measurable: {RULES[result.deciding.rule.rule]} is missing from the runs"


def measure_against(result: Result, variant: Arm, base: Arm) -> None:
    f = result.finding
    result.variant_values = variant.per_seed(f.measure, f.after_step)
    result.baseline_values = base.per_seed(f.measure, f.after_step)
    v, b = result.variant_values, result.baseline_values
    if len(v) < 2 or len(b) < 2:
        result.note = result.note or f"{len(v)} against {len(b)} seeds: a test over seeds needs 2+ in each arm"
        return
    if stats.spread(v) == 0 and stats.spread(b) == 0:
        result.note = result.note or "every seed of both arms scored the same: nothing to test against"
        return
    result.diff = stats.welch(v, b)
    sd = stats.pooled_sd(v, b)
    result.mde = stats.mde(sd, len(v), len(b))
    if f.expect == "same":
        result.equivalence = stats.tost(v, b, f.delta)
        result.p = result.equivalence.p
    else:
        result.p = result.diff.p
    if f.seed_effect is not None:
        result.seeds_for_seed_effect = stats.seeds_needed(f.seed_effect, sd)
    if f.measure != "grad_norm":
        for name, pick in ROBUSTNESS.items():
            vv = [x for rd in variant.runs if (x := pick(rd.evals)) is not None]
            bb = [x for rd in base.runs if (x := pick(rd.evals)) is not None]
            try:
                result.robustness[name] = stats.welch(vv, bb)
            except ValueError:  # too few seeds, or no spread: no interval to show
                result.robustness[name] = None


def _last_k(evals: list) -> float | None:
    last = last_evals(evals, LAST_K)
    return None if last is None else last[0]


# The same comparison under other measures: a verdict that flips between them rests on
# where the curves happen to be at the end, not on a difference in how runs learn.
ROBUSTNESS = {
    "last-3": lambda evals: _last_k(evals),
    "final": lambda evals: final_eval(evals),
    "AUC": lambda evals: auc(evals),
}


def verdict(result: Result, alpha: float = stats.ALPHA) -> str:
    """The verdict's words, from the family-adjusted p and the expected direction."""
    f = result.finding
    if result.not_run:
        return "not run"
    if not result.testable:
        return "not testable here"
    if result.diff is None and result.variant_values and result.baseline_values:
        values = set(result.variant_values + result.baseline_values)
        if len(values) == 1 and len(result.variant_values) > 1 and len(result.baseline_values) > 1:
            return f"not seen: {values.pop():g} in every run of both arms"
    if result.diff is None or result.p_family is None:
        few = min(result.seeds) < 2
        return "no test" + (f": {result.seeds[0]} seed(s) against {result.seeds[1]}" if few else "")
    d = result.diff
    if f.expect == "same":
        if result.p_family < alpha:
            return f"reproduced: equivalent within ±{100 * f.delta:g} pts"
        if d.p < alpha and not (-f.delta < d.low and d.high < f.delta):
            return "contradicted: it differs"
        return f"inconclusive: neither equivalence within ±{100 * f.delta:g} nor a difference is shown"
    if result.p_family < alpha:
        seen = "higher" if d.diff > 0 else "lower"
        return "reproduced" if seen == f.expect else f"contradicted: {seen}"
    return "inconclusive: not resolved at these seeds"


def _ended(runs: list) -> tuple[list, int]:
    """The runs that ended (finished or diverged), and how many others were left out."""
    kept = [rd for rd in runs if getattr(rd.run, "status", "finished") in ENDED]
    return kept, len(runs) - len(kept)


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
        variant = Arm(f.variant, arms[f.variant], extra)
        base = Arm(baseline, arms[baseline], extra)
        decide_testable(result, variant, base, max_tokens.get(f.study))
        measure_against(result, variant, base)
        results.append(result)
    # the family: findings that ran, are testable by every rule, and have a test
    family = {i: r.p for i, r in enumerate(results) if not r.not_run and r.testable and r.p is not None}
    adjusted = stats.holm_family(family)
    m = len(family)
    for i, r in enumerate(results):
        r.p_family = adjusted.get(i)
        if r.diff is not None and m:
            sd = stats.pooled_sd(r.variant_values, r.baseline_values)
            r.mde_family = stats.mde(sd, *r.seeds, alpha=stats.ALPHA / m)
        r.verdict = verdict(r)
    return results


# --------------------------------------------------------------------------- families


def family_specs(path: str | Path) -> list[Path]:
    """The study specs whose findings form one family: a page file lists them
    (`studies: [tiny-lr-sweep.yaml, ...]`, relative to it), a study spec is its own."""
    path = Path(path)
    data = read_spec(path)
    studies = data.get("studies")
    if studies is None:
        return [path]
    if not isinstance(studies, list) or not studies:
        raise UserError(f"{path}: 'studies' must list the study specs of the page")
    out = []
    for study in studies:
        candidates = [path.parent / str(study), Path(str(study))]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise UserError(f"{path}: study spec {study!r} not found next to it or in the current directory")
        out.append(found)
    return out


def family_findings(path: str | Path) -> list[Finding]:
    """Every finding of a family (a page file's, or a study spec's own), with the rules a
    page sets in place of its specs': a page's `testable:` maps a finding's id to its
    rules there, for a rule the spec could not state when it was declared. The spec
    itself is left as it ran."""
    path = Path(path)
    declared = [f for spec in family_specs(path) for f in read_findings(spec)[1]]
    data = read_spec(path)
    overrides = data.get("testable") if data.get("studies") is not None else None
    if overrides is None:
        return declared
    if not isinstance(overrides, dict):
        raise UserError(f"{path}: 'testable' must map finding ids to their rules on this page")
    ids = {f.id for f in declared}
    unknown = sorted(set(map(str, overrides)) - ids)
    if unknown:
        raise UserError(f"{path}: testable: {unknown[0]!r} is not a finding of the page's studies")
    rules = {str(k): parse_rules(v, f"{path}: testable: {k}") for k, v in overrides.items()}
    return [replace(f, testable=rules[f.id]) if f.id in rules else f for f in declared]


def stored_findings(spec: dict) -> list[Finding]:
    """A recorded sweep's declared findings: in its stored spec, or (for a sweep recorded
    before it declared any) in its spec file, when that file is here."""
    name = str(spec.get("name") or "")
    variants = [str(v) for v in (spec.get("variants") or {})]
    baseline = spec.get("baseline")
    if spec.get("findings") is not None:
        return parse_findings(spec["findings"], name, variants, baseline, f"sweep {name}")
    file = spec.get("file")
    if file and Path(file).is_file():
        return read_findings(file)[1]
    return []


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
    return evaluate(tables, findings, extra, max_tokens)
