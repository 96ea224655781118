"""The compute axes a speed measure (auc, steps_to_share) is read on: the one home of
their vocabulary, of what each step of a run costs on each, and of the common budget two
arms are compared at.

- step (the default): GRPO steps, as the speed measures have always read them;
- update: optimizer updates, `rules.updates_per_grpo_step` per step
  (epochs_per_rollout_batch x rollout_batch_size / train_batch_size, from the run's
  config): exact, since a config whose train batch does not divide its rollout batch is
  refused and every step trains on a full rollout batch; it is also what the recorded
  per-optimizer-step rows count, without reading them;
- rollout: rollouts generated, rollout_batch_size per step, or the prompts dynamic
  sampling drew (train/dynamic_sampling_prompts, every round) x group_size where a step
  recorded them; evaluation's generations are not counted, every arm of a study
  evaluates alike;
- cpu_second: the trainer process's CPU-seconds (time/cpu, the whole step: its eval,
  where it evaluated, included); a run that did not record it at every step it needs
  cannot be placed on this axis.

Wall time is no axis: under contention the same computation took 0.54 s a step in one
arm and 0.90 s in another.

Where a point sits on an axis: an eval at step k reads the policy after step k's update,
so it sits at the cost of steps 1..k (the step-0 eval at 0). A per-step train curve's
point at step k was drawn from the policy before step k's update, so it sits at the
cost of steps 1..k-1: an arm whose every step costs twice as much, with each unit of
cost buying the same progress, then draws the same curve on the axis. (On the step
axis a per-step point keeps its own step number, as the measures always read it: a
shift by one that every arm shares.)

The common budget: every run of both arms is read over the same range [lo, hi] of the
axis: hi the smallest last point over the runs (the arm that spends more per step is
cut where the cheaper one ends), lo the largest first point (0 where every curve starts
at no cost: a step-0 eval, or step 1 of a per-step curve).
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from typing import Any

from grpoctl import metrics
from grpoctl.rules import updates_per_grpo_step

STEP = "step"
AXES = {  # axis -> what one unit of it is
    STEP: "GRPO step",
    "update": "optimizer update",
    "rollout": "rollout generated",
    "cpu_second": "CPU-second",
}
UNITS = {STEP: "steps", "update": "updates", "rollout": "rollouts", "cpu_second": "CPU-s"}
# The per-step series an axis reads beyond compare's (loaded for the findings that need it).
READS = {"cpu_second": metrics.STEP_CPU}


def _config(rd: Any) -> dict:
    return json.loads(rd.run.config or "{}")


def step_costs(rd: Any, axis: str, last: int) -> dict[int, float] | None:
    """What each of a run's steps 1..last cost on `axis` (analysis.compare.ComparedRun);
    None when a step's cost was not recorded (cpu_second before time/cpu)."""
    if axis == "update":
        config = _config(rd)
        loop, rollout = config["loop"], config["rollout"]
        each = float(
            updates_per_grpo_step(
                loop["epochs_per_rollout_batch"], rollout["rollout_batch_size"], loop["train_batch_size"]
            )
        )
        return {step: each for step in range(1, last + 1)}
    if axis == "rollout":
        rollout = _config(rd)["rollout"]
        drawn = {s: v for s, v in rd.series.get(metrics.DYNAMIC_SAMPLING_PROMPTS, []) if math.isfinite(v)}
        return {
            step: drawn[step] * rollout["group_size"] if step in drawn else rollout["rollout_batch_size"]
            for step in range(1, last + 1)
        }
    if axis == "cpu_second":
        cpu = {s: v for s, v in rd.series.get(metrics.STEP_CPU, []) if v is not None and math.isfinite(v)}
        if any(step not in cpu for step in range(1, last + 1)):
            return None
        return {step: cpu[step] for step in range(1, last + 1)}
    raise ValueError(axis)


def spent(rd: Any, axis: str, last: int) -> dict[int, float] | None:
    """The cost a run had spent on `axis` by the end of each step 0..last (0 at step 0,
    before training); None when a step's cost was not recorded."""
    costs = step_costs(rd, axis, last)
    if costs is None:
        return None
    total, by_step = 0.0, {0: 0.0}
    for step in range(1, last + 1):
        total += costs[step]
        by_step[step] = total
    return by_step


def positions(rd: Any, axis: str, steps: list[int], per_step: bool) -> dict[int, float] | None:
    """Where the points of a run's curve at `steps` sit on `axis`: an eval's at the cost
    of its steps 1..k, a per-step train point's at that of steps 1..k-1."""
    if not steps:
        return {}
    by_step = spent(rd, axis, max(steps))
    if by_step is None:
        return None
    return {step: by_step[max(step - 1, 0) if per_step else step] for step in steps}


def common_range(placed: list[dict[int, float]]) -> tuple[float, float] | None:
    """[lo, hi]: the range of the axis every run's points cover (`placed`: each run's
    step -> position); None when they cover no common stretch."""
    spans = [(min(p.values()), max(p.values())) for p in placed if p]
    if not spans or len(spans) < len(placed):
        return None
    lo, hi = max(s for s, _ in spans), min(e for _, e in spans)
    return (lo, hi) if hi > lo else None


def mean_height_weights(placed: dict[int, float], lo: float, hi: float) -> dict[int, float]:
    """The weight of each point (by step) in the mean height of the curve through them,
    linear between points, over [lo, hi] of the axis: the area there over (hi - lo), a
    weighted sum of the points' values, so each problem's own share follows from its
    outcomes as for every eval measure."""
    weights: dict[int, float] = {}
    points = sorted(placed.items(), key=lambda p: (p[1], p[0]))
    for (s0, x0), (s1, x1) in pairwise(points):
        a, b, width = max(x0, lo), min(x1, hi), x1 - x0
        if b <= a or width <= 0:
            continue
        # the integral over [a, b] of the two linear pieces (x1 - x)/width and (x - x0)/width
        weights[s0] = weights.get(s0, 0.0) + ((x1 - a) ** 2 - (x1 - b) ** 2) / (2 * width) / (hi - lo)
        weights[s1] = weights.get(s1, 0.0) + ((b - x0) ** 2 - (a - x0) ** 2) / (2 * width) / (hi - lo)
    return weights
