"""The main job, timed: `grpoctl train` on the embedded default (the lab), per seed, in a fresh directory.

Each seed runs in a fresh directory with an empty outputs/ (as a first run does) as its
own `grpoctl train` process, one after another: with no --threads, exactly the README's
command (the default thread rule); --threads N adds runtime.threads=N. Prints, per seed:
the process's wall and CPU seconds (the default warm-start ships with the package: its
share is 0 unless the config asks for another recipe, which is then built), s/step, and
greedy held-out accuracy at the start and at the end (with its best), from the registry.

    python benchmarks/bench_default_run.py --seeds 0,1,2 [--threads 1] [--config FILE] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from grpoctl import metrics  # noqa: E402
from grpoctl.config import BUILTIN_CONFIGS  # noqa: E402  (no torch: the config module imports none)
from grpoctl.registry import Registry  # noqa: E402


def run_seed(seed: int, threads: int | None, overrides: list[str], keep: Path | None, config: str | None) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"grpoctl-bench-s{seed}-", dir=keep))
    cmd = [
        sys.executable,
        "-m",
        "grpoctl",
        "train",
        *([config if config in BUILTIN_CONFIGS else str(Path(config).resolve())] if config else []),
        f"seed={seed}",
        "logging.live=false",
        f"name=bench-s{seed}",
        *([f"runtime.threads={threads}"] if threads else []),
        *overrides,
    ]
    before, started = os.times(), time.perf_counter()
    out = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    wall, after = time.perf_counter() - started, os.times()
    if out.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{out.stderr[-3000:]}")
    built = list((workdir / "outputs" / "cache").glob("tiny-warmstart-*/warmstart.json"))
    warm = json.loads(built[0].read_text()) if built else {"seconds": 0.0, "steps": "shipped"}
    phase_names = [metrics.phase_time(p) for p in ("rollout", "train", "weight_sync")]
    with Registry(str(workdir / "registry.db"), must_exist=True, readonly=True) as registry:
        (run,) = registry.list_runs()
        series = registry.metric_series(run.id, [metrics.EVAL_ACCURACY, metrics.STEP_TIME, *phase_names])
    acc = series[metrics.EVAL_ACCURACY]
    steps = [v for _, v in series[metrics.STEP_TIME]]
    phases = {name: statistics.median(v for _, v in series[name]) for name in phase_names if name in series}
    backend = run.config
    threads_line = next((line for line in out.stdout.splitlines() if line.startswith("torch threads:")), "")
    return {
        "seed": seed,
        "wall_s": wall,
        "cpu_s": (after.children_user + after.children_system) - (before.children_user + before.children_system),
        "warmstart_s": warm["seconds"],
        "warmstart_steps": warm["steps"],
        "s_per_step": statistics.median(steps),
        "start": acc[0][1],
        "end": acc[-1][1],
        "best": max(v for _, v in acc),
        "curve": acc,
        "phases": phases,
        "threads": threads_line,
        "backend": json.loads(backend)["rollout"]["backend"],
        "dir": str(workdir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=None, help="runtime.threads (default: the config's rule)")
    parser.add_argument("--keep", type=Path, default=None, help="parent directory for the run directories")
    parser.add_argument(
        "--config", default=None, help="a config file or built-in name instead of the default (lab), e.g. addition"
    )
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides, e.g. rollout.backend=vllm")
    args = parser.parse_args()
    rows = [run_seed(int(s), args.threads, args.overrides, args.keep, args.config) for s in args.seeds.split(",")]
    print(
        f"grpoctl train (embedded default), {rows[0]['threads'] or 'threads: ?'}, backend {rows[0]['backend']}, "
        f"overrides: {' '.join(args.overrides) or 'none'}"
    )
    print(
        f"{'seed':>4} {'wall s':>7} {'cpu s':>7} {'warm-start s':>12} {'ws steps':>8} {'s/step':>7} {'start':>6} "
        f"{'end':>6} {'best':>6} {'gain':>6}"
    )
    for r in rows:
        print(
            f"{r['seed']:>4} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['warmstart_s']:>12.1f} {r['warmstart_steps']:>8} "
            f"{r['s_per_step']:>7.2f} {r['start']:>6.3f} {r['end']:>6.3f} {r['best']:>6.3f} "
            f"{r['end'] - r['start']:>+6.3f}"
        )
    gains = [r["end"] - r["start"] for r in rows]
    print(
        f"mean gain {statistics.mean(gains):+.3f}; min gain {min(gains):+.3f}; "
        f"max wall {max(r['wall_s'] for r in rows):.1f} s"
    )
    for r in rows:
        print(f"seed {r['seed']} median s: " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()))
    for r in rows:
        print(f"seed {r['seed']} curve: " + " ".join(f"{s}:{v:.3f}" for s, v in r["curve"]))


if __name__ == "__main__":
    main()
