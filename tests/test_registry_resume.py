"""Real `grpoctl train` processes and the one-writer claim, on SQLite and PostgreSQL:
two `--resume RUN` at once (one refused in one line, no row duplicated, the run complete),
a trainer whose claim is taken over (it stops, writing nothing more), `--resume` from
another directory, and unnamed runs started together (each its own name).

The trainers are children of the tests' fork server (tests/trainer_zygote.py), which
pays the imports once instead of per trainer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import trainer_zygote
from conftest import REPO, fast_overrides
from sqlalchemy import select, update

from grpoctl.errors import UserError
from grpoctl.registry import Metric, Registry, Run
from grpoctl.registry.models import utcnow
from grpoctl.rules import lease_s

DIGIT_TRAIN = [sys.executable, str(REPO / "tests" / "digit_reward_train.py")]
STEPS = 6


def env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"} | {"PYTHONPATH": str(REPO)}


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return trainer_zygote.spawn(DIGIT_TRAIN + args, cwd, env())


def wait_for_step(db: str, name: str, step: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            with Registry(db, readonly=True) as registry:
                if registry.get_run(name).last_step >= step:
                    return
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"{name} never reached step {step}")


def metric_keys(db: str, name: str) -> list[tuple]:
    with Registry(db, readonly=True) as registry:
        run = registry.get_run(name)
        with registry.engine.connect() as conn:
            return list(conn.execute(select(Metric.step, Metric.opt_step, Metric.name).where(Metric.run_id == run.id)))


def killed_run(db: str, name: str, workdir: Path, tiny_model_dir: Path) -> None:
    """A run SIGKILLed after its step-2 checkpoint: resumable, with rows to truncate."""
    overrides = fast_overrides(
        tiny_model_dir, workdir, **{"loop.n_grpo_steps": STEPS, "eval.every": 3, "checkpoint.keep_last": 10}
    )
    proc = start(["train", "addition", *overrides, f"name={name}", "--db", db], workdir)
    wait_for_step(db, name, 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.postgres_too
def test_two_resumers_at_once_one_is_refused_and_no_row_is_duplicated(db_url, tmp_path, tiny_model_dir):
    name = "race"
    killed_run(db_url, name, tmp_path, tiny_model_dir)  # trial 0: its dead trainer still holds the claim
    for trial in range(3):
        if trial:  # trials 1, 2: the same run, interrupted after step 2 (claim released)
            with Registry(db_url) as registry:
                run = registry.get_run(name)
                registry.truncate_after(run.id, 2)
                registry.set_status(run.id, "interrupted", error="Ctrl-C")
        resumers = [start(["train", "--resume", name, "--db", db_url], tmp_path) for _ in range(2)]
        outcomes = [(p.wait(timeout=300), *p.communicate()) for p in resumers]
        codes = sorted(code for code, _, _ in outcomes)
        assert codes == [0, 2], [(c, e[-1500:]) for c, _, e in outcomes]
        refused = next(err for code, _, err in outcomes if code == 2)
        lines = refused.strip().splitlines()
        # The loser either meets the winner's claim or, when the winner's few steps were done
        # before the loser's claim (the steps are fast), a finished run: never a second trainer.
        assert len(lines) == 1 and (
            lines[0].startswith(f"error: run '{name}' is being written by pid")
            or lines[0] == f"error: run '{name}' already finished"
        ), refused
        keys = metric_keys(db_url, name)
        assert len(keys) == len(set(keys)), "a metric key was written twice"
        assert sorted({s for s, o, n in keys if n == "train/reward"}) == list(range(1, STEPS + 1))
        with Registry(db_url, readonly=True) as registry:
            run = registry.get_run(name)
            assert (run.status, run.last_step, run.claim_token) == ("finished", STEPS, None)


@pytest.mark.slow
@pytest.mark.postgres_too
def test_a_trainer_whose_claim_is_taken_over_stops_without_writing(db_url, tmp_path, tiny_model_dir):
    overrides = fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 40, "checkpoint.every": 100})
    proc = start(["train", "addition", *overrides, "name=orphan", "--db", db_url], tmp_path)
    wait_for_step(db_url, "orphan", 2, proc)
    # Another node decides the trainer is dead (as if its lease had run out) and claims the run.
    successor = Registry(db_url)
    run = successor.get_run("orphan")
    for _ in range(50):  # each step of the trainer renews its lease: expire it, then claim, until we win
        with successor.engine.begin() as conn:
            conn.execute(
                update(Run).where(Run.id == run.id).values(claim_expires_at=utcnow() - timedelta(seconds=lease_s() + 1))
            )
        try:
            successor.claim_run(run.id)
            break
        except UserError:
            continue
    taken_at = successor.get_run(run.id).last_step
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-2000:]
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "was taken over by pid" in lines[0] and "Traceback" not in err, err[-2000:]
    after = successor.get_run(run.id)
    assert after.last_step == taken_at and after.status == "running"  # nothing more from the old trainer
    assert after.claim_pid == os.getpid()
    successor.set_status(run.id, "interrupted")


@pytest.mark.slow
def test_resume_from_another_directory(db_url, tmp_path, tiny_model_dir):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    db = db_url if db_url.startswith("postgresql") else str(project / "registry.db")
    overrides = fast_overrides(tiny_model_dir, project, **{"loop.n_grpo_steps": STEPS, "eval.every": 3})
    overrides = [o for o in overrides if not o.startswith("checkpoint.dir=")] + ["checkpoint.dir=ckpt"]  # relative
    proc = start(["train", "addition", *overrides, "name=moved", "--db", db], project)
    wait_for_step(db, "moved", 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    resumed = trainer_zygote.run(
        DIGIT_TRAIN + ["train", "--resume", "moved", "--db", db], elsewhere, env(), timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    with Registry(db, readonly=True) as registry:
        run = registry.get_run("moved")
        assert run.status == "finished" and run.output_dir == str(project / "ckpt" / "moved")
        assert all(c.path.startswith(str(project / "ckpt")) for c in registry.checkpoints(run.id))
    assert not (elsewhere / "ckpt").exists()


@pytest.mark.slow
def test_unnamed_runs_started_together_get_their_own_names(tmp_path, tiny_model_dir):
    overrides = fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 1, "eval.at_start": "false"})
    procs = [start(["train", "addition", *overrides], tmp_path) for _ in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    with Registry(str(tmp_path / "registry.db"), readonly=True) as registry:
        names = [r.name for r in registry.list_runs()]
    assert len(set(names)) == 3 and all(r.startswith("model-s0-") for r in names), names
