"""The report's sections on what the evals hold besides accuracy: pass@k and maj@k side
by side and over steps, and the accuracy broken down by level, subject and the fields
of eval.group_by, in a table and a curve per group.

Both read the eval set the report reads (`--headline SET`, else each run's headline set).
A variant's figure is the mean over its seeds (± their sd), or one run's with the binomial
standard error of its eval (for pass@k over the problems sampled: a problem's pass@k lies in
[0, 1], so that SE errs wide). matplotlib is imported only by the plotting functions.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean, stdev

from grpoctl import metrics
from grpoctl.analysis.baseline import eval_curve_of
from grpoctl.analysis.breakdown import COUNT
from grpoctl.analysis.compare import CompareTable, Row
from grpoctl.registry import Registry
from grpoctl.rules import EvalPoint, headline_accuracy
from grpoctl.views.report_plots import save_figure

ACCURACY = "accuracy"  # a group's figure in a greedy eval's breakdown (evals/headline.py)
MAX_GROUPS = 30  # a group_by field with more values is cut to its largest groups in the table
SUBPLOTS_MAX = 12  # groups drawn per breakdown figure (the largest)


def score_names(rows: list[Row]) -> list[str]:
    """Every pass@k and maj@k any run recorded: pass@ before maj@, by k."""
    names = {name for row in rows for rd in row.runs for name in rd.scores}

    def order(name: str) -> tuple:
        kind, _, k = name.removeprefix(metrics.EVAL_PREFIX).partition("@")
        return (kind != "pass", int(k) if k.isdigit() else 0)

    return sorted(names, key=order)


def _se(p: float, n: int | None) -> float | None:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else None


def _folded(values: list[tuple[float, float | None]]) -> str:
    """`0.412 ± 0.031 sd` over seeds, `0.412 ± 0.044 SE` for one run, `0.412` without a size."""
    if not values:
        return ""
    if len(values) > 1:
        xs = [v for v, _ in values]
        return f"{fmean(xs):.3f} ± {stdev(xs):.3f} sd"
    value, se = values[0]
    return f"{value:.3f}" + (f" ± {se:.3f} SE" if se is not None else "")


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def score_table(table: CompareTable, names: list[str]) -> str:
    """Each variant's final pass@k and maj@k (at --at-step, if set), and the best of its
    trained evals, as a markdown table."""
    head = ["variant", "seeds"] + [f"final {n.removeprefix(metrics.EVAL_PREFIX)}" for n in names]
    head += [f"best {n.removeprefix(metrics.EVAL_PREFIX)}" for n in names]
    lines = [_line(head), _line(["---"] * len(head))]
    for row in table.rows:
        finals, bests = [], []
        for name in names:
            final, best = [], []
            for rd in row.runs:
                curve: list[EvalPoint] = eval_curve_of(rd, name) or []
                point = headline_accuracy(curve, table.at_step)
                if point:
                    final.append((point[1], _se(point[1], point[2])))
                trained = [e for e in curve if e[0] > 0 and (table.at_step is None or e[0] <= table.at_step)]
                if trained:
                    _, value, n = max(trained, key=lambda e: (e[1], -e[0]))
                    best.append((value, _se(value, n)))
            finals.append(_folded(final))
            bests.append(_folded(best))
        lines.append(_line([row.label, str(len(row.runs)), *finals, *bests]))
    return "\n".join(lines) + "\n"


def _scores_against_baseline(registry: Registry, table: CompareTable, names: list[str]) -> list[str]:
    """Each pass@k and maj@k against the baseline, tested as accuracy is (the same measure,
    tests and Holm correction within each score's comparisons), when the study has one."""
    from grpoctl.analysis.baseline import compare_to_baseline
    from grpoctl.analysis.compare import study_curves
    from grpoctl.views import compare_view as tables

    versus = table.versus
    if versus is None:
        return []
    lines = []
    for metric in names:
        curves = study_curves(registry, table, metric)
        comparison = compare_to_baseline(curves, versus.baseline, versus.source, versus.last_k, table.at_step, metric)
        comparison.metric = metric
        head = tables.versus_headers(comparison)
        lines += [f"### {metric.removeprefix(metrics.EVAL_PREFIX)} against {versus.baseline}", ""]
        lines += [_line(head), _line(["---"] * len(head))]
        lines += [_line(tables.versus_cells(comparison, v)) for v in comparison.rows]
        lines += ["", tables.versus_legend(comparison) + ".", ""]
    return lines


# --------------------------------------------------------------------------- breakdowns


def _greedy(breakdowns: list[tuple[int, str, dict]], at_step: int | None) -> list[tuple[int, dict]]:
    return [(step, b) for step, kind, b in breakdowns if kind == "greedy" and (at_step is None or step <= at_step)]


def breakdown_fields(per_run: dict[int, list[tuple[int, dict]]]) -> dict[str, list[str]]:
    """{field: its group values, in the breakdown's order} over every run's greedy evals."""
    out: dict[str, dict[str, None]] = {}
    for evals in per_run.values():
        for _, table in evals:
            for name, groups in table.items():
                out.setdefault(name, {}).update(dict.fromkeys(groups))
    return {name: list(values) for name, values in out.items()}


def _group_counts(per_run: dict[int, list[tuple[int, dict]]], name: str) -> dict[str, int]:
    """Problems per group in the last eval of any run (the subsets of a study's runs agree)."""
    counts: dict[str, int] = {}
    for evals in per_run.values():
        if evals:
            for value, figures in evals[-1][1].get(name, {}).items():
                counts.setdefault(value, int(figures.get(COUNT, 0)))
    return counts


def breakdown_table(
    table: CompareTable, per_run: dict[int, list[tuple[int, dict]]], name: str, values: list[str]
) -> str:
    """One row per group of `name`: its problems, then each variant's accuracy in that group
    at its last eval (mean over seeds)."""
    counts = _group_counts(per_run, name)
    shown = values
    if len(values) > MAX_GROUPS:
        shown = sorted(values, key=lambda v: -counts.get(v, 0))[:MAX_GROUPS]
    head = [name, "problems", *(row.label for row in table.rows)]
    lines = [_line(head), _line(["---"] * len(head))]
    for value in shown:
        cells = [value, str(counts.get(value, ""))]
        for row in table.rows:
            figures = []
            for rd in row.runs:
                evals = per_run.get(rd.run.id or -1, [])
                group = evals[-1][1].get(name, {}).get(value) if evals else None
                if group and ACCURACY in group:
                    figures.append((group[ACCURACY], _se(group[ACCURACY], int(group.get(COUNT, 0)))))
            cells.append(_folded(figures))
        lines.append(_line(cells))
    text = "\n".join(lines) + "\n"
    if len(shown) < len(values):
        text += f"\n({len(values) - len(shown)} smaller groups not shown.)\n"
    return text


def plot_breakdown(
    table: CompareTable, per_run: dict[int, list[tuple[int, dict]]], name: str, values: list[str], path: Path
) -> bool:
    """Accuracy over steps in each group of `name`: one panel per group, one line per
    variant (the mean over its seeds). False (and no file) when nothing is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    counts = _group_counts(per_run, name)
    groups = values if len(values) <= SUBPLOTS_MAX else sorted(values, key=lambda v: -counts.get(v, 0))[:SUBPLOTS_MAX]
    if not groups:
        return False
    cols = min(3, len(groups))
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 2.6 * nrows), dpi=110, squeeze=False, sharey=True)
    colors = plt.get_cmap("tab10" if len(table.rows) <= 10 else "tab20").colors
    drawn = False
    for i, value in enumerate(groups):
        ax = axes[i // cols][i % cols]
        for j, row in enumerate(table.rows):
            by_step: dict[int, list[float]] = {}
            for rd in row.runs:
                for step, b in per_run.get(rd.run.id or -1, []):
                    group = b.get(name, {}).get(value)
                    if group and ACCURACY in group:
                        by_step.setdefault(step, []).append(group[ACCURACY])
            if by_step:
                steps = sorted(by_step)
                ax.plot(
                    steps,
                    [fmean(by_step[s]) for s in steps],
                    marker="o",
                    markersize=3,
                    linewidth=1.4,
                    color=colors[j % len(colors)],
                    label=row.label,
                )
                drawn = True
        n = counts.get(value)
        ax.set_title(f"{name} {value}" + (f" (n={n})" if n else ""), fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.set_ylim(-0.03, 1.03)  # accuracy: panels of one scale read against each other
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for k in range(len(groups), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    if not drawn:
        plt.close(fig)
        return False
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=8, frameon=False, loc="upper center", ncol=min(len(labels), 4))
    fig.supxlabel("GRPO step", fontsize=9)
    fig.supylabel("eval accuracy", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    save_figure(fig, path, bbox_inches="tight")
    plt.close(fig)
    return True


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def eval_sections(registry: Registry, table: CompareTable, folder: Path, name: str) -> list[str]:
    """The report's markdown lines for pass@k / maj@k and the breakdowns (with their PNGs
    written into `folder`); none when the runs recorded neither."""
    from grpoctl.views.report_plots import plot_metric  # matplotlib: only now

    lines: list[str] = []
    of_set = f" on eval set {table.eval_set}" if table.eval_set else ""
    names = score_names(table.rows)
    if names:
        lines += ["## pass@k and maj@k", ""]
        lines += [
            f"From the sampled evals{of_set} (eval.sampled.*): final and best (step 0 excluded) of each "
            "variant; ± sd over seeds, or ± the binomial SE over the problems sampled for one run "
            "(errs wide for pass@k). Against the baseline, each is tested as accuracy is, Holm-corrected "
            "within its own comparisons (`compare --metric eval/pass@K` shows the same).",
            "",
            score_table(table, names),
        ]
        for metric in names:
            short = metric.removeprefix(metrics.EVAL_PREFIX)
            filename = f"eval_{_file_name(short.replace('@', '_at_'))}.png"
            if plot_metric(table.rows, metric, short, folder / filename, title=f"{name}: {short}{of_set}"):
                lines += [f"![{short}]({filename})", ""]
        lines += _scores_against_baseline(registry, table, names)
    ids = [rd.run.id for row in table.rows for rd in row.runs if rd.run.id is not None]
    per_run = {run_id: _greedy(b, table.at_step) for run_id, b in registry.eval_breakdowns(ids, table.eval_set).items()}
    fields = breakdown_fields(per_run)
    if fields:
        lines += ["## Breakdowns", ""]
        lines += [
            f"Eval accuracy{of_set} by group: at each variant's last eval (mean over seeds), then over steps, "
            "one panel per group. A group of few problems is noisy: its n is beside it.",
            "",
        ]
        for field, values in fields.items():
            lines += [f"### By {field}", "", breakdown_table(table, per_run, field, values)]
            filename = f"breakdown_{_file_name(field)}.png"
            if plot_breakdown(table, per_run, field, values, folder / filename):
                lines += [f"![accuracy by {field}]({filename})", ""]
    return lines
