"""Curves fit for a screen: step buckets shared by every run of a view, and EMA smoothing.

A chart of 100 runs x 10,000 steps cannot send every point, and must not hide the one
step where the gradient norm spiked. The steps of the view are cut into `n` buckets of
equal width, the same boundaries for every run in it (so runs line up bucket by bucket),
and each bucket keeps its first, lowest, highest and last point: a one-step spike is
its bucket's max and survives at any resolution. Smoothing and aggregates over seeds are
computed on the raw points before this, so they do not change when the view zooms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Points = list[tuple[int, float]]


def bucket_edges(series: Iterable[Points], n: int, lo: int | None = None, hi: int | None = None) -> list[int]:
    """The `n`+1 (or fewer) step boundaries of a view over `series`: [lo, lo+w, ..., >hi].

    `lo` and `hi` (a zoom) default to the first and last step any series holds. Bucket i
    holds the steps edges[i] <= step < edges[i+1]."""
    steps = [s for points in series for s, _ in points[:1] + points[-1:]]
    if lo is None:
        lo = min(steps, default=0)
    if hi is None:
        hi = max(steps, default=0)
    if hi < lo:
        return [lo, lo + 1]
    width = max(1, math.ceil((hi - lo + 1) / max(n, 1)))
    edges = list(range(lo, hi + 1, width))
    return edges + [edges[-1] + width]


def downsample(points: Points, edges: list[int]) -> Points:
    """The points inside the edges, each bucket cut to its first, min, max and last point
    (in step order; NaN points are kept as they are, never a bucket's min or max)."""
    out: Points = []
    lo, hi = edges[0], edges[-1]
    width = edges[1] - edges[0] if len(edges) > 1 else 1
    if width == 1:  # a bucket per step: nothing to cut
        return [(step, value) for step, value in points if lo <= step < hi]
    bucket: Points = []
    current = None
    for step, value in points:
        if step < lo or step >= hi:
            continue
        index = (step - lo) // width
        if index != current and bucket:
            out.extend(_keep(bucket))
            bucket = []
        current = index
        bucket.append((step, value))
    if bucket:
        out.extend(_keep(bucket))
    return out


def _keep(bucket: Points) -> Points:
    if len(bucket) <= 4:
        return bucket
    finite = [i for i, (_, v) in enumerate(bucket) if math.isfinite(v)]
    chosen = {0, len(bucket) - 1}
    if finite:
        chosen.add(min(finite, key=lambda i: bucket[i][1]))
        chosen.add(max(finite, key=lambda i: bucket[i][1]))
    chosen.update(i for i, (_, v) in enumerate(bucket) if not math.isfinite(v))  # a NaN step stays visible
    return [bucket[i] for i in sorted(chosen)]


def ema(points: Points, weight: float) -> Points:
    """Exponential moving average with the usual debiasing (the first points are not
    pulled toward zero): weight 0 is the raw curve, 0.99 very smooth. NaN points are
    skipped by the average and come back as NaN."""
    if weight <= 0:
        return list(points)
    out: Points = []
    average, total = 0.0, 0.0
    for step, value in points:
        if not math.isfinite(value):
            out.append((step, value))
            continue
        average = weight * average + (1 - weight) * value
        total = weight * total + (1 - weight)
        out.append((step, average / total))
    return out
