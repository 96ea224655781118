"""The mechanism a study is about, measured: each arm's per-step train series (entropy,
length, grad norm, working share, drift, rare-success groups, per-level sampled accuracy)
near the end of its runs, beside where entropy and length started.

A finding reads an eval curve; whether the policy moved the way the seed says it does
(entropy falls, length grows, reuse drifts off-policy) is read here, from the same ended
runs (findings.ENDED: a run still going is left out, and counted), whether or not it
agrees with the seed:

- the end of a run is the last quarter of its own steps (`end_window`): steps 76-100 of a
  100-step run, 16-20 of one that diverged at step 20;
- each run's mean over its window, then the arm's mean and sd over its seeds;
- entropy and length also at step 1 (the first step recorded), so start and end sit side
  by side;
- drift (ratio max/min, clip fraction) only where the study moved off-policy: some run's
  ratio pi/pi_old differs from 1 by more than OFF_POLICY_TOLERANCE at some step
  (`moved_off_policy`); on-policy, every ratio is exactly 1 and the columns say nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from grpoctl import metrics
from grpoctl.analysis.compare import CompareTable
from grpoctl.analysis.findings import ENDED
from grpoctl.errors import UserError
from grpoctl.registry import Registry

Points = list[tuple[int, float]]

# The drift series: an off-policy update's probability ratios and how often they were clipped.
DRIFT = (metrics.RATIO_MAX, metrics.RATIO_MIN, metrics.CLIP_FRACTION)
RATIOS = (metrics.RATIO_MAX, metrics.RATIO_MIN)
# A ratio this far from 1 is an update on rollouts an earlier policy drew; on-policy it is 1 exactly.
OFF_POLICY_TOLERANCE = 1e-3
# In a list of series: every level's sampled accuracy (metrics.level_accuracy) the runs recorded.
LEVELS = f"{metrics.LEVEL_ACCURACY_PREFIX}*"
# What a mechanisms table shows when the page names no series of its own, in this order.
SERIES = (
    metrics.TOKEN_ENTROPY,
    metrics.RESPONSE_LENGTH,
    metrics.GRAD_NORM,
    metrics.WORKING_SHARE,
    *DRIFT,
    metrics.GROUPS_RARE_SUCCESS,
    LEVELS,
)
# Series also shown at the run's first step: where the policy started, beside where it ended.
AT_START = (metrics.TOKEN_ENTROPY, metrics.RESPONSE_LENGTH)


def check_series(names: Iterable[object], where: str) -> list[str]:
    """`names` as a list of series a mechanisms table can show; one line for the first that
    is no per-step train metric (nor LEVELS)."""
    out = []
    for name in names:
        known = isinstance(name, str) and (name == LEVELS or name in metrics.TABLE)
        if not known or (name != LEVELS and metrics.is_eval(str(name))):
            raise UserError(
                f"{where}: {name!r} is not a per-step train metric of grpoctl/metrics.py (nor {LEVELS!r}, each level)"
            )
        out.append(str(name))
    return out


def recorded_levels(names: Iterable[str]) -> list[int]:
    """The levels whose sampled accuracy (metrics.level_accuracy) is among `names`, in order."""
    return sorted(level for name in names if (level := metrics.level_of_accuracy(name)) is not None)


def end_window(last_step: int) -> tuple[int, int]:
    """The first and last step of the last quarter of a run's steps 1..`last_step` (at
    least its last step): (76, 100) of 100, (28, 35) of 35, (2, 2) of 2."""
    return last_step - max(last_step // 4, 1) + 1, last_step


def moved_off_policy(ratio_series: Iterable[Points]) -> bool:
    """Whether any point of these ratio series (ratio max or min) is more than
    OFF_POLICY_TOLERANCE from 1."""
    return any(math.isfinite(v) and abs(v - 1) > OFF_POLICY_TOLERANCE for points in ratio_series for _, v in points)


@dataclass(frozen=True)
class Cell:
    """One series of one arm: the mean over its seeds of each seed's value, their sd (None
    from one seed), and how many seeds recorded it."""

    mean: float
    sd: float | None
    seeds: int


def cell(values: Sequence[float]) -> Cell | None:
    if not values:
        return None
    return Cell(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))


@dataclass
class Arm:
    label: str
    seeds: int  # ended runs
    windows: list[tuple[int, int]]  # each ended run's end window, in run order
    start: dict[str, Cell] = field(default_factory=dict)  # AT_START series at step 1
    end: dict[str, Cell] = field(default_factory=dict)  # every shown series over the end window


@dataclass
class StudyMechanism:
    arms: list[Arm]
    series: list[str]  # the columns: the asked series the runs recorded, LEVELS as each level
    off_policy: bool
    unended: int  # runs still going (or failed, interrupted): left out


def study_mechanism(registry: Registry, table: CompareTable, series: Sequence[str] = SERIES) -> StudyMechanism | None:
    """Each arm of `table` on `series` (LEVELS: each level the runs recorded; a series no
    ended run recorded is dropped; drift only off-policy). None when no run has ended."""
    ended = [(row.label, [rd for rd in row.runs if rd.run.status in ENDED]) for row in table.rows]
    unended = sum(len(row.runs) for row in table.rows) - sum(len(runs) for _, runs in ended)
    ended = [(label, runs) for label, runs in ended if runs]
    if not ended:
        return None
    ids = [rd.run.id for _, runs in ended for rd in runs]
    recorded = set(registry.metric_names(ids))
    levels = [metrics.level_accuracy(level) for level in recorded_levels(recorded)]
    names = [n for name in series for n in (levels if name == LEVELS else [name]) if n in recorded]
    read = {name: registry.metric_of_runs(ids, name) for name in dict.fromkeys([*names, *RATIOS]) if name in recorded}
    off_policy = moved_off_policy(read[name][i] for name in RATIOS if name in read for i in ids)
    if not off_policy:
        names = [n for n in names if n not in DRIFT]
    arms = []
    for label, runs in ended:
        arm = Arm(label, len(runs), [])
        ends: dict[str, list[float]] = {n: [] for n in names}
        starts: dict[str, list[float]] = {n: [] for n in names if n in AT_START}
        for rd in runs:
            # the run's last step: the last any of its series recorded, a non-finite value included
            first, last = end_window(max((s for n in names for s, _ in read[n][rd.run.id]), default=0))
            own = {n: [(s, v) for s, v in read[n][rd.run.id] if math.isfinite(v)] for n in names}
            arm.windows.append((first, last))
            for n, points in own.items():
                window = [v for s, v in points if first <= s <= last]
                if window:
                    ends[n].append(statistics.fmean(window))
                if n in starts and points:
                    starts[n].append(min(points)[1])
        arm.end = {n: c for n, values in ends.items() if (c := cell(values)) is not None}
        arm.start = {n: c for n, values in starts.items() if (c := cell(values)) is not None}
        arms.append(arm)
    return StudyMechanism(arms, names, off_policy, unended)
