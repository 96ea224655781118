"""`grpoctl report NAME`: a markdown report of a sweep, with PNG plots, in one folder.

It answers the questions the seed's write-ups answer for each ablation: what varied and
what was held fixed, the numbers side by side, the curves (eval accuracy, reward,
response length, entropy, gradient norm), what went wrong and when, and who won, by
how much, and whether that margin is more than the evals' own noise.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

from grpoctl.analysis import tables
from grpoctl.analysis.compare import NOT_COMPARED, CompareTable, Row, build_compare_table, flatten
from grpoctl.errors import UserError
from grpoctl.registry import Registry

# A margin under this many standard errors of the difference is called noise.
NOISE_SE = 2.0


def default_folder(name: str) -> Path:
    return Path("reports") / "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)


def write_report(registry: Registry, name: str, folder: Path | None = None) -> Path:
    """Write `report.md` and its plots into `folder` (default reports/NAME/); return its path."""
    table = build_compare_table(registry, [name])
    folder = Path(folder) if folder is not None else default_folder(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write the report to {folder}: {exc.strerror}") from None
    from grpoctl.analysis.plots import plot_all  # matplotlib: only now

    plots = plot_all(table.rows, folder, name)
    text = "\n".join(_sections(registry, name, table, plots)) + "\n"
    path = folder / "report.md"
    path.write_text(text)
    return path


def _sections(registry: Registry, name: str, table: CompareTable, plots: list[tuple[str, str]]):
    runs = [rd for row in table.rows for rd in row.runs]
    kind, spec = _sweep(registry, name)
    yield f"# {name}"
    yield ""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    yield (f"{kind.capitalize()} of {len(runs)} run(s) in {len(table.rows)} variant(s); "
           f"generated {stamp} from `{registry.url.render_as_string(hide_password=True)}`.")
    if spec:
        yield ""
        yield f"Asked for: {spec}"
    yield ""

    yield "## What varied"
    yield ""
    if table.keys:
        for full, short in table.keys.items():
            values = dict.fromkeys(tables.config_cell(row.config.get(short)) for row in table.rows)
            yield f"- `{full}`: {', '.join(values)}"
    else:
        yield "- nothing but the seed"
    seeds = sorted({rd.run.seed for rd in runs})
    if len(seeds) > 1:
        yield f"- seeds: {', '.join(map(str, seeds))} (folded into mean ± sd per variant)"
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

    if plots:
        yield "## Curves"
        yield ""
        for filename, label in plots:
            yield f"![{label}]({filename})"
            yield ""

    yield "## Health"
    yield ""
    flagged = [rd for rd in runs if rd.flags]
    if not flagged:
        yield "No run shows entropy collapse, length collapse or blow-up, a grad-norm explosion or a flat reward."
    for rd in flagged:
        yield f"- **{rd.run.name}** ({rd.run.variant or 'no variant'}): " + "; ".join(map(str, rd.flags))
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


def _sweep(registry: Registry, name: str) -> tuple[str, str]:
    """("ablation", "what was asked for") for a recorded sweep; ("group", "") otherwise."""
    try:
        sweep = registry.get_sweep(name)
    except UserError:
        return "group", ""
    spec = json.loads(sweep.spec or "{}")
    if sweep.kind == "sweep":
        return "sweep", f"`{spec.get('param')}` over `{spec.get('values')}`"
    return sweep.kind, f"`{spec['file']}`" if spec.get("file") else ""


def _shared(table: CompareTable) -> list[str]:
    """The non-default keys every run has, with the same value (from each run's diff)."""
    diffs = []
    for row in table.rows:
        for rd in row.runs:
            diffs.append({k: v for k, v in flatten(json.loads(rd.run.config_diff or "{}")).items()
                          if k not in NOT_COMPARED})
    if not diffs:
        return []
    first = diffs[0]
    shared = {k: v for k, v in first.items() if all(k in d and d[k] == v for d in diffs[1:])}
    return [f"- `{k}` = {tables.config_cell(v)}" for k, v in sorted(shared.items())]


def _winners(table: CompareTable):
    for column, what in (("final_acc", "final"), ("best_acc", "best")):
        ranked = sorted((r for r in table.rows if column in r.values), key=lambda r: -r.values[column].mean)
        if not ranked:
            continue
        yield f"**Winner by {what} eval accuracy:** {_verdict(ranked, column)}"
        yield ""


def _verdict(ranked: list[Row], column: str) -> str:
    top = ranked[0]
    stat = top.values[column]
    step = top.values.get("best_step") if column == "best_acc" else None
    at = f" (step {step.mean:.0f})" if step and len(top.runs) == 1 else ""
    text = f"{top.label} with {stat.mean:.3f}{at}"
    if len(ranked) == 1:
        return text + " (the only variant with an eval)."
    second = ranked[1].values[column]
    margin = stat.mean - second.mean
    text += f", {margin * 100:.1f} points ahead of {ranked[1].label} ({second.mean:.3f})"
    if stat.se is None or second.se is None:
        return text + "; the evals' sizes are unknown, so no standard error."
    se = math.sqrt(stat.se**2 + second.se**2)
    ratio = margin / se if se > 0 else math.inf
    noise = "within noise" if ratio < NOISE_SE else "more than the noise"
    return (text + f": {ratio:.1f}x the standard error of the difference ({se * 100:.1f} points), "
            f"{noise} (the bar is {NOISE_SE:g} SE).")
