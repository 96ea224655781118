"""How much a busy machine slows the default run: alone, beside a spinning process, beside a second run.

Each scenario starts `grpoctl train` with the default configuration (only the step count
shortened, and no live view) in a fresh directory, unpinned, with whatever thread count
the default resolves to, and reads the median wall seconds per GRPO step (steps 2..N,
evals left out) from the registry it wrote:

- alone;
- next to one CPU-bound process (a Python busy loop, one core's worth);
- next to a second default run started at the same moment (both reported).

Prints each median and its slowdown against "alone". Extra key=value overrides apply to
every run, so `runtime.threads=2` shows what torch's old one-per-core default did.

    python benchmarks/bench_contention.py [--steps 15] [key=value ...]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SPIN = "while True:\n    pass\n"


def start_run(steps: int, overrides: list[str], tag: str) -> tuple[subprocess.Popen, Path]:
    workdir = Path(tempfile.mkdtemp(prefix=f"grpoctl-contention-{tag}-"))
    cmd = [
        sys.executable,
        "-m",
        "grpoctl",
        "train",
        f"loop.n_grpo_steps={steps}",
        "logging.live=false",
        f"name={tag}",
        *overrides,
    ]
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, workdir


def seconds_per_step(proc: subprocess.Popen, workdir: Path, tag: str) -> tuple[float, str]:
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{tag} failed:\n{out[-3000:]}")
    threads = next((line for line in out.splitlines() if line.startswith("torch threads:")), "torch threads: ?")
    with sqlite3.connect(workdir / "registry.db") as conn:
        rows = conn.execute(
            "SELECT step, name, value FROM metric WHERE opt_step IS NULL AND step > 1 "
            "AND name IN ('time/step', 'time/eval')"
        ).fetchall()
    per_step: dict[int, float] = {}
    for step, name, value in rows:
        per_step[step] = per_step.get(step, 0.0) + (value if name == "time/step" else -value)
    return statistics.median(per_step.values()), threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    alone, threads = seconds_per_step(*start_run(args.steps, args.overrides, "alone"), "alone")

    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        spun, _ = seconds_per_step(*start_run(args.steps, args.overrides, "spin"), "spin")
    finally:
        spinner.kill()
        spinner.wait()

    a, b = start_run(args.steps, args.overrides, "pair-a"), start_run(args.steps, args.overrides, "pair-b")
    pair = [seconds_per_step(*a, "pair-a")[0], seconds_per_step(*b, "pair-b")[0]]

    print(f"default config, {args.steps} steps, overrides: {' '.join(args.overrides) or 'none'}; {threads}")
    print(f"{'scenario':<28}{'s/step':>8}{'slowdown':>10}")
    print(f"{'alone':<28}{alone:>8.3f}{1.0:>9.2f}x")
    print(f"{'next to a spinning process':<28}{spun:>8.3f}{spun / alone:>9.2f}x")
    for name, value in zip(("next to a second run (a)", "next to a second run (b)"), pair, strict=True):
        print(f"{name:<28}{value:>8.3f}{value / alone:>9.2f}x")


if __name__ == "__main__":
    main()
