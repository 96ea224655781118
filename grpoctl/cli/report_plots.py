"""The report's PNG plots: one metric against GRPO step, one line per variant.

Seeds of a variant are drawn as their mean, with the spread within the variant beside
it, so a difference between variants can be read against it: up to `THIN_LINES_MAX`
seeds, each seed's own thin line (a band over 3 seeds would be a sd of 3 numbers
dressed up as a region); from more, a shaded band from the lowest to the highest seed
at each step, labelled as such.

matplotlib is imported here and only here, with the Agg backend (files, no display):
`compare` never pays for it.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean, stdev

from grpoctl import metrics
from grpoctl.analysis.compare import ComparedRun, Row
from grpoctl.rules import ENDED_BADLY

THIN_LINES_MAX = 5

# (metric, y label, file name): the seed's north star first, then its early warnings.
PLOTS = (
    (metrics.EVAL_ACCURACY, "eval accuracy", "eval_accuracy.png"),
    (metrics.REWARD, "train reward (mean over rollouts)", "train_reward.png"),
    (metrics.RESPONSE_LENGTH, "mean response length (tokens)", "response_length.png"),
    (metrics.TOKEN_ENTROPY, "token entropy (nats)", "token_entropy.png"),
    (metrics.GRAD_NORM, "gradient norm", "grad_norm.png"),
)


def run_series(rd: ComparedRun, metric: str) -> list[tuple[int, float]]:
    """A run's points for `metric`; eval accuracy from its eval results when it has them."""
    if metric == metrics.EVAL_ACCURACY and rd.evals:
        return [(step, acc) for step, acc, _ in rd.evals]
    return [(s, v) for s, v in rd.series.get(metric, []) if math.isfinite(v)]


def _by_step(runs: list[list[tuple[int, float]]]) -> dict[int, list[float]]:
    by_step: dict[int, list[float]] = {}
    for points in runs:
        for step, value in points:
            by_step.setdefault(step, []).append(value)
    return by_step


def step_means(runs: list[list[tuple[int, float]]]) -> tuple[list[int], list[float]]:
    """Steps, and the mean across runs at each step any of them logged: a variant's curve
    (here and in `grpoctl ui`). fmean: a float mean (fsum), fast enough for 100 runs."""
    by_step = _by_step(runs)
    steps = sorted(by_step)
    return steps, [fmean(by_step[s]) for s in steps]


def band(runs: list[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float]]:
    """Steps, mean and sd across runs at each step any of them logged (sd 0 where one did)."""
    by_step = _by_step(runs)
    steps, means = step_means(runs)
    sds = [stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
    return steps, means, sds


def spread_band(runs: list[list[tuple[int, float]]], steps: list[int]) -> tuple[list[float], list[float]]:
    """The lowest and highest seed at each of `steps` (where a seed logged it)."""
    by_step: dict[int, list[float]] = {}
    for points in runs:
        for step, value in points:
            by_step.setdefault(step, []).append(value)
    return [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps]


def plot_metric(rows: list[Row], metric: str, ylabel: str, path: Path, title: str = "") -> bool:
    """Draw `metric` for every row into `path`; False (and no file) when no run logged it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drawn = [(row, [run_series(rd, metric) for rd in row.runs]) for row in rows]
    drawn = [(row, runs) for row, runs in drawn if any(runs)]
    if not drawn:
        return False
    colors = plt.get_cmap("tab10" if len(drawn) <= 10 else "tab20").colors
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    sparse = metrics.is_eval(metric)  # a handful of evals: show the points themselves
    for i, (row, runs) in enumerate(drawn):
        color = colors[i % len(colors)]
        steps, means, _ = band([r for r in runs if r])
        label = row.label + (f" ({len(runs)} seeds)" if len(runs) > 1 else "")
        ax.plot(
            steps,
            means,
            color=color,
            label=label,
            linewidth=1.6,
            marker="o" if sparse else None,
            markersize=3.5,
            linestyle="--" if row.status in ENDED_BADLY else "-",
        )
        seeds = [r for r in runs if r]
        if 1 < len(seeds) <= THIN_LINES_MAX:
            for points in seeds:
                ax.plot([p[0] for p in points], [p[1] for p in points], color=color, linewidth=0.6, alpha=0.45)
        elif len(seeds) > THIN_LINES_MAX:
            lows, highs = spread_band(seeds, steps)
            ax.fill_between(steps, lows, highs, color=color, alpha=0.18, linewidth=0)
    values = [v for _, runs in drawn for r in runs for _, v in r]
    positive = [v for v in values if v > 0]
    if metric == metrics.GRAD_NORM and positive and max(positive) / min(positive) > 100:
        ax.set_yscale("log")  # an explosion would flatten every other line to zero
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(ylabel)
    counts = [len([r for r in runs if r]) for _, runs in drawn]
    note = ""
    if any(1 < c <= THIN_LINES_MAX for c in counts):
        note = " (thick: mean over seeds; thin: each seed)"
    if any(c > THIN_LINES_MAX for c in counts):
        note = " (line: mean over seeds; band: lowest to highest seed)"
    ax.set_title((title or ylabel) + note, fontsize=11, loc="left")
    ax.grid(alpha=0.3)
    if len(drawn) <= 5:
        ax.legend(fontsize=8, frameon=False, loc="best")
    else:  # many variants: a legend inside would cover the curves
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_all(rows: list[Row], folder: Path, name: str) -> list[tuple[str, str]]:
    """Every plot in PLOTS that has data: [(file name, y label)]."""
    made = []
    for metric, ylabel, filename in PLOTS:
        if plot_metric(rows, metric, ylabel, folder / filename, title=f"{name}: {ylabel}"):
            made.append((filename, ylabel))
    return made
