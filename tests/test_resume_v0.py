"""A checkpoint written by the code before this session's refactor still resumes.

tests/fixtures/checkpoint_v0/ was written by grpoctl at db81e36 (make_checkpoint_v0.py):
a registry from before migrations with two runs of one config, `straight` (4 steps) and
`stopped` (Ctrl-C after its step-2 checkpoint, which that code's trainer_state.pt holds).
Today's code upgrades the registry, resumes `stopped` from that checkpoint, and must end
with the rows `straight` has: the same steps, values, completions and evals.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO
from run_rows import rows

FIXTURE = REPO / "tests" / "fixtures" / "checkpoint_v0"
DIGIT_TRAIN = [sys.executable, str(REPO / "tests" / "digit_reward_train.py")]


def test_a_run_stopped_by_the_old_code_resumes_to_the_uninterrupted_result(tmp_path):
    work = tmp_path / "project"
    shutil.copytree(FIXTURE, work)
    (work / "registry_v0.db").rename(work / "registry.db")  # where `train` looks by default
    env = {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"} | {"PYTHONPATH": str(REPO)}
    out = subprocess.run(
        DIGIT_TRAIN + ["train", "--resume", "stopped"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming run stopped from step 2" in out.stdout
    db = work / "registry.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, last_step FROM run WHERE name = 'stopped'").fetchone() == ("finished", 4)
    got, want = rows(db, "stopped"), rows(db, "straight")
    # Today's trainer records figures the old one did not (grading errors, say): compare
    # what both recorded, and require every old key.
    keys = {(s, o, n) for s, o, n, _ in want["metrics"]}
    got_metrics = [r for r in got["metrics"] if (r[0], r[1], r[2]) in keys]
    assert [r[:3] for r in got_metrics] == [r[:3] for r in want["metrics"]]
    assert {r[0] for r in got["metrics"]} == {0, 1, 2, 3, 4}
    for (s, o, n, a), (_, _, _, b) in zip(got_metrics, want["metrics"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), (s, o, n)
    assert got["samples"] == want["samples"]
    assert [e[:2] for e in got["evals"]] == [e[:2] for e in want["evals"]]
    flat = [[x for e in evals for x in e[2:]] for evals in (got["evals"], want["evals"])]
    assert flat[0] == pytest.approx(flat[1])
