"""Several training processes logging into one registry (SQLite or PostgreSQL) while the CLI reads it.

This is how a sweep uses the registry: its variants train side by side, each committing
one transaction per GRPO step, while someone runs `grpoctl runs list` or `compare`.
Every step must land, no process may see "database is locked", and readers must see
whole steps only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from grpoctl.analysis.compare import build_compare_table
from grpoctl.registry import Metric, Registry

ROOT = Path(__file__).resolve().parents[1]
WRITERS = 4
# 4 x 1,000 one-transaction steps written at once, with 100+ full reads meanwhile: the same
# contention as 2,000 (every assertion counts whatever STEPS is), in half the serial group's time.
STEPS = 1000
METRICS = 10

# Each writer: open the registry, create its run, say it is ready, wait for the start
# signal (so that all four really write at the same time), then log as fast as it can.
WRITER = """
import json, sys, time
from pathlib import Path
from grpoctl.registry import Registry

db, name, steps, metrics, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
registry = Registry(db)
run = registry.create_run(name=name, config={"writer": name}, config_diff={},
                          config_hash=name, seed=0, total_steps=steps, group="concurrency")
go = sync / "go"
(sync / (name + ".ready")).touch()
while not go.exists():
    time.sleep(0.01)
start = time.perf_counter()
for step in range(steps):
    registry.log_step(run.id, step, {f"m{i}": step + i / 10 for i in range(metrics)})
seconds = time.perf_counter() - start
registry.set_status(run.id, "finished")
print(json.dumps({"name": name, "seconds": seconds}))
"""


def test_four_writers_and_a_reader_share_one_registry(tmp_path, db_url):
    db = db_url
    Registry(str(db)).close()  # create the tables once, as `grpoctl sweep` would
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), f"w{i}", str(STEPS), str(METRICS), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(WRITERS)
    ]
    deadline = time.monotonic() + 150  # PostgreSQL on a loaded 2-core machine: ~40 s
    while len(list(tmp_path.glob("*.ready"))) < WRITERS:
        assert time.monotonic() < deadline, "writers did not start"
        assert all(w.poll() is None for w in writers), [w.communicate() for w in writers]
        time.sleep(0.02)
    start = time.perf_counter()
    (tmp_path / "go").touch()

    # Read while they write, as `grpoctl runs list` / `compare` would.
    reads = 0
    with Registry(str(db), must_exist=True) as reader:
        while any(w.poll() is None for w in writers):
            assert time.monotonic() < deadline, "writers took too long"
            runs = reader.list_runs(group="concurrency")
            assert len(runs) == WRITERS
            for run in runs:
                series = reader.metric_series(run.id, names=["m0", f"m{METRICS - 1}"])
                steps = [step for step, _ in series.get("m0", [])]
                assert steps == list(range(len(steps)))  # whole steps, in order, no gaps
                # a step is one transaction: its first and last metric arrive together
                assert len(series.get(f"m{METRICS - 1}", [])) == len(steps)
            # ... and the whole `compare` read path, in the same reader
            table = build_compare_table(reader, ["concurrency"])
            assert len(table.rows) == WRITERS
            reads += 1
        elapsed = time.perf_counter() - start

        results = []
        for w in writers:
            out, err = w.communicate()
            assert w.returncode == 0, err
            assert "locked" not in err and "Traceback" not in err, err
            results.append(json.loads(out))

        runs = reader.list_runs(group="concurrency")
        assert sorted(r.name for r in runs) == [f"w{i}" for i in range(WRITERS)]
        assert all(r.last_step == STEPS - 1 and r.status == "finished" for r in runs)
        with reader.engine.connect() as conn:
            total = conn.scalar(select(func.count()).select_from(Metric))
        assert total == WRITERS * STEPS * METRICS
        series = reader.metric_series(runs[0].id, names=["m3"])["m3"]
        assert series[-1] == (STEPS - 1, STEPS - 1 + 0.3)

    rate = WRITERS * STEPS / elapsed
    slowest = max(r["seconds"] for r in results)
    print(
        f"\n{WRITERS} writers x {STEPS} steps x {METRICS} metrics in {elapsed:.1f} s: "
        f"{rate:.0f} steps/s together (slowest writer {STEPS / slowest:.0f} steps/s); "
        f"{reads} full reads meanwhile"
    )
    assert reads > 0
