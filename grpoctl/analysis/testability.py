"""Whether this setup can show a finding at all: its rules, each a number measured on the
runs and a threshold declared before them, never judged afterwards.

A finding's `testable:` is one rule or a list of them; it can be shown when every rule
holds. A rule is `at_least` / `at_most` its threshold in the arms named by `in`
(baseline | variant | every_arm), and its number is taken at the worst case in its
direction: the lowest run of those arms for `at_least`, the highest for `at_most`, so no
lucky seed or arm carries a start the others did not have.

Rules on one arm (`in` any of the three):

- mixed_groups_at_start: the share of rollout groups at the first step whose rewards
  are not all equal (1 - train/zero_std_group_fraction at step 1): with none, GRPO has no
  signal to learn from, so a start is tested only where it can learn;
- length_cv: sd / mean of the lengths, in the run's tokens (analysis/token_lengths.py), of
  its stored train completions; this spread includes the spread between prompts, so it
  bounds the within-group spread from above: below the threshold, the per-sequence length
  normalizations cannot differ;
- length_fill: mean train/response_length over max_tokens: near 1, dividing by the
  limit (constant) is dividing by each response's length (mean);
- start_format_rate: the step-0 eval's format rate (eval/format_rate), for a claim that
  rests on a start that can answer in the arm's format at all;
- rises_first: its best eval (after step 0) minus its step-0 eval, for "peaks then
  declines": an arm that never rose cannot decline from a peak;
- baseline_converged: the share of its final gain (the mean of its last 3 evals minus its
  step-0 eval) that it had made by the first eval of that window, for a claim set against
  a baseline's plateau: a baseline still climbing there has no plateau to compare with.
  A run whose gain is below the rule's `min_gain` fails it, with that gain as its number:
  a share of almost nothing says nothing. It reads the greedy eval (eval/accuracy) unless
  the rule names another `curve` that reads like accuracy (a sampled pass@k or maj@k):
  a finding read on a sampled curve can ask its baseline to have converged on that one.

Rules on the pair, the variant against the baseline, seed by seed (`in: variant`, the
default for them; the two arms of one seed start from the same weights):

- step1_grad_norm_gap: |variant / baseline - 1| of train/grad_norm at step 1: a gap there
  is the loss's arithmetic, not learning;
- start_accuracy_gap: the variant's step-0 eval accuracy minus the baseline's, for a
  claim that rests on one arm starting far above the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import stats
from grpoctl.analysis.baseline import eval_curve_of
from grpoctl.errors import UserError

RULES = {
    "mixed_groups_at_start": "groups with mixed rewards at step 1",
    "length_cv": "sd/mean of train completion lengths (tokens)",
    "length_fill": "mean response length / max tokens",
    "start_format_rate": "eval format rate at step 0",
    "step1_grad_norm_gap": "grad norm ratio's distance from 1 at step 1",
    "start_accuracy_gap": "step-0 eval accuracy, variant minus baseline",
    "rises_first": "best eval minus the step-0 eval",
    "baseline_converged": "share of its final gain made by the first eval of its last 3",
}
PAIR_RULES = ("step1_grad_norm_gap", "start_accuracy_gap")
PERCENT_RULES = (  # shown as %
    "mixed_groups_at_start",
    "start_format_rate",
    "start_accuracy_gap",
    "rises_first",
    "baseline_converged",
)
GAIN_RULES = ("baseline_converged",)  # rules that also need a min_gain
ARMS = ("baseline", "variant", "every_arm")
RULE_KEYS = {"rule", "in", "at_least", "at_most", "min_gain", "curve"}


@dataclass(frozen=True)
class Rule:
    rule: str
    arms: str  # baseline | variant | every_arm
    at_least: float | None = None
    at_most: float | None = None
    min_gain: float | None = None  # baseline_converged: the least final gain a share is read of
    curve: str | None = None  # baseline_converged: the eval curve it reads (None: eval/accuracy)

    @property
    def label(self) -> str:
        """What the rule measures, in words: its RULES entry, and the curve where it names one."""
        return RULES[self.rule] + (f" on {self.curve}" if self.curve else "")

    def describe(self) -> str:
        bound = f">= {self.at_least:g}" if self.at_least is not None else f"<= {self.at_most:g}"
        if self.rule in PAIR_RULES:
            return f"{self.label} {bound} on every seed"
        where = {"every_arm": "in every arm", "baseline": "in the baseline", "variant": "in the variant"}[self.arms]
        gain = f", of a gain >= {self.min_gain:g}" if self.min_gain is not None else ""
        return f"{self.label} {bound}{gain} {where}"

    def worst(self, values: list[float]) -> float:
        """The value the rule is judged on: the worst case in its direction."""
        return min(values) if self.at_least is not None else max(values)

    def holds(self, value: float) -> bool:
        if self.at_least is not None:
            return value >= self.at_least
        assert self.at_most is not None
        return value <= self.at_most


@dataclass
class Check:
    """One rule against the runs: its worst-case number, per arm, and whether it holds
    (None: the runs lack what it measures)."""

    rule: Rule
    value: float | None = None
    per_arm: dict[str, float] = field(default_factory=dict)
    holds: bool | None = None
    short_gain: float | None = None  # baseline_converged: the gain below min_gain that failed it (then value)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def parse_rules(raw: Any, at: str) -> tuple[Rule, ...]:
    """A finding's `testable:`, one rule (a mapping) or a list of them, checked."""
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise UserError(f"{at}: 'testable' lists no rule")
    return tuple(_parse_rule(item, at if len(items) == 1 else f"{at}: rule {i + 1}") for i, item in enumerate(items))


def _parse_rule(raw: Any, at: str) -> Rule:
    if not isinstance(raw, dict):
        raise UserError(f"{at}: 'testable' must be a mapping with rule, in and at_least or at_most, or a list of them")
    unknown = sorted(set(map(str, raw)) - RULE_KEYS)
    if unknown:
        raise UserError(f"{at}: testable: unknown key {unknown[0]!r} (known: {', '.join(sorted(RULE_KEYS))})")
    rule = raw.get("rule")
    if rule not in RULES:
        raise UserError(f"{at}: testable: rule {rule!r} is not one of: {', '.join(RULES)}")
    arms = raw.get("in", "variant" if rule in PAIR_RULES else "baseline" if rule in GAIN_RULES else "every_arm")
    if arms not in ARMS:
        raise UserError(f"{at}: testable: in {arms!r} is not one of: {', '.join(ARMS)}")
    if rule in PAIR_RULES and arms != "variant":
        raise UserError(f"{at}: testable: {rule} measures the variant against the baseline: its 'in' is variant")
    if ("at_least" in raw) == ("at_most" in raw):
        raise UserError(f"{at}: testable needs exactly one threshold, at_least or at_most")
    least = _number(raw["at_least"], f"{at}: testable: at_least") if "at_least" in raw else None
    most = _number(raw["at_most"], f"{at}: testable: at_most") if "at_most" in raw else None
    if (rule in GAIN_RULES) != ("min_gain" in raw):
        need = "needs" if rule in GAIN_RULES else "takes no"
        raise UserError(f"{at}: testable: {rule} {need} 'min_gain', the least final gain its share is read of")
    gain = _number(raw["min_gain"], f"{at}: testable: min_gain") if "min_gain" in raw else None
    curve = raw.get("curve")
    if curve is not None and (
        rule not in GAIN_RULES
        or not isinstance(curve, str)
        or not (curve == metrics.EVAL_ACCURACY or metrics.is_sampled_score(curve))
    ):
        raise UserError(
            f"{at}: testable: 'curve' is for {', '.join(GAIN_RULES)}, and names {metrics.EVAL_ACCURACY} or a "
            f"sampled score (eval/pass@k, eval/maj@k), got {curve!r}"
        )
    return Rule(rule, arms, least, most, gain, curve)


# --------------------------------------------------------------------------- measuring


def run_values(rule: str, arm, other, max_tokens: int | None) -> list[float]:
    """The rule's number for each run of `arm` (an analysis.findings.Arm); for a pair rule,
    for each seed both arms ran, `arm` against `other`."""
    out = []
    if rule in PAIR_RULES:
        theirs = {rd.run.seed: rd for rd in other.runs}
        for rd in arm.runs:
            partner = theirs.get(rd.run.seed)
            value = None if partner is None else _pair_value(rule, rd, partner)
            if value is not None:
                out.append(value)
        return out
    for rd in arm.runs:
        value = _run_value(rule, rd, arm.extra.get(rd.run.id, {}), max_tokens)
        if value is not None:
            out.append(value)
    return out


def _run_value(rule: str, rd, extra: dict, max_tokens: int | None) -> float | None:
    if rule == "mixed_groups_at_start":
        zero = extra.get("zero_std_at_start")
        return None if zero is None else 1 - zero
    if rule == "length_cv":
        lengths = extra.get("sample_lengths") or []
        if len(lengths) < 2 or fmean(lengths) == 0:
            return None
        return stats.spread(lengths) / fmean(lengths)
    if rule == "length_fill":
        mean = _series_mean(rd.series.get(metrics.RESPONSE_LENGTH, []))
        return mean / max_tokens if mean is not None and max_tokens else None
    if rule == "start_format_rate":
        return extra.get("format_rate_at_start")
    if rule == "rises_first":
        start, trained = _eval_at_start(rd.evals), [a for s, a, _ in rd.evals if s > 0]
        return None if start is None or not trained else max(trained) - start
    raise ValueError(rule)


def converged(evals: list, k: int = 3) -> tuple[float, float] | None:
    """(the share of its final gain a run had made by the first of its last k evals, that
    gain): the gain is the mean of the last k evals after step 0 minus the step-0 eval."""
    start, trained = _eval_at_start(evals), [(s, a) for s, a, _ in evals if s > 0]
    if start is None or len(trained) < k:
        return None
    window = trained[-k:]
    gain = fmean(a for _, a in window) - start
    return ((window[0][1] - start) / gain if gain > 0 else 0.0), gain


def _pair_value(rule: str, rd, partner) -> float | None:
    if rule == "step1_grad_norm_gap":
        mine, theirs = (
            _at_step(rd.series.get(metrics.GRAD_NORM, []), 1),
            _at_step(partner.series.get(metrics.GRAD_NORM, []), 1),
        )
        return abs(mine / theirs - 1) if mine and theirs else None
    if rule == "start_accuracy_gap":
        mine, theirs = _eval_at_start(rd.evals), _eval_at_start(partner.evals)
        return None if mine is None or theirs is None else mine - theirs
    raise ValueError(rule)


def _series_mean(series: list) -> float | None:
    values = [v for _, v in series if v is not None and math.isfinite(v)]
    return fmean(values) if values else None


def _at_step(series: list, step: int) -> float | None:
    return next((v for s, v in series if s == step and v is not None and math.isfinite(v)), None)


def _eval_at_start(evals: list) -> float | None:
    return next((a for s, a, _ in evals if s == 0), None)


def check(rule: Rule, variant, base, max_tokens: int | None) -> Check:
    """One rule on the two arms (analysis.findings.Arm), at its worst case."""
    result = Check(rule)
    if rule.rule in PAIR_RULES:
        arms = [(variant, base)]
    else:
        arms = {
            "baseline": [(base, variant)],
            "variant": [(variant, base)],
            "every_arm": [(variant, base), (base, variant)],
        }[rule.arms]
    if rule.rule in GAIN_RULES:
        return _check_gain(result, [arm for arm, _ in arms])
    for arm, other in arms:
        values = run_values(rule.rule, arm, other, max_tokens)
        if not values:
            return result  # not measurable in one of its arms
        result.per_arm[arm.label] = rule.worst(values)
    result.value = rule.worst(list(result.per_arm.values()))
    result.holds = rule.holds(result.value)
    return result


def _check_gain(result: Check, arms: list) -> Check:
    """baseline_converged on the arms' runs: the worst share, unless a run gained less than
    min_gain: then it fails with that (smallest) gain as its number."""
    rule = result.rule
    assert rule.min_gain is not None
    gains = []
    for arm in arms:
        curves = [eval_curve_of(rd, rule.curve or metrics.EVAL_ACCURACY) or [] for rd in arm.runs]
        measured = [m for curve in curves if (m := converged(curve)) is not None]
        if not measured:
            return result
        result.per_arm[arm.label] = rule.worst([share for share, _ in measured])
        gains += [gain for _, gain in measured]
    if min(gains) < rule.min_gain:
        result.short_gain = result.value = min(gains)
        result.holds = False
        return result
    result.value = rule.worst(list(result.per_arm.values()))
    result.holds = rule.holds(result.value)
    return result


def check_all(rules: tuple[Rule, ...], variant, base, max_tokens: int | None) -> tuple[list[Check], Check | None]:
    """Every rule's check, and the one that decides: the first that fails, else the first
    not measurable, else the first (every rule holds)."""
    checks = [check(rule, variant, base, max_tokens) for rule in rules]
    failing = [c for c in checks if c.holds is False]
    unknown = [c for c in checks if c.holds is None]
    deciding = (failing or unknown or checks or [None])[0]
    return checks, deciding


# --------------------------------------------------------------------------- what the rules read


def load_extra(registry, runs: list) -> dict[int, dict]:
    """Per run (registry Run rows), what the rules read beyond compare's table: the share of
    zero-variance groups at step 1, the step-0 eval's format rate, and the lengths of its
    stored train completions in its model's tokens (`length_unit` says when only bytes
    could be counted)."""
    import json

    from grpoctl.analysis.token_lengths import token_counter

    out = {}
    for run in runs:
        series = registry.metric_series(run.id, [metrics.ZERO_STD_GROUP_FRACTION, metrics.EVAL_FORMAT_RATE])
        model_path = str(json.loads(run.config or "{}").get("model", {}).get("path", ""))
        count, unit = token_counter(model_path)
        out[run.id] = {
            "zero_std_at_start": _at_step(series.get(metrics.ZERO_STD_GROUP_FRACTION, []), 1),
            "format_rate_at_start": _at_step(series.get(metrics.EVAL_FORMAT_RATE, []), 0),
            "sample_lengths": [count(s.response) for s in registry.samples(run.id, kind="train")],
            "length_unit": unit,
        }
    return out
