"""The numbers of `grpoctl compare`: the runs of a sweep side by side, one row per variant.

One row per variant: only the config keys that differ between the runs, then the
headline numbers (final and best eval accuracy with the step of the best, final response
length, token entropy and gradient norm, seconds per step, rollout and train tokens per
second, peak memory), the status and
the health flags. Runs of the same variant with different seeds fold into one row
(mean ± sd); a single run's accuracy carries its binomial standard error
sqrt(p(1-p)/n), about ±1.4 points at n = 1024, so a 1-point "win" reads as the noise it is.
With a baseline (the sweep spec's `baseline:`, or `--baseline VARIANT`) each variant is
also set against it (analysis/baseline.py): difference, interval, p-value, verdict.

It has to be quick on a registry of hundreds of runs (it runs while sweeps train, and
benchmarks/bench_compare.py holds it to a second for 100 runs x 200 steps x 30
metrics, start-up included): its reads are the registry's (registry/summaries.py: all the
runs at once, only the handful of metrics it shows, aggregates in SQL), and it imports no
pandas, matplotlib, torch or omegaconf. The table is drawn by cli/compare_view.py.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import mean, stdev
from typing import Any

from grpoctl import metrics
from grpoctl.analysis.baseline import LAST_K, BaselineComparison, RunEvals, compare_to_baseline, eval_curve_of
from grpoctl.analysis.health import HEALTH_METRICS, Flag, Series, grad_norm_measure, run_flags
from grpoctl.analysis.problems import Stored, outcome_kind, with_outcomes
from grpoctl.analysis.run_groups import fold_label, resolve_runs
from grpoctl.errors import UserError
from grpoctl.registry import Registry, Run, effective_status
from grpoctl.rules import EvalPoint, headline_accuracy
from grpoctl.run_identity import variant_hash, variant_items

# The only metrics fetched whole (everything else is aggregated in SQL): the health
# checks', and the prompts dynamic sampling drew, which the report needs to plot a study
# against rollouts generated (cli/report_plots.py).
SERIES_METRICS = (*HEALTH_METRICS, metrics.DYNAMIC_SAMPLING_PROMPTS)
# The throughput columns (medians over the run's steps), by the metric each shows.
THROUGHPUT_COLUMNS = {"rollout_tok_s": metrics.ROLLOUT_TOKENS_PER_S, "train_tok_s": metrics.TRAIN_TOKENS_PER_S}
# What makes two evals comparable (registry.COMPARABLE_EVAL_FIELDS), and the config keys
# that would explain a difference.
EVAL_FIELDS = {
    "decoding": "eval.",
    "subset_hash": "eval.subset",
    "data_hash": "data.",
    "template_hash": "prompt.template",
    "grader": None,
}


@dataclass
class ComparedRun:
    """One run with what compare needs of it."""

    run: Run
    status: str  # effective: "stale" for a running run that stopped heartbeating
    config: dict[str, Any]  # the keys that define its variant (rules.variant_items), flattened
    fold: str  # rules.variant_hash: runs that differ only by seed share it
    series: dict[str, Series] = field(default_factory=dict)
    evals: list[EvalPoint] = field(default_factory=list)  # its eval curve: (step, accuracy, n)
    eval_meta: list[dict] = field(default_factory=list)
    s_per_step: float | None = None  # median of time/step
    peak_mem: float | None = None
    throughput: dict[str, float] = field(default_factory=dict)  # medians, by metric name
    flags: list[Flag] = field(default_factory=list)
    scores: dict[str, list[EvalPoint]] = field(default_factory=dict)  # pass@k / maj@k curves, like evals
    # per eval kind (greedy, sampled): step -> (subset_hash, per-problem outcomes or None);
    # read only where problems are paired (`with_outcomes`)
    outcomes: dict[str, Stored] = field(default_factory=dict)


@dataclass
class Stat:
    """A number for a row: one run's value, or the mean over its seeds."""

    mean: float
    sd: float | None = None  # across seeds (2+ runs)
    se: float | None = None  # standard error: binomial for one run, of the mean for seeds
    k: int = 1  # how many runs it summarizes


@dataclass
class Row:
    label: str
    runs: list[ComparedRun]
    config: dict[str, Any]  # short key -> value, only the keys that differ
    values: dict[str, Stat]  # column key -> stat
    status: str
    flags: list[str]
    best: bool = False


@dataclass
class CompareTable:
    title: str
    rows: list[Row]
    keys: dict[str, str]  # full dotted key -> short name, the keys that differ
    columns: list[tuple[str, str]]  # (column key, header) for the numbers
    rank_by: str  # the column key that picks the best row
    warnings: list[str] = field(default_factory=list)
    at_step: int | None = None
    versus: BaselineComparison | None = None  # each variant against the baseline
    baseline_note: str = ""  # why there is no comparison against a baseline
    findings: list = field(default_factory=list)  # analysis.findings.Result of this study's declared findings
    family: dict | None = None  # the Holm family they were adjusted in: its size and where it was declared
    eval_set: str | None = None  # the eval set read as the headline (--headline); None: each run's own


# --------------------------------------------------------------------------- loading


def load_compared_runs(
    registry: Registry, runs: list[Run], extra_metric: str | None = None, eval_set: str | None = None
) -> list[ComparedRun]:
    """Configs, the health series, evals, s/step and peak memory of `runs`; their evals and
    pass@k / maj@k are those of each run's headline eval set, or of the set `eval_set`."""
    if extra_metric is not None and eval_set and metrics.is_eval(extra_metric):
        extra_metric = metrics.in_eval_set(eval_set, extra_metric)  # the set's own series
    names = list(SERIES_METRICS) + ([extra_metric] if extra_metric not in (None, *SERIES_METRICS) else [])
    summaries = registry.run_summaries([r.id for r in runs], names, eval_set=eval_set)
    data = []
    for run in runs:
        config, summary = json.loads(run.config), summaries[run.id]
        rd = ComparedRun(
            run,
            effective_status(run),
            variant_items(config),
            variant_hash(config),
            **vars(summary),  # its figures, under RunSummary's names
        )
        if eval_set and extra_metric in rd.series:  # the set's series, read under the name asked for
            rd.series[metrics.split_eval_set(extra_metric)[1]] = rd.series[extra_metric]
        # Health reads eval accuracy from the same eval results the table shows.
        series = {**rd.series, metrics.EVAL_ACCURACY: [(s, a) for s, a, _ in rd.evals]}
        rd.flags = run_flags(series, rd.status, run.last_step, run.error)
        data.append(rd)
    return data


# --------------------------------------------------------------------------- the numbers


def _lower_is_better(metric: str) -> bool:
    return metrics.lower_is_better(metric)


def _at(points: list, step: int | None):
    """The last point at or before `step` (the last point when step is None)."""
    eligible = [p for p in points if step is None or p[0] <= step]
    return eligible[-1] if eligible else None


def _binomial_se(p: float, n: int | None) -> float | None:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else None


def run_evals(rd: ComparedRun, metric: str) -> RunEvals:
    """One run's curve of `metric` with its seed and the outcomes behind it (those loaded)."""
    return RunEvals(rd.run.seed, eval_curve_of(rd, metric) or [], rd.outcomes.get(outcome_kind(metric), {}))


def study_curves(registry: Registry, table: CompareTable, metric: str) -> dict[str, list[RunEvals]]:
    """Each row's runs as compare_to_baseline reads them, outcomes loaded."""
    with_outcomes(registry, [rd for row in table.rows for rd in row.runs], metric, table.eval_set)
    return {row.label: [run_evals(rd, metric) for rd in row.runs] for row in table.rows}


def run_values(rd: ComparedRun, at_step: int | None, metric: str) -> dict[str, tuple[float, float | None]]:
    """{column: (value, standard error or None)} for one run."""
    out: dict[str, tuple[float, float | None]] = {}
    final = headline_accuracy(rd.evals, at_step)
    if final:
        out["final_acc"] = (final[1], _binomial_se(final[1], final[2]))
    trained = [e for e in rd.evals if e[0] > 0]  # the untrained step-0 eval is no one's best
    if trained and at_step is None:
        step, acc, n = max(trained, key=lambda e: (e[1], -e[0]))
        out["best_acc"] = (acc, _binomial_se(acc, n))
        out["best_step"] = (step, None)
    for column, name in (("length", metrics.RESPONSE_LENGTH), ("entropy", metrics.TOKEN_ENTROPY)):
        point = _at(rd.series.get(name, []), at_step)
        if point:
            out[column] = (point[1], None)
    grad = grad_norm_measure(rd.series.get(metrics.GRAD_NORM, []), at_step)
    if grad is not None:
        out["grad_norm"] = (grad, None)
    if rd.s_per_step is not None:
        out["s_per_step"] = (rd.s_per_step, None)
    if rd.peak_mem is not None:
        out["peak_mem"] = (rd.peak_mem, None)
    for column, name in THROUGHPUT_COLUMNS.items():
        if name in rd.throughput:
            out[column] = (rd.throughput[name], None)
    curve = eval_curve_of(rd, metric)
    if metric != metrics.EVAL_ACCURACY and curve is not None:
        # pass@k and maj@k read like accuracy: the final one with its binomial SE over the
        # problems sampled (a problem's pass@k lies in [0, 1], so the binomial SE errs wide)
        point = headline_accuracy(curve, at_step)
        if point:
            out["metric"] = (point[1], _binomial_se(point[1], point[2]))
        trained = [e for e in curve if e[0] > 0]
        if trained and at_step is None:
            step, value, n = max(trained, key=lambda e: (e[1], -e[0]))
            out["metric_best"], out["metric_step"] = (value, _binomial_se(value, n)), (step, None)
    elif metric != metrics.EVAL_ACCURACY:
        points = [p for p in rd.series.get(metric, []) if math.isfinite(p[1])]
        point = _at(points, at_step)
        if point:
            out["metric"] = (point[1], None)
        if points and at_step is None:
            pick = min if _lower_is_better(metric) else max
            step, value = pick(points, key=lambda p: (p[1], -p[0]) if pick is max else (p[1], p[0]))
            out["metric_best"], out["metric_step"] = (value, None), (step, None)
    return out


def _fold(values: list[tuple[float, float | None]]) -> Stat:
    if len(values) == 1:
        return Stat(values[0][0], se=values[0][1])
    xs = [v for v, _ in values]
    sd = stdev(xs)
    # The mean's standard error from the spread across seeds, but never below what the
    # evals' own sampling noise allows (two seeds can agree by luck).
    ses = [se for _, se in values if se is not None]
    floor = math.sqrt(mean(se * se for se in ses) / len(ses)) if ses else 0.0
    return Stat(mean(xs), sd=sd, se=max(sd / math.sqrt(len(xs)), floor), k=len(xs))


def _status(runs: list[ComparedRun]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for rd in runs:
        counts[rd.status] += 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _row_flags(members: list[ComparedRun]) -> list[str]:
    """`entropy collapse@12` for one run; `entropy collapse@12 (2/3 seeds)` for a fold,
    with the earliest step among the seeds that show it."""
    if len(members) == 1:
        return [f.short for f in members[0].flags]
    first: dict[str, int] = {}
    count: dict[str, int] = defaultdict(int)
    for rd in members:
        for kind in {f.kind for f in rd.flags}:
            count[kind] += 1
        for f in rd.flags:
            first[f.kind] = min(first.get(f.kind, f.step), f.step)
    return [
        f"{kind}@{step} ({count[kind]}/{len(members)} seeds)"
        for kind, step in sorted(first.items(), key=lambda kv: kv[1])
    ]


def _short_names(keys: list[str]) -> dict[str, str]:
    """optimizer.lr -> lr, unless another differing key also ends in .lr."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if sum(1 for k in keys if k == tail or k.endswith("." + tail)) == 1:
                out[key] = tail
                break
    return out


def _eval_warnings(runs: list[ComparedRun], differing: list[str]) -> list[str]:
    """One line per eval setting that is not the same for every run."""
    lines = []
    for name, config_prefix in EVAL_FIELDS.items():
        groups: dict[str, list[str]] = defaultdict(list)
        for rd in runs:
            for value in {m[name] for m in rd.eval_meta if m[name]}:
                groups[value].append(rd.run.name)
        if len(groups) < 2:
            continue
        parts = [
            f"{value[:40]} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
            for value, names in groups.items()
        ]
        why = ""
        if config_prefix and any(k.startswith(config_prefix) for k in differing):
            why = f" [expected: {config_prefix.rstrip('.')} varies]"
        lines.append(f"runs were evaluated with different {name.replace('_', ' ')}{why}: " + " vs ".join(parts))
    return lines


def _spec_baseline(registry: Registry, refs: list[str]) -> str | None:
    """The baseline variant a sweep's stored spec names, if `refs` is one sweep."""
    if len(refs) != 1:
        return None
    try:
        sweep = registry.get_sweep(refs[0])
    except UserError:
        return None
    return json.loads(sweep.spec or "{}").get("baseline")


def _baseline(registry: Registry, refs: list[str], rows: list[Row], asked: str | None) -> tuple[str | None, str, str]:
    """(baseline label, where it came from, why there is none)."""
    labels = [r.label for r in rows]
    if asked is not None:
        if asked not in labels:
            raise UserError(f"--baseline {asked!r} is not one of the variants: {', '.join(labels)}")
        return asked, "--baseline", ""
    named = _spec_baseline(registry, refs)
    if named is None:
        return None, "", "no baseline to compare against: name one with --baseline VARIANT"
    if named not in labels:
        return None, "", f"the spec's baseline '{named}' has no runs yet, so no variant is compared against it"
    return named, "the spec", ""


def build_compare_table(
    registry: Registry,
    refs: list[str],
    metric: str | None = None,
    at_step: int | None = None,
    baseline: str | None = None,
    last_k: int = LAST_K,
    findings: str | None = None,
    headline: str | None = None,
) -> CompareTable:
    """Everything `grpoctl compare` shows, as data (drawn by cli/compare_view.py).

    `findings`: a study spec or a page file whose declared findings form the Holm family
    (default: this sweep's own declared findings, if it has any). `headline`: the eval set
    (eval.sets) whose evals stand for each run's accuracy, pass@k and maj@k (default: each
    run's own headline set, the first); a metric named in a set (eval/SET/pass@8) names it too."""
    if last_k < 1:
        raise UserError(f"--last-k must be at least 1, got {last_k}")
    metric = metric or metrics.EVAL_ACCURACY
    metric_set, metric = metrics.split_eval_set(metric)
    if metric_set is not None and headline is not None and metric_set != headline:
        raise UserError(f"--metric names the eval set {metric_set!r} but --headline names {headline!r}: name one")
    headline = headline or metric_set
    if headline is not None and not metrics.EVAL_SET_NAME_RE.match(headline):
        raise UserError(f"--headline {headline!r} is not an eval set name (letters, digits, '_', '.', '-')")
    title, runs, notes, member_labels = resolve_runs(registry, refs)
    if not runs:
        raise UserError(f"'{title}' has no runs yet")
    if headline is not None:
        notes = notes + _headline_notes(registry, runs, headline)
        title += f" (eval set {headline})"
    data = load_compared_runs(registry, runs, metric, eval_set=headline)

    differing = sorted(
        k
        for k in set().union(*(rd.config for rd in data))
        if len({json.dumps(rd.config.get(k), sort_keys=True, default=str) for rd in data}) > 1
    )
    short = _short_names(differing)

    folds: dict[str, list[ComparedRun]] = {}
    for rd in data:
        folds.setdefault(rd.fold, []).append(rd)
    rows = []
    for members in folds.values():
        per_run = [run_values(rd, at_step, metric) for rd in members]
        columns = {c for values in per_run for c in values}
        stats = {c: _fold([v[c] for v in per_run if c in v]) for c in columns}
        label = fold_label([rd.run for rd in members], member_labels)
        flags = _row_flags(members)
        config = {short[k]: members[0].config.get(k) for k in differing}
        rows.append(Row(label, members, config, stats, _status(members), flags))

    rank_by = "final_acc" if metric == metrics.EVAL_ACCURACY else "metric"
    ranked = [r for r in rows if rank_by in r.values and math.isfinite(r.values[rank_by].mean)]
    if len(rows) > 1 and ranked:
        pick = min if _lower_is_better(metric) else max
        pick(ranked, key=lambda r: r.values[rank_by].mean).best = True

    acc = f"acc@{at_step}" if at_step is not None else "final acc"
    columns = [("final_acc", acc)]
    if at_step is None:
        columns += [("best_acc", "best acc"), ("best_step", "best step")]
    if metric != metrics.EVAL_ACCURACY:
        columns += [("metric", metric if at_step is None else f"{metric}@{at_step}")]
        if at_step is None:
            columns += [("metric_best", f"best {metric}"), ("metric_step", "step")]
    columns += [
        ("length", "length"),
        ("entropy", "entropy"),
        ("grad_norm", "mean grad norm"),
        ("s_per_step", "s/step"),
        ("rollout_tok_s", "rollout tok/s"),
        ("train_tok_s", "train tok/s"),
        ("peak_mem", "peak mem"),
    ]
    warnings = notes + _eval_warnings(data, differing)
    table = CompareTable(title, rows, short, columns, rank_by, warnings, at_step)
    table.eval_set = headline
    chosen, source, table.baseline_note = _baseline(registry, refs, rows, baseline)
    if chosen is not None and len(rows) > 1:
        # The verdicts rest on the metric asked for where it reads like accuracy (pass@k,
        # maj@k: the same last-k mean and tests), else on eval accuracy.
        tested = metric if metrics.is_sampled_score(metric) else metrics.EVAL_ACCURACY
        curves = study_curves(registry, table, tested)
        table.versus = compare_to_baseline(curves, chosen, source, last_k, at_step, tested)
        table.versus.metric = tested
        if metric == tested:
            _star_by_verdict(table)
    _findings(registry, refs, table, findings, at_step, baseline, last_k)
    return table


def _headline_notes(registry: Registry, runs: list[Run], headline: str) -> list[str]:
    """What --headline NAME leaves out: a line naming the runs without that eval set; refused
    in one line when no run has it."""
    names = registry.eval_set_names([r.id for r in runs])
    without = [r.name for r in runs if headline not in names[r.id]]
    if len(without) == len(runs):
        recorded = sorted({n for sets in names.values() for n in sets if n})
        known = f"the eval sets recorded: {', '.join(recorded)}" if recorded else "no run has named eval sets"
        raise UserError(f"--headline {headline}: no run has an eval set named {headline!r} ({known})")
    if not without:
        return []
    shown = ", ".join(without[:3]) + (", ..." if len(without) > 3 else "")
    return [f"{len(without)} of {len(runs)} runs have no eval set named {headline!r}, so no eval here: {shown}"]


def winner(table: CompareTable) -> tuple[str | None, str]:
    """(the winning row's label or None, why), read off the verdicts against the baseline:
    the best of the variants that beat it beyond noise; else the baseline itself when every
    tested variant is worse; else none, since "ahead" within noise wins nothing."""
    versus = table.versus
    tested = [v for v in versus.rows if v.verdict in ("better", "worse", "within noise")]
    better = [v for v in tested if v.verdict == "better"]
    if better:
        top = max(better, key=lambda v: v.measure)
        return top.label, f"better than {versus.baseline} beyond noise"
    if tested and all(v.verdict == "worse" for v in tested):
        return versus.baseline, "every variant tested against it is worse beyond noise"
    if not tested:
        if any(v.diff is not None for v in versus.rows):  # one seed per arm: runs compared, not arms
            return None, "with one seed per arm only the runs are compared, which says nothing of the arms"
        return None, "no variant could be tested against the baseline"
    within = [v.label for v in tested if v.verdict == "within noise"]
    return None, f"no variant beats {versus.baseline} beyond noise, and {', '.join(within)} within noise of it"


def _star_by_verdict(table: CompareTable) -> None:
    label, _ = winner(table)
    for row in table.rows:
        row.best = row.label == label


def _findings(registry: Registry, refs: list[str], table: CompareTable, path: str | None, *asked) -> None:
    """This study's declared findings, tested within their family: the page's (`path`)
    or the study's own. Only for the default view: a finding is declared on the spec's
    baseline and measures, so --at-step, --baseline or --last-k leave it out."""
    if len(refs) != 1 or table.versus is None or any(a not in (None, LAST_K) for a in asked):
        return
    from grpoctl.analysis import findings as F

    if path is not None:
        declared = F.family_findings(path)
        where = str(path)
    else:
        try:
            spec = json.loads(registry.get_sweep(refs[0]).spec or "{}")
        except UserError:
            return
        declared, where = F.stored_findings(spec), f"the {refs[0]} spec"
    if not any(f.study == refs[0] for f in declared):
        if path is not None:  # asked for, and nothing to show: say so rather than print nothing
            table.warnings.append(f"{path} declares no findings of {refs[0]}: no family to test")
        return
    results, _ = family_results(registry, declared, {refs[0]: table})
    size = sum(r.p_family is not None for r in results)
    table.findings = [r for r in results if r.finding.study == refs[0]]
    table.family = {"declared_in": where, "findings": len(declared), "tested": size}


def family_results(registry: Registry, findings: list, tables: dict | None = None) -> tuple[list, dict]:
    """Every finding of one family (analysis.findings.Finding) measured on the registry,
    Holm over the testable ones; `tables` (study -> CompareTable) are reused and completed."""
    from grpoctl.analysis.verdicts import measure_family

    tables = dict(tables or {})
    for study in dict.fromkeys(f.study for f in findings):
        if study not in tables:
            try:
                tables[study] = build_compare_table(registry, [study])
            except UserError:  # not run: its findings say so
                continue
    return measure_family(registry, findings, tables), tables
