"""Many trainers writing one registry at once: 8 writers x 1,000 steps, no row lost, no error.

    python benchmarks/bench_writers.py [--db URL] [--writers 8] [--steps 1000] [--metrics 30]

Each writer is its own process, as a sweep's trainers are: it creates its run (taking
the run's claim), waits for the others, then commits one transaction per step (30
metrics, 2 per-optimizer-step rows and 2 samples, fenced by its claim) as fast as it can,
with a heartbeat thread beating every 0.2 s beside it (a trainer's beats every 60 s).
At the end the rows are counted. Without --db it writes a temporary SQLite file; with
`--db postgresql+psycopg://...` an empty PostgreSQL database.
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

from sqlalchemy import func, select

from grpoctl.registry import Metric, Registry, Sample

ROOT = Path(__file__).resolve().parents[1]

WRITER = """
import json, sys, threading, time
from pathlib import Path
from grpoctl.registry import Registry

db, name, steps, metrics, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
registry = Registry(db)
run = registry.create_run(name=name, config={"writer": name}, config_diff={}, config_hash=name, seed=0,
                          total_steps=steps, group="writers")
errors = []
done = threading.Event()

def beat():
    while not done.wait(0.2):
        try:
            registry.heartbeat(run.id)
        except Exception as exc:
            errors.append(f"heartbeat: {type(exc).__name__}: {exc}")

(sync / (name + ".ready")).touch()
while not (sync / "go").exists():
    time.sleep(0.005)
threading.Thread(target=beat, daemon=True).start()
sample = dict(prompt="What is 2+2?", response="<answer>4</answer>", ground_truth="4", reward=1.0,
              format_reward=1.0, answer_reward=1.0)
latencies = []
start = time.perf_counter()
for step in range(steps):
    t0 = time.perf_counter()
    try:
        registry.log_step(run.id, step, {f"train/m{i}": step + i / 100 for i in range(metrics)},
                          opt_metrics=[(2 * step, {"train/grad_norm": 1.0}), (2 * step + 1, {"train/grad_norm": 2.0})],
                          samples=[sample, sample])
    except Exception as exc:
        errors.append(f"step {step}: {type(exc).__name__}: {exc}")
    latencies.append(time.perf_counter() - t0)
seconds = time.perf_counter() - start
done.set()
registry.set_status(run.id, "finished")
latencies.sort()
print(json.dumps({"name": name, "seconds": seconds, "errors": errors,
                  "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="registry URL or path (default: a temporary SQLite file)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        sync = Path(tmp)
        db = args.db or str(sync / "registry.db")
        with Registry(db) as registry:
            where = registry.public_url
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, db, f"w{i}", str(args.steps), str(args.metrics), str(sync)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(args.writers)
        ]
        deadline = time.monotonic() + 120
        while len(list(sync.glob("*.ready"))) < args.writers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                sys.exit("writers did not start: " + " | ".join(p.communicate()[1][-500:] for p in procs))
            time.sleep(0.02)
        start = time.perf_counter()
        (sync / "go").touch()
        results, crashed = [], []
        for proc in procs:
            out, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                crashed.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
            else:
                results.append(json.loads(out))
        elapsed = time.perf_counter() - start

        with Registry(db, readonly=True) as registry:
            with registry.engine.connect() as conn:
                metrics = conn.scalar(select(func.count()).select_from(Metric))
                samples = conn.scalar(select(func.count()).select_from(Sample))
            runs = registry.list_runs(group="writers")
    expected_metrics = args.writers * args.steps * (args.metrics + 2)
    expected_samples = args.writers * args.steps * 2
    errors = sum(len(r["errors"]) for r in results) + len(crashed)
    lost = (expected_metrics - metrics) + (expected_samples - samples)
    finished = sum(r.status == "finished" and r.last_step == args.steps - 1 for r in runs)
    print(
        f"{where}: {args.writers} writers x {args.steps} steps x ({args.metrics} metrics + 2 per-opt-step "
        f"+ 2 samples), load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"  {elapsed:.1f} s wall, {args.writers * args.steps / elapsed:.0f} steps/s together; per step commit: "
        f"median p50 {statistics.median(r['p50_ms'] for r in results):.1f} ms, "
        f"worst p99 {max(r['p99_ms'] for r in results):.1f} ms"
    )
    print(
        f"  rows: {metrics:,} metrics (expected {expected_metrics:,}), {samples:,} samples "
        f"(expected {expected_samples:,}); {finished}/{args.writers} runs finished"
    )
    print(f"  lost rows: {lost}, errors: {errors}" + (f" ({crashed[:2]})" if crashed else ""))
    for r in results:
        for e in r["errors"][:2]:
            print(f"    {r['name']}: {e}")
    sys.exit(0 if lost == 0 and errors == 0 and finished == args.writers else 1)


if __name__ == "__main__":
    main()
