"""Each recipe knob's step-time overhead, side by side on one workload.

Runs `grpoctl train` once per knob (and a baseline without any) per round, in a fresh
directory each, on one thread, rounds interleaved so that a slow spell of a shared
machine falls on every knob alike. Prints per knob: the median over rounds of the
process's CPU seconds per step (start-up, imports and model load included, spread over
the steps), the median wall time/step from the registry (`time/step`: the steps alone),
and both as ratios to the baseline of the same round. Pin it to a core for steadier figures:

    taskset -c 1 python benchmarks/bench_knobs.py --steps 10 --rounds 3 [key=value ...]

The extra key=value overrides go to every run (e.g. another workload).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from grpoctl import metrics
from grpoctl.registry import Registry

KNOBS = {
    "baseline": [],
    "overlong penalty": ["reward.overlong_buffer_len=8"],
    "mask truncated": ["loss.mask_truncated=true"],
    "entropy bonus": ["loss.entropy_coef=0.01"],
    "dynamic sampling": ["rollout.dynamic_sampling=true"],
    "tis": ["loss.tis_cap=2"],
}


def run(knob: list[str], steps: int, overrides: list[str]) -> tuple[float, float]:
    """(CPU seconds per step of the whole process, median wall time/step) of one run."""
    workdir = Path(tempfile.mkdtemp(prefix="grpoctl-bench-knobs-"))
    cmd = [
        sys.executable,
        "-m",
        "grpoctl",
        "train",
        f"steps={steps}",
        "runtime.threads=1",
        "logging.live=false",
        "eval.every=0",
        "eval.at_start=false",
        *overrides,
        *knob,
    ]
    before = os.times()
    out = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    after = os.times()
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(knob) or 'baseline'} failed:\n{out.stderr[-3000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    registry = Registry(str(workdir / "registry.db"))  # the registry's own reader: no SQL here
    try:
        (run,) = registry.list_runs()
        step_times = [v for _, v in registry.metric_series(run.id, [metrics.STEP_TIME])[metrics.STEP_TIME]]
    finally:
        registry.close()
    return cpu / steps, statistics.median(step_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value for every run")
    args = parser.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in KNOBS}
    for r in range(args.rounds):
        for name, knob in KNOBS.items():
            figures[name].append(run(knob, args.steps, args.overrides))
            cpu, wall = figures[name][-1]
            print(f"round {r + 1}/{args.rounds} {name:<17} {cpu:6.2f} CPU-s/step {wall:6.2f} s/step", flush=True)
    print(f"\n{'knob':<17} {'CPU-s/step':>10} {'x base':>7} {'s/step':>7} {'x base':>7}   ({args.rounds} rounds)")
    for name in KNOBS:
        cpu = statistics.median(c for c, _ in figures[name])
        wall = statistics.median(w for _, w in figures[name])
        cpu_ratio = statistics.median(c / b for (c, _), (b, _) in zip(figures[name], figures["baseline"], strict=True))
        wall_ratio = statistics.median(w / b for (_, w), (_, b) in zip(figures[name], figures["baseline"], strict=True))
        print(f"{name:<17} {cpu:10.2f} {cpu_ratio:7.2f} {wall:7.2f} {wall_ratio:7.2f}")


if __name__ == "__main__":
    main()
