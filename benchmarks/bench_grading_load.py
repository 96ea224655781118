"""Are verdicts the same on a quiet machine and on a loaded one?

    python benchmarks/bench_grading_load.py [--runs 5] [--workers 0] [--only matrix]

Grades the whole labelled set of tests/test_grading.py (its hand-labelled triples,
issue 17's cases with the 3x3 matrix that needs most of a second of sympy, and
the wrong answers generated around every normalization rewrite) `--runs` times
on a quiet machine and `--runs` times with one busy loop per core, each run in a
fresh process (so that no cache carries a verdict from one run to the next), and
reports whether every run gave every answer the same verdict, how many disagree
with the labels, and the slowest call in wall and in CPU time.

With --workers N the answers are graded by a pool of N worker processes
(`configure_grading(workers=N)`), which covers the pool's kill as well as the
in-process limits. --only matrix grades only the matrix case (quick, and what
a wall-clock limit got wrong).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def grade_once(workers: int, only: str | None) -> dict:
    """One run, in this process: {"verdicts": [...], "wrong": n, ...}."""
    sys.path.insert(0, str(REPO / "tests"))
    import test_grading as labelled

    from grpoctl.rewards import close_default_grader, configure_grading, grading_stats

    cases = [(truth, response, right) for truth, response, right in labelled.TRIPLES]
    for seeds in labelled.REWRITES.values():
        for truth, answer in seeds:
            cases += [(truth, labelled.r1(w), False) for w, _ in labelled._wrong_answers(answer, truth)]
    if only == "matrix":
        cases = [c for c in cases if "pmatrix" in c[0] and "sqrt[3]" in c[0]]
    configure_grading(workers=workers)
    if workers:
        labelled._reward("x", labelled.r1("x + 0"))  # start the workers before timing
    grading_stats(reset=True)
    verdicts, worst_wall, worst_cpu = [], 0.0, 0.0
    for truth, response, _ in cases:
        wall, cpu = time.perf_counter(), time.process_time()
        verdicts.append(labelled._reward(truth, response) == 1.0)
        worst_wall = max(worst_wall, time.perf_counter() - wall)
        worst_cpu = max(worst_cpu, time.process_time() - cpu)
    stats = grading_stats()
    close_default_grader()
    return {
        "n": len(cases),
        "verdicts": verdicts,
        "wrong": sum(v != right for v, (_, _, right) in zip(verdicts, cases, strict=True)),
        "worst_wall_s": worst_wall,
        "worst_cpu_s": worst_cpu,  # this process's CPU time: with workers, not the workers'
        "timeouts": stats["timeouts"],
        "errors": stats["errors"],
    }


def run_child(workers: int, only: str | None) -> dict:
    command = [sys.executable, __file__, "--child", "--workers", str(workers)] + (["--only", only] if only else [])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=REPO)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["run_s"] = time.perf_counter() - started
    return result


def busy_loops() -> list[subprocess.Popen]:
    """One busy loop pinned to each core of the machine (the runs themselves may be
    pinned to fewer)."""
    loops = []
    for cpu in range(os.cpu_count() or 1):
        code = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
        loops.append(subprocess.Popen([sys.executable, "-c", code]))
    return loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--only", choices=["matrix"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["both", "quiet", "loaded"], default="both")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(grade_once(args.workers, args.only)))
        return

    phases = ["quiet", "loaded"] if args.phase == "both" else [args.phase]
    results = {}
    for phase in phases:
        loops = busy_loops() if phase == "loaded" else []
        try:
            results[phase] = [run_child(args.workers, args.only) for _ in range(args.runs)]
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    reference = next(iter(results.values()))[0]["verdicts"]
    print(
        f"{'phase':<7} {'run':>3} {'n':>5} {'wrong':>5} {'same':>5} {'worst wall ms':>13} "
        f"{'worst cpu ms':>12} {'timeouts':>8} {'errors':>6} {'run s':>6}"
    )
    for phase, runs in results.items():
        for i, r in enumerate(runs):
            same = r["verdicts"] == reference
            print(
                f"{phase:<7} {i:>3} {r['n']:>5} {r['wrong']:>5} {same!s:>5} {r['worst_wall_s'] * 1000:>13.0f} "
                f"{r['worst_cpu_s'] * 1000:>12.0f} {r['timeouts']:>8} {r['errors']:>6} {r['run_s']:>6.1f}"
            )
    every = [r["verdicts"] for runs in results.values() for r in runs]
    print(f"identical verdicts in all {len(every)} runs: {all(v == reference for v in every)}")
    # To compare separate invocations (`--phase quiet`, then `--phase loaded`):
    print("verdicts digest:", hashlib.sha256(json.dumps(reference).encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
