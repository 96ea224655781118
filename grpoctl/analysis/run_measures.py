"""One number per run from its curves, for a declared finding's measure: the plateau (last
3 evals), the lowest eval after warm-up, best minus final, the final eval, the area under
the curve, the steps to a share of the gain, a series' mean; and a speed measure placed on
a compute axis (analysis/axes.py) at the arms' common budget. Every eval measure is a
weighted sum of the curve's points (measure_weights), so each problem's share of it can be
had from stored per-problem outcomes (analysis/problems.py). How arms are compared and
judged: verdicts.py.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from grpoctl import metrics
from grpoctl.analysis import axes
from grpoctl.analysis.baseline import LAST_K, eval_curve_of, last_weights
from grpoctl.analysis.findings import Finding
from grpoctl.analysis.health import series_mean
from grpoctl.analysis.problems import Weights


def measure_weights(measure: str, evals: list, after_step: int = 1) -> Weights | None:
    """The points of a run's curve a measure sums, with their weights (analysis/problems.py):
    the last 3 evals (1/3 each), the lowest from after_step (1), the best minus the final
    (+1, -1), the trapezoids' halves over the curve's length (auc); None without the points."""
    trained = [(s, a) for s, a, _ in evals if s > 0]
    if measure == "plateau":
        return last_weights(evals, LAST_K) or None
    if measure == "collapse":
        after = [(s, a) for s, a in trained if s >= after_step]
        return {min(after, key=lambda p: p[1])[0]: 1.0} if after else None
    if measure == "peak_decline":
        if not trained:
            return None
        weights = {max(trained, key=lambda p: p[1])[0]: 1.0}
        final = trained[-1][0]
        weights[final] = weights.get(final, 0.0) - 1.0
        return weights
    if measure == "auc":
        span = evals[-1][0] - evals[0][0] if len(evals) > 1 else 0
        if not span:
            return None
        weights: Weights = {}
        for (s0, _, _), (s1, _, _) in pairwise(evals):
            for step in (s0, s1):
                weights[step] = weights.get(step, 0.0) + (s1 - s0) / 2 / span
        return weights
    if measure == "final":
        return {trained[-1][0]: 1.0} if trained else None
    raise ValueError(measure)


def run_measure(
    measure: str,
    evals: list,
    series: list,
    after_step: int = 1,
    share: float | None = None,
    window: int = 1,
    steps: tuple[int, int] | None = None,
) -> float | None:
    """One run's number for `measure` on the curve `evals` ((step, value, n) points), or
    on the per-step `series` ((step, value) points: train/grad_norm for grad_norm, the
    finding's curve for series) (None when it has no data for it)."""
    if measure in ("grad_norm", "series"):
        return series_measure(series, steps)
    if measure == "steps_to_share":
        assert share is not None
        return steps_to_share(evals, share, window)
    return weighted_sum(evals, measure_weights(measure, evals, after_step))


def weighted_sum(evals: list, weights: Weights | None) -> float | None:
    """A measure as the weighted sum of its curve's points (None without the points)."""
    if weights is None:
        return None
    values = {s: a for s, a, *_ in evals}
    return sum(w * values[s] for s, w in weights.items())


def series_measure(series: list, steps: tuple[int, int] | None = None) -> float | None:
    """A per-step series' mean over the steps `steps` (first, last; every step when None)
    that the run recorded, as compare's grad norm (analysis/health.py); None when not finite."""
    value = series_mean(series, *(steps or (None, None)))
    return value if value is not None and math.isfinite(value) else None


def final_eval(evals: list) -> float | None:
    trained = [a for s, a, _ in evals if s > 0]
    return trained[-1] if trained else None


def auc(evals: list) -> float | None:
    """Area under the curve from its first point to its last, over its length in steps:
    the mean over training (trapezoids between points)."""
    return run_measure("auc", evals, [])


def steps_to_share(curve: list, share: float, window: int = 1) -> float | None:
    """The first step at which the trailing mean of `window` points has made `share` of the
    run's gain (from its first full window to its last); None when it gains nothing."""
    points = [(s, v) for s, v, *_ in curve if v is not None and math.isfinite(v)]
    if len(points) < window + 1:
        return None
    smooth = [
        (points[i][0], sum(v for _, v in points[i - window + 1 : i + 1]) / window)
        for i in range(window - 1, len(points))
    ]
    start, end = smooth[0][1], smooth[-1][1]
    if end <= start:
        return None
    target = start + share * (end - start)
    return float(next(step for step, value in smooth if value >= target - 1e-12))


def curve_of(rd: Any, curve: str) -> list:
    """A run's curve for a finding: its evals or a sampled score's (compare's), or a per-step
    series as (step, value, None) points."""
    if not metrics.is_eval(curve):
        return [(s, v, None) for s, v in rd.series.get(curve, []) if math.isfinite(v)]
    return eval_curve_of(rd, curve) or []


def placed(rd: Any, f: Finding) -> dict[int, float] | None:
    """Where the points of a run's curve for the finding sit on its axis (analysis/axes.py);
    None when the run did not record what the axis counts."""
    steps = [s for s, *_ in curve_of(rd, f.curve)]
    return axes.positions(rd, f.axis, steps, per_step=not metrics.is_eval(f.curve))


Budget = tuple[float, float]  # the range [lo, hi] of an axis that every run of both arms covers


def axis_weights(measure: str, rd: Any, f: Finding, budget: Budget | None) -> Weights | None:
    """The points a measure sums, with their weights: on a compute axis, auc's mean height
    over the common budget; else measure_weights on the step axis."""
    if budget is not None and measure == "auc":
        where = placed(rd, f)
        return (axes.mean_height_weights(where, *budget) or None) if where else None
    return measure_weights(measure, curve_of(rd, f.curve), f.after_step)


def axis_steps_to_share(rd: Any, f: Finding, budget: Budget) -> float | None:
    """steps_to_share on the finding's axis: the curve cut at the common budget, the share
    of its gain there, and the axis's value where the share is first reached."""
    where = placed(rd, f)
    if not where:
        return None
    kept = [p for p in curve_of(rd, f.curve) if where[p[0]] <= budget[1]]
    assert f.share is not None
    step = steps_to_share(kept, f.share, f.window)
    return None if step is None else where[int(step)]
