"""Findings declared before the runs, and what the runs say about them.

A study spec in `experiments/` may list the findings it tests (the seed's claims), each
with the measure that fits its wording, its expected direction, and a rule, with a
threshold, for whether this setup can show it at all:

    findings:
      - id: std-accuracy
        claim: "Dividing by the group's reward std gives higher accuracy (Qwen: 0.72 vs 0.65)."
        variant: std_off            # set against the spec's baseline
        measure: plateau            # plateau | collapse | peak_decline | auc | steps_to_share | grad_norm | series
        expect: lower               # higher | lower | same (the variant's measure against the baseline's)
        seed_effect: -0.07          # optional: the seed's own difference, in the measure's units
        delta: 0.03                 # expect: same only: the equivalence margin (default 3 points; needed in
                                    # the measure's unit where it is not in points)
        after_step: 10              # measure: collapse only: the first eval step counted
        testable: {rule: mixed_groups_at_start, in: every_arm, at_least: 0.2}

Measures, one number per run (then per seed against the baseline's):

- plateau: the mean of its last 3 evals (analysis/baseline.py's measure);
- collapse: its minimum eval from `after_step` on (default: every eval after step 0),
  for claims that a run "collapses", a trajectory the last evals can miss;
- peak_decline: its best eval (after step 0) minus its final eval, for "peaks then
  declines";
- auc: the area under its curve over its length in steps (the mean over training,
  trapezoids between points), for "converges fastest";
- steps_to_share: the first step at which its curve (a trailing mean of `window` points,
  default 1) has made `share` of the run's gain, from its first window to its last: a
  speed, in steps, for "learns faster" (a run that gains nothing has no such step);
- grad_norm: the mean of its per-step `train/grad_norm` over its steps (the one
  gradient-norm measure, also compare's column);
- series: the mean of the per-step series its `curve:` names (required: any train/ or
  time/ metric, such as train/response_length, train/ratio_max, train/ratio_min,
  train/clip_fraction, train/token_entropy) over the steps `steps: [first, last]` the run
  recorded (default: every step), in the series' own unit, so that a mechanism (length,
  drift) is declared with its expected direction like any finding; a run with a
  non-finite value there has no mean, as for grad_norm.

`curve:` names the curve a measure reads: `eval/accuracy` (the headline greedy eval, the
default), a sampled score such as `eval/pass@1` (the mean over n samples at temperature 1,
which keeps moving where greedy accuracy has saturated), or, for auc and steps_to_share,
`train/reward` per step (frequent where evals are not). Every eval measure is a weighted
sum of the curve's points, so each problem's own share of it can be had from the stored
per-problem outcomes (analysis/problems.py), and the test is the one the design allows
(analysis/design.py): arms with matched seeds are paired, with the problems in the
interval where outcomes were recorded.

`axis:` (auc and steps_to_share only) is the compute the speed is counted in
(analysis/axes.py has the vocabulary and how each is counted): `step` (the default, GRPO
steps), `update` (optimizer updates), `rollout` (rollouts generated, dynamic sampling's
extra rounds included) or `cpu_second` (the trainer's CPU-seconds, time/cpu). On any
axis but `step` the arms are compared at an equal budget: each curve is placed on the
axis (an eval at the cost of the steps before it and its own, a per-step train point at
the cost of the steps before it) and read over the range every run of both arms covers,
[0, X] with X the smallest final value over them (a diverged run's included), so the arm
that spends more per step is cut where the cheaper one ends; a curve with no point at 0
(no step-0 eval) moves the start to the latest first point. auc is then the mean height
over that range (the area, linear between points, over X: the curve's units, as on the
step axis); steps_to_share the axis value at which a curve cut at X first makes `share` of its gain
there. A run that did not record what its axis counts (time/cpu before it existed)
leaves the finding "not testable here", with a note saying what is missing.

    findings:
      - {id: reuse-per-update, claim: "...", variant: e2, measure: auc, axis: update, expect: same, ...}
      - {id: reuse-per-rollout, claim: "...", variant: e2, measure: auc, curve: train/reward, axis: rollout, ...}
      - {id: reuse-per-cpu, claim: "...", variant: e2, measure: steps_to_share, share: 0.5, axis: cpu_second, ...}
      - {id: reuse-drifts, claim: "...", variant: e16, measure: series, curve: train/ratio_max, steps: [50, 150],
         expect: higher, ...}

`testable:` is one rule or a list of rules, each a number measured on the runs with a
threshold (analysis/testability.py has them). A finding is measured only on runs that
ended (finished or diverged): a running member's evals so far are not its plateau.

A finding's verdict, in the order it is decided: "not run" (its study, its variant or
its baseline has no ended run yet, or not yet one for every seed its spec lists: no
verdict is read off part of a study's seeds), "not testable here" (a rule fails, or a run lacks
what the finding's axis counts), "not seen" (every
run of both arms measured the same number: no run of either "peaks then declines", say),
"both at ceiling" for an equivalence claim whose arms both sit within delta of the
measure's `ceiling` (no difference of delta fits there; only a measure in points has
one: an "expect: same" on steps or another axis's counts, a grad norm or a series
declares its own `delta` in that unit), then what the test says:
reproduced or contradicted when the family-adjusted p clears alpha; else "not
reproduced" when the 95% interval lies wholly short of the seed's own effect
(`seed_effect`) or of a declared minimum (`min_effect`), both signed in the claim's
direction; "inconclusive" only when it does not. Only testable findings with a test are
in the Holm family.

A page file (experiments/pages/*.yaml) may set a finding's rules in its own
`testable:` (finding id -> rules), in place of the spec's (see `family_findings`), and a
re-analysis overlay adds rules written after the data were seen (see `reanalysed`):
the frozen specs are never edited.

A spec that breaks the format is refused in one line (exit 2), like its other fields.

How a finding is measured is analysis/run_measures.py; how it is compared and judged, analysis/verdicts.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import axes, paired, stats
from grpoctl.analysis.baseline import LAST_K
from grpoctl.analysis.testability import Rule, parse_rules
from grpoctl.errors import UserError
from grpoctl.spec_file import read_spec

MEASURES = {
    "plateau": f"mean of the last {LAST_K} evals",
    "collapse": "minimum eval after warm-up",
    "peak_decline": "best eval minus final eval",
    "auc": "area under the eval curve",
    "steps_to_share": "first step reaching a share of the run's gain",
    "grad_norm": "mean train/grad_norm over steps",
    "series": "mean of a per-step curve over steps",
}
EXPECT = ("higher", "lower", "same")
FINDING_KEYS = {
    "id",
    "claim",
    "variant",
    "measure",
    "expect",
    "seed_effect",
    "min_effect",
    "delta",
    "after_step",
    "testable",
    "curve",
    "share",
    "window",
    "ceiling",
    "axis",
    "steps",
}
ENDED = ("finished", "diverged")  # a diverged run is a result (lr x 3.3), not an accident
PER_STEP = (metrics.REWARD,)  # curves a speed measure may read per step instead of per eval
SPEED = ("auc", "steps_to_share")  # the measures that may read a per-step curve, on any compute axis
NO_PROBLEMS = ("grad_norm", "steps_to_share", "series")  # measures no problem has a share in
NOT_REPRODUCED = "not reproduced"
POINT_UNITS = ("accuracy", "reward")  # units shown in points, with a ceiling at 1 and delta's default margin


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
    curve: str = metrics.EVAL_ACCURACY  # the curve the measure reads
    share: float | None = None  # steps_to_share: the share of the run's gain
    window: int = 1  # steps_to_share: the trailing mean's points
    min_effect: float | None = None  # the smallest effect the claim means, signed in its direction
    ceiling: float = paired.CEILING  # the measure's ceiling, for an equivalence claim
    axis: str = axes.STEP  # auc and steps_to_share: the compute axis they are read on (analysis/axes.py)
    steps: tuple[int, int] | None = None  # series: the first and last step averaged (None: every step)
    seeds: tuple[int, ...] | None = None  # the study's declared seeds (None: `--seeds auto` or none listed)

    @property
    def unit(self) -> str:
        """What the measure's numbers are: accuracy-like (shown in points), steps (or another
        axis's units), a grad norm, or a series' own unit."""
        if self.measure == "grad_norm":
            return "grad norm"
        if self.measure == "steps_to_share":
            return axes.UNITS[self.axis]
        if self.measure == "series":
            info = metrics.describe(self.curve)
            return info.unit if info is not None else ""
        return "reward" if self.curve in PER_STEP else "accuracy"

    @property
    def margin(self) -> str:
        """The equivalence margin in the measure's unit ("±3 pts")."""
        return f"±{100 * self.delta:g} pts" if self.unit in POINT_UNITS else f"±{self.delta:g} {self.unit}"

    @property
    def measure_text(self) -> str:
        """The measure in words, with its axis or step window where it has one."""
        if self.measure == "series":
            window = f"steps {self.steps[0]}-{self.steps[1]}" if self.steps else "every step"
            return f"mean {self.curve} over {window}"
        if self.axis == axes.STEP:
            return MEASURES[self.measure]
        if self.measure == "auc":
            return f"area under the curve per {axes.AXES[self.axis]}, over the arms' common budget"
        return f"{axes.UNITS[self.axis]} to a share of the run's gain, within the arms' common budget"


def per_problem(measure: str, curve: str) -> bool:
    """Whether each problem has a share in `measure` on `curve`: a weighted sum of evals."""
    return measure not in NO_PROBLEMS and curve not in PER_STEP


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
        finding = Finding(
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
            **_curve_keys(item, at),
        )
        if finding.unit not in POINT_UNITS:  # a count, a grad norm or a series: no default margin, no ceiling
            if finding.expect == "same" and "delta" not in item:
                raise UserError(f"{at}: expect: same on {finding.unit} needs 'delta', its margin in {finding.unit}")
            if "ceiling" in item:
                raise UserError(f"{at}: 'ceiling' is for a measure in points (accuracy, reward), not {finding.unit}")
        out.append(finding)
    return out


def _curve_keys(item: dict, at: str) -> dict[str, Any]:
    """The keys of a finding beyond its first format: which curve it reads, a speed
    measure's share, window and axis, a series' steps, its declared minimum effect and
    its measure's ceiling."""
    measure, out = item["measure"], {}
    curve = str(item.get("curve", metrics.EVAL_ACCURACY))
    if measure == "series":
        if "curve" not in item:
            raise UserError(f"{at}: measure series needs 'curve', a per-step series such as {metrics.RESPONSE_LENGTH}")
        if metrics.is_eval(curve) or metrics.describe(curve) is None:
            raise UserError(
                f"{at}: curve {curve!r} is not a per-step series grpoctl records "
                f"(such as {metrics.RESPONSE_LENGTH}, {metrics.RATIO_MAX}, {metrics.STEP_CPU})"
            )
    elif curve in PER_STEP:
        if measure not in SPEED:
            raise UserError(f"{at}: curve {curve!r} is per step: only {' and '.join(SPEED)} read one")
    elif curve != metrics.EVAL_ACCURACY and not (
        metrics.is_sampled_score(curve) and metrics.split_eval_set(curve)[0] is None
    ):
        raise UserError(
            f"{at}: curve {curve!r} is not a curve a finding reads: {metrics.EVAL_ACCURACY}, a sampled score "
            f"(eval/pass@1, eval/maj@4), or {', '.join(PER_STEP)}"
        )
    if measure == "grad_norm" and "curve" in item:
        raise UserError(f"{at}: measure grad_norm reads train/grad_norm: it takes no 'curve'")
    out["curve"] = curve
    if "axis" in item:
        if measure not in SPEED:
            raise UserError(f"{at}: 'axis' belongs to the speed measures, {' and '.join(SPEED)}")
        if item["axis"] not in axes.AXES:
            raise UserError(f"{at}: axis {item['axis']!r} is not one of: {', '.join(axes.AXES)}")
        out["axis"] = item["axis"]
    if "steps" in item:
        if measure != "series":
            raise UserError(f"{at}: 'steps' belongs to measure: series")
        steps = item["steps"]
        whole = isinstance(steps, list) and len(steps) == 2 and all(type(s) is int for s in steps)
        if not whole or not 1 <= steps[0] <= steps[1]:
            raise UserError(f"{at}: steps must be [first, last], whole steps with 1 <= first <= last, got {steps!r}")
        out["steps"] = (steps[0], steps[1])
    if measure == "steps_to_share":
        if "share" not in item:
            raise UserError(f"{at}: measure steps_to_share needs 'share', the share of the run's gain (0-1)")
        share = _number(item["share"], f"{at}: share")
        if not 0 < share <= 1:
            raise UserError(f"{at}: share must lie in (0, 1], got {share:g}")
        window = item.get("window", 1)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise UserError(f"{at}: window must be a whole number of points >= 1, got {window!r}")
        out["share"], out["window"] = share, window
    else:
        for key in ("share", "window"):
            if key in item:
                raise UserError(f"{at}: '{key}' belongs to measure: steps_to_share")
    if "min_effect" in item:
        if item["expect"] == "same":
            raise UserError(f"{at}: 'min_effect' is the smallest effect a direction claims; 'same' has delta")
        out["min_effect"] = _number(item["min_effect"], f"{at}: min_effect")
    if "ceiling" in item:
        if item["expect"] != "same":
            raise UserError(f"{at}: 'ceiling' is for an 'expect: same' finding (equivalence at a ceiling)")
        out["ceiling"] = _number(item["ceiling"], f"{at}: ceiling")
    return out


def read_findings(path: str | Path) -> tuple[str, list[Finding]]:
    """A study spec's name and its declared findings (checked as `grpoctl sweep` checks them)."""
    path = Path(path)
    data = read_spec(path)
    name = str(data.get("name") or path.stem)
    variants = [str(v) for v in (data.get("variants") or {})]
    baseline = data.get("baseline")
    found = parse_findings(data.get("findings"), name, variants, None if baseline is None else str(baseline), str(path))
    seeds = data.get("seeds")
    if isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds):
        found = [replace(f, seeds=tuple(seeds)) for f in found]
    return name, found


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
    itself is left as it ran. A re-analysis overlay (`of:` a page) gives its page's
    findings as it re-analyses them (`reanalysed`)."""
    path = Path(path)
    data = read_spec(path)
    if "of" in data:
        overlay = read_reanalysis(path)
        return reanalysed(family_findings(overlay.page), overlay)
    declared = [f for spec in family_specs(path) for f in read_findings(spec)[1]]
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


# --------------------------------------------------------------------------- re-analysis

REANALYSIS_KEYS = {"name", "of", "why", "measures", "findings"}
REANALYSED_KEYS = {"testable", "min_effect", "ceiling"}  # what an overlay may set on one finding


@dataclass(frozen=True)
class Reanalysis:
    """Rules and declarations written after a page's data were seen, kept apart from the
    frozen specs: rules added to every finding of a measure (`measures`), and per finding
    (`findings`: its id -> rules added, a minimum effect, its measure's ceiling)."""

    path: Path
    page: Path
    why: str
    by_measure: dict[str, tuple[Rule, ...]]
    by_finding: dict[str, dict[str, Any]]


def read_reanalysis(path: str | Path) -> Reanalysis:
    """A re-analysis overlay (experiments/pages/*-reanalysis.yaml), checked: one line for the
    first problem."""
    path = Path(path)
    data = read_spec(path)
    unknown = sorted(set(map(str, data)) - REANALYSIS_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(REANALYSIS_KEYS))})")
    page = path.parent / str(data.get("of", ""))
    if not data.get("of") or not page.is_file():
        raise UserError(f"{path}: 'of' must name the page file it re-analyses, next to it")
    measures = data.get("measures") or {}
    if not isinstance(measures, dict) or any(m not in MEASURES for m in measures):
        raise UserError(f"{path}: 'measures' maps measures ({', '.join(MEASURES)}) to the rules added to each")
    by_measure = {str(m): parse_rules(v, f"{path}: measures: {m}") for m, v in measures.items()}
    by_finding: dict[str, dict[str, Any]] = {}
    for fid, item in (data.get("findings") or {}).items():
        at = f"{path}: findings: {fid}"
        if not isinstance(item, dict) or not item or set(map(str, item)) - REANALYSED_KEYS:
            raise UserError(f"{at} sets one or more of: {', '.join(sorted(REANALYSED_KEYS))}")
        entry: dict[str, Any] = {}
        if "testable" in item:
            entry["testable"] = parse_rules(item["testable"], at)
        for key in ("min_effect", "ceiling"):
            if key in item:
                entry[key] = _number(item[key], f"{at}: {key}")
        by_finding[str(fid)] = entry
    return Reanalysis(path, page, str(data.get("why") or "").strip(), by_measure, by_finding)


def reanalysed(declared: list[Finding], overlay: Reanalysis) -> list[Finding]:
    """The findings as the overlay re-analyses them: every declared rule kept, its rules
    added after them; its minimum effects and ceilings set."""
    known = {f.id: f for f in declared}
    unknown = sorted(set(overlay.by_finding) - set(known))
    if unknown:
        raise UserError(f"{overlay.path}: findings: {unknown[0]!r} is not a finding of {overlay.page.name}")
    out = []
    for f in declared:
        entry = overlay.by_finding.get(f.id, {})
        if "min_effect" in entry and f.expect == "same":
            raise UserError(f"{overlay.path}: findings: {f.id}: 'min_effect' is for a direction; 'same' has delta")
        if "ceiling" in entry and f.expect != "same":
            raise UserError(f"{overlay.path}: findings: {f.id}: 'ceiling' is for an 'expect: same' finding")
        if "ceiling" in entry and f.unit not in POINT_UNITS:
            raise UserError(f"{overlay.path}: findings: {f.id}: 'ceiling' is for a measure in points, not {f.unit}")
        added = overlay.by_measure.get(f.measure, ()) + entry.get("testable", ())
        rules = tuple(dict.fromkeys(f.testable + added))  # a rule the spec already declared is not added twice
        out.append(
            replace(
                f,
                testable=rules,
                min_effect=entry.get("min_effect", f.min_effect),
                ceiling=entry.get("ceiling", f.ceiling),
            )
        )
    return out


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
