"""One metric of a set of runs, as the dashboard draws it: a curve per variant.

The figures are the report's (cli/report_plots.py): a variant's curve is the mean over
its seeds at each step (`step_means`); up to THIN_LINES_MAX seeds each seed is also a thin
line, from more a band from the lowest to the highest seed at each step
(`spread_band`), labelled so. EMA smoothing and the aggregates over seeds are computed
here, on the raw points, and only then cut to the view's step buckets
(analysis/downsample.py), so zooming never changes a value. Eval series (a point per
eval) are never downsampled. With `after_step` (a live poll) only the points after it
come back, raw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpoctl import metrics
from grpoctl.analysis.downsample import Points, bucket_edges, downsample, ema
from grpoctl.registry import Registry, Run
from grpoctl.views.report_plots import THIN_LINES_MAX, spread_band, step_means


@dataclass(frozen=True)
class CurveQuery:
    """What a curves request asks for: one metric, drawn in about `buckets` points with EMA
    `smoothing`, over the steps from `lo` to `hi` (None: no bound), or, for a live poll,
    only the raw points after `after_step`."""

    metric: str
    buckets: int = 200
    smoothing: float = 0.6
    lo: int | None = None
    hi: int | None = None
    after_step: int | None = None


def _columns(points: Points) -> list[list]:
    """[[steps], [values]] with NaN as null: compact, and what uPlot takes."""
    return [[s for s, _ in points], [v if math.isfinite(v) else None for _, v in points]]


def load_points(registry: Registry, runs: list[Run], query: CurveQuery) -> dict[int, Points]:
    """{run_id: raw points}; eval accuracy from the runs' eval curves (rules.eval_curve),
    as compare and report read it."""
    ids, metric, after_step = [run.id for run in runs], query.metric, query.after_step
    if metric == metrics.EVAL_ACCURACY:
        curves = registry.eval_curves(ids)
        return {
            run_id: [(s, a) for s, a, _ in curve if after_step is None or s > after_step]
            for run_id, curve in curves.items()
        }
    # Smoothing a live tail needs the points before it: a poll reads the whole series.
    return registry.metric_of_runs(ids, metric)


def variant_curves(groups: list[tuple[str, list[Run]]], points: dict[int, Points], query: CurveQuery) -> dict:
    """The curves of `groups` ([(variant label, runs)]) for the API's JSON."""
    metric, smoothing, lo, hi, after_step = query.metric, query.smoothing, query.lo, query.hi, query.after_step
    finite = {run_id: [(s, v) for s, v in p if math.isfinite(v)] for run_id, p in points.items()}
    sparse = metrics.is_eval(metric)
    edges = None if sparse or after_step is not None else bucket_edges(finite.values(), query.buckets, lo, hi)

    dropped = False

    def shown(series: Points) -> list[list]:
        nonlocal dropped
        if after_step is not None:
            series = [(s, v) for s, v in series if s > after_step]
        elif edges is not None:
            kept = downsample(series, edges)
            dropped |= len(kept) < len(series)
            series = kept
        elif lo is not None or hi is not None:
            series = [(s, v) for s, v in series if (lo is None or s >= lo) and (hi is None or s <= hi)]
        return _columns(series)

    variants = []
    last_step = None
    for label, runs in groups:
        seeds = [finite[run.id] for run in runs]
        steps, means = step_means([s for s in seeds if s])
        mean_points = list(zip(steps, means, strict=True))
        if steps:
            last_step = max(last_step or steps[-1], steps[-1])
        entry: dict = {
            "label": label,
            "n_seeds": len(runs),
            "raw": shown(mean_points),
            "smooth": shown(ema(mean_points, smoothing)),
        }
        if 1 < len(runs) <= THIN_LINES_MAX:
            entry["seeds"] = [
                {"run_id": run.id, "name": run.name, "seed": run.seed, "smooth": shown(ema(finite[run.id], smoothing))}
                for run in runs
            ]
        elif len(runs) > THIN_LINES_MAX and steps:
            low, high = spread_band([s for s in seeds if s], steps)
            entry["band"] = {
                "label": f"min-max over {len(runs)} seeds",
                "low": shown(list(zip(steps, low, strict=True))),
                "high": shown(list(zip(steps, high, strict=True))),
            }
        variants.append(entry)
    info = metrics.describe(metric)
    return {
        "metric": metric,
        "description": info.description if info else "",
        "unit": info.unit if info else "",
        "downsampled": dropped,  # some bucket held more than its 4 points
        "buckets": query.buckets,
        "edges": edges,
        "smoothing": smoothing,
        "last_step": last_step,
        "variants": variants,
    }
