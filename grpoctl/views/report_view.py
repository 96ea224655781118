"""What `grpoctl report NAME` writes: a markdown report of a sweep, with PNG plots, in one folder.

It answers the questions the seed's write-ups answer for each ablation: what varied and
what was held fixed, the numbers side by side, the curves (eval accuracy, reward,
response length, entropy, working share, gradient norm; drift where a run went
off-policy), what went wrong and when, who won and by how much, and, for each variant
against the baseline, whether the difference is more than the noise between seeds (or,
with one seed, between evals), in a table and a sentence.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import internal_pilot, mechanisms, paired, stats
from grpoctl.analysis.baseline import BaselineComparison, Versus
from grpoctl.analysis.compare import CompareTable, Row, build_compare_table
from grpoctl.errors import UserError
from grpoctl.formatting import format_config_value
from grpoctl.registry import Registry
from grpoctl.run_identity import variant_items
from grpoctl.views import compare_view as tables


def default_folder(name: str) -> Path:
    return Path("reports") / "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)


def write_report(
    registry: Registry, name: str, folder: Path | None = None, level_accuracy: bool = False, **table_options: Any
) -> Path:
    """Write `report.md` and its plots into `folder` (default reports/NAME/); return its path.
    `level_accuracy`: also draw each level's sampled train accuracy, one panel a level (a
    results page asks for it by study: every lab run records levels 1-5, and most studies
    are not about them). `table_options`: build_compare_table's baseline, last_k, findings
    (the family its declared findings are tested in) and headline (the eval set read as
    each run's headline), as compare's flags give them."""
    table = build_compare_table(registry, [name], **table_options)
    folder = Path(folder) if folder is not None else default_folder(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write the report to {folder}: {exc.strerror}") from None
    from grpoctl.views.report_evals import eval_sections
    from grpoctl.views.report_plots import plot_all  # matplotlib: only now

    plots = plot_all(table.rows, folder, name)
    plots += _series_family_plots(registry, table, folder)
    plots += _panel_plots(registry, table, folder, name, level_accuracy)
    evals = eval_sections(registry, table, folder, name)
    text = "\n".join(_sections(registry, name, table, plots, evals)) + "\n"
    path = folder / "report.md"
    path.write_text(text)
    return path


def _series_family_plots(registry: Registry, table: CompareTable, folder: Path) -> list[tuple[str, str]]:
    """The curves of each family of named series (report_plots.SERIES_FAMILIES: the reward
    components, the curriculum's levels) that the runs recorded."""
    from grpoctl.views.report_plots import SERIES_FAMILIES, plot_series_family

    ids = [rd.run.id for row in table.rows for rd in row.runs if rd.run.id is not None]
    made = []
    recorded = registry.metric_names(ids)
    for family in SERIES_FAMILIES:
        names = [n for n in recorded if family.member(n) is not None]
        if not names:
            continue
        series = {run_id: registry.metric_series(run_id, names) for run_id in ids}
        if plot_series_family(family, table.rows, series, folder / family.filename):
            made.append((family.filename, family.caption))
    return made


def _panel_plots(
    registry: Registry, table: CompareTable, folder: Path, name: str, level_accuracy: bool
) -> list[tuple[str, str]]:
    """Drift (ratio max, ratio min, clip fraction) where some run moved off-policy
    (mechanisms.moved_off_policy), and with `level_accuracy` each level's sampled accuracy."""
    from grpoctl.views.report_plots import DRIFT_PLOT, LEVEL_PLOT, plot_panels

    ids = [rd.run.id for row in table.rows for rd in row.runs if rd.run.id is not None]
    recorded = registry.metric_names(ids)
    made = []
    drift = {n: registry.metric_of_runs(ids, n) for n in mechanisms.DRIFT if n in recorded}
    if mechanisms.moved_off_policy(points for n in mechanisms.RATIOS for points in drift.get(n, {}).values()):
        panels = [(n, metrics.TABLE[n].description) for n in mechanisms.DRIFT]
        series = {run_id: {n: by_run[run_id] for n, by_run in drift.items()} for run_id in ids}
        # a ratio's log: 2 and 1/2 are as far from on-policy, and one spike does not flatten the rest
        title = f"{name}: drift off-policy"
        if plot_panels(table.rows, series, panels, folder / DRIFT_PLOT[0], title, log_scale=mechanisms.RATIOS):
            made.append(DRIFT_PLOT)
    levels = [metrics.level_accuracy(level) for level in mechanisms.recorded_levels(recorded)]
    if level_accuracy and levels:
        panels = [(n, f"level {metrics.level_of_accuracy(n)}") for n in levels]
        series = {run_id: registry.metric_series(run_id, levels) for run_id in ids}
        title = f"{name}: sampled train accuracy by level"
        if plot_panels(table.rows, series, panels, folder / LEVEL_PLOT[0], title, ncols=min(len(levels), 5)):
            made.append(LEVEL_PLOT)
    return made


def _sections(
    registry: Registry, name: str, table: CompareTable, plots: list[tuple[str, str]], evals: list[str] | None = None
):
    runs = [rd for row in table.rows for rd in row.runs]
    kind, spec, design = _sweep(registry, name)
    yield f"# {name}"
    yield ""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    yield (
        f"{kind.capitalize()} of {len(runs)} run(s) in {len(table.rows)} variant(s); "
        f"generated {stamp} from `{registry.public_url}`."
    )
    if spec:
        yield ""
        yield f"Asked for: {spec}"
    if table.eval_set:
        yield ""
        yield f"Headline eval set: **{table.eval_set}** (`--headline`): every accuracy, pass@k and maj@k below is its."
    yield ""

    yield "## What varied"
    yield ""
    if table.keys:
        for full, short in table.keys.items():
            values = dict.fromkeys(format_config_value(row.config.get(short)) for row in table.rows)
            yield f"- `{full}`: {', '.join(values)}"
    else:
        yield "- nothing but the seed"
    seeds = sorted({rd.run.seed for rd in runs})
    if len(seeds) > 1:
        yield f"- seeds: {', '.join(map(str, seeds))} (folded into mean ± sd per variant)"
    yield ""
    if design:
        yield "## Seeds chosen by an internal pilot (`--seeds auto`)"
        yield ""
        yield (
            "The pilot's runs are study runs; the variance was re-estimated blinded (without the arms' labels) "
            "once, and every finding is tested once, over every seed, at the fixed alpha (docs/commands.md)."
        )
        yield ""
        for line in internal_pilot.describe(design):
            yield f"- {line}"
        yield ""
    yield "## What was shared"
    yield ""
    yield from _shared(table) or ["- the defaults, unchanged"]
    yield ""

    yield "## Results"
    yield ""
    for warning in table.warnings:
        yield f"> **warning:** {warning}"
        yield ""
    yield tables.markdown(table)
    yield from _winners(table)

    yield "## Against the baseline"
    yield ""
    yield tables.versus_markdown(table, notes=False)  # the sentences below carry the caveats
    if table.versus is not None:
        for versus in table.versus.rows:
            if versus.verdict != "baseline":
                yield f"- {_sentence(table.versus, versus)}"
        yield ""
        if tables.learned_forgot_rows(table):
            yield "### Learned and forgot, problem by problem"
            yield ""
            yield tables.learned_forgot_markdown(table)

    if table.findings:
        yield "## Declared findings"
        yield ""
        yield tables.findings_markdown(table)

    if plots:
        yield "## Curves"
        yield ""
        for filename, label in plots:
            yield f"![{label}]({filename})"
            yield ""

    yield from evals or []  # pass@k and maj@k, and the breakdowns (cli/report_evals.py)

    yield "## Health"
    yield ""
    flagged = [rd for rd in runs if rd.flags]
    if not flagged:
        yield "No run raised a health flag."
    for rd in flagged:
        yield f"- **{rd.run.name}** ({rd.run.variant or 'no variant'}): " + "; ".join(map(str, rd.flags))
    yield ""
    yield "What each flag means, and when it can fire at all:"
    yield ""
    from grpoctl.analysis.health import FLAGS

    for kind, (meaning, when) in FLAGS.items():
        yield f"- **{kind}**: {meaning} Can fire: {when}"
    yield ""

    broken = [rd for rd in runs if rd.status not in ("finished", "running")]
    if broken:
        yield "## Runs that did not finish"
        yield ""
        for rd in broken:
            error = (rd.run.error or "no error recorded").strip().splitlines()
            where = f"at step {rd.run.last_step} of {rd.run.total_steps}"
            yield f"- **{rd.run.name}**: {rd.status} {where}: `{error[0][:300]}`"
        yield ""


def _sweep(registry: Registry, name: str) -> tuple[str, str, dict]:
    """("ablation", "what was asked for", its design) for a recorded sweep (the design {}
    unless `--seeds auto` sized it); ("group", "", {}) otherwise."""
    try:
        sweep = registry.get_sweep(name)
    except UserError:
        return "group", "", {}
    spec, design = json.loads(sweep.spec or "{}"), json.loads(sweep.design or "{}")
    if sweep.kind == "sweep":
        return "sweep", f"`{spec.get('param')}` over `{spec.get('values')}`", design
    return sweep.kind, f"`{spec['file']}`" if spec.get("file") else "", design


def _shared(table: CompareTable) -> list[str]:
    """The non-default keys every run has, with the same value (from each run's diff):
    those that define a variant, not its name, seed, paths or display."""
    diffs = [variant_items(json.loads(rd.run.config_diff or "{}")) for row in table.rows for rd in row.runs]
    if not diffs:
        return []
    first = diffs[0]
    shared = {k: v for k, v in first.items() if all(k in d and d[k] == v for d in diffs[1:])}
    return [f"- `{k}` = {format_config_value(v)}" for k, v in sorted(shared.items())]


def _winners(table: CompareTable):
    """Who won, in the verdicts' words: a winner only where a verdict says so; who is merely
    ahead is shown as that, with whether a comparison could tell it from noise."""
    from grpoctl.analysis.compare import winner

    if table.versus is not None:
        label, why = winner(table)
        versus = {v.label: v for v in table.versus.rows}
        if label is not None:
            v = versus[label]
            how = ""
            if v.diff is not None:
                how = f": {_points(v.diff.diff)} points, p {tables.pvalue(v.p_holm)} after Holm ({v.test})"
            yield f"**Winner:** {label} ({why}{how}). ★ marks it."
        else:
            yield f"**No winner:** {why}; ★ marks no row."
        yield ""
    upward = " Best-so-far is biased upward: the best of several noisy evals (step 0, before training, excluded)."
    noise = (
        " Within noise unless the comparison against the baseline says otherwise."
        if table.versus is not None
        else " No baseline is named, so nothing says whether this lead is more than noise."
    )
    for column, what, caveat in (("final_acc", "final", noise), ("best_acc", "best", upward)):
        ranked = sorted((r for r in table.rows if column in r.values), key=lambda r: -r.values[column].mean)
        if not ranked:
            continue
        yield f"**Ahead by {what} eval accuracy:** {_lead(ranked, column)}{caveat}"
        yield ""


def _lead(ranked: list[Row], column: str) -> str:
    top = ranked[0]
    stat = top.values[column]
    step = top.values.get("best_step") if column == "best_acc" else None
    at = f" (step {step.mean:.0f})" if step and len(top.runs) == 1 else ""
    text = f"{top.label} with {stat.mean:.3f}{at}"
    if len(ranked) == 1:
        return text + " (the only variant with an eval)."
    second = ranked[1].values[column]
    return text + f", {(stat.mean - second.mean) * 100:.1f} points ahead of {ranked[1].label} ({second.mean:.3f})."


def _points(x: float) -> str:
    return f"{x * 100:+.1f}".replace("-", "−")


def _sentence(comparison: BaselineComparison, v: Versus) -> str:
    """One variant against the baseline, in words, naming the test behind every number."""
    base = next(b for b in comparison.rows if b.label == comparison.baseline)
    head = f"**{v.label}** against **{base.label}**"
    if v.diff is None or v.choice is None:
        return f"{head}: not tested: {v.note}."
    measure = tables.measure_name(comparison)
    d = v.diff
    holm = f"{tables.pvalue(v.p_holm)} after Holm over {comparison.tested}: **{v.verdict}**."
    if v.choice.test == "two-proportion":

        def wilson(interval: tuple[float, float] | None) -> str:
            return f"Wilson 95% CI {interval[0]:.3f} to {interval[1]:.3f}" if interval else "eval size unknown"

        return (
            f"{head} ({measure}, one seed each): {v.measure:.3f} ({wilson(v.measure_ci)}) against "
            f"{base.measure:.3f} ({wilson(base.measure_ci)}), "
            f"{_points(d.diff)} points, 95% CI {_points(d.low)} to {_points(d.high)} (Newcombe), "
            f"two-proportion p = {tables.pvalue(d.p)}, {holm} With one seed per arm and no per-problem outcomes "
            "this rests on eval noise alone: it compares these two runs, not the arms; another seed could land "
            "further away than this interval allows, and the seeds needed cannot be estimated without a second."
        )
    if v.choice.test in paired.RUN_TESTS:
        return (
            f"{head} ({measure}, one seed each): {v.measure:.3f} against {base.measure:.3f}, "
            f"{_points(d.diff)} points, 95% CI {_points(d.low)} to {_points(d.high)} ({v.test}), "
            f"p = {tables.pvalue(d.p)}, {holm} This compares these two runs on the same problems, not the arms: "
            "another seed could differ from this one by more, and the seeds needed cannot be estimated without a "
            "second."
        )
    how = v.test + (f"; {v.problem_level}" if v.problem_level else "")
    if v.bca:
        how += f"; BCa bootstrap {_points(v.bca[0])} to {_points(v.bca[1])}"
    text = (
        f"{head} ({measure}, {v.seeds} vs {base.seeds} seeds): {v.measure:.3f} against "
        f"{base.measure:.3f}, {_points(d.diff)} points, 95% CI {_points(d.low)} to {_points(d.high)} ({how}), "
        f"p = {tables.pvalue(d.p)}, {holm}"
    )
    unit = "pairs of seeds" if v.choice.test in paired.PAIRED_TESTS else "seeds per arm"
    if v.seeds_needed_capped:
        text += f" A difference this close to zero would need more than {v.seeds_needed} {unit} to resolve"
    else:
        text += (
            f" Seeds needed to resolve a difference this size (α {stats.ALPHA:g}, power {stats.POWER:g}, "
            f"{v.test.split(',')[0]}): about {v.seeds_needed} {unit}"
        )
    text += f" (this study has {v.choice.pairs or min(v.seeds, base.seeds)})."
    if v.unpaired:
        text += f" {v.unpaired[0].upper()}{v.unpaired[1:]}."
    if v.best_diff is not None:
        text += f" Best-so-far: {_points(v.best_diff)} points"
        if v.best_ci:
            text += f" (95% CI {_points(v.best_ci[0])} to {_points(v.best_ci[1])}, {v.best_test})"
        text += ", biased upward and not the verdict's basis."
    return text
