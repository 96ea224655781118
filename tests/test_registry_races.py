"""Processes racing on one registry, on SQLite and PostgreSQL: released together at a
barrier, they must all succeed where they should, and exactly one win where one must.

- 6 first commands on an empty registry: all succeed (one creates it, the rest wait);
- two sweeps of the same name at once: one sweep row, no traceback;
- 20 trials of concurrent add_tag / add_sweep_member: one row each, no error;
- 20 trials of two processes claiming the same run: exactly one wins.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from sqlalchemy import func, select

from grpoctl.registry import Registry, Sweep, SweepMember, Tag

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 20
TIMEOUT_S = 120
CTX = multiprocessing.get_context("spawn")  # real, fresh processes, as separate commands are


def _worker(db: str, role: str, barrier, results, trials: int) -> None:
    """One process: open the registry, then at each barrier do this trial's operation."""
    try:
        registry = Registry(db)
        for trial in range(trials):
            barrier.wait(TIMEOUT_S)  # the parent has set up the trial
            barrier.wait(TIMEOUT_S)  # everyone is ready: go
            outcome = "ok"
            try:
                if role == "claim":
                    registry.claim_run(_run_id(registry, trial))
                elif role == "tag":
                    registry.add_tag(f"r{trial}", "best")
                    sweep = registry.get_or_create_sweep(f"s{trial}", "sweep", {"trial": trial})
                    registry.add_sweep_member(sweep.id, "hash", "lr=1e-3", 0)
            except Exception as exc:  # noqa: BLE001 - the outcome is what is tested
                outcome = f"{type(exc).__name__}: {exc}"
            results.put((trial, os.getpid(), outcome))
            barrier.wait(TIMEOUT_S)  # done
    except Exception:  # noqa: BLE001
        results.put((-1, os.getpid(), traceback.format_exc()))


def _run_id(registry: Registry, trial: int) -> int:
    return registry.get_run(f"r{trial}").id


def _race(db: str, role: str, setup, trials: int = TRIALS) -> list[list[str]]:
    """Two worker processes racing `trials` times; returns each trial's two outcomes."""
    barrier = CTX.Barrier(3)
    results = CTX.Queue()
    workers = [CTX.Process(target=_worker, args=(db, role, barrier, results, trials)) for _ in range(2)]
    for w in workers:
        w.start()
    outcomes: list[list[str]] = []
    try:
        for trial in range(trials):
            setup(trial)
            barrier.wait(TIMEOUT_S)
            barrier.wait(TIMEOUT_S)
            got = [results.get(timeout=TIMEOUT_S) for _ in range(2)]
            assert all(t == trial for t, _, _ in got), got
            outcomes.append(sorted(o for _, _, o in got))
            barrier.wait(TIMEOUT_S)
    finally:
        for w in workers:
            w.join(timeout=TIMEOUT_S)
            if w.is_alive():
                w.kill()
    assert all(w.exitcode == 0 for w in workers)
    return outcomes


def test_two_processes_claiming_one_run_exactly_one_wins(db_url):
    registry = Registry(db_url)

    def setup(trial):  # a run whose trainer ended (interrupted): claimable by either
        run = registry.create_run(
            name=f"r{trial}", config={}, config_diff={}, config_hash=f"h{trial}", seed=0, total_steps=1
        )
        registry.set_status(run.id, "interrupted")

    outcomes = _race(db_url, "claim", setup)
    for trial, pair in enumerate(outcomes):
        assert pair[1] == "ok" and pair[0].startswith("UserError: run "), (trial, pair)
        assert "being written by" in pair[0] or "just claimed by another process" in pair[0]
    holders = {registry.get_run(f"r{t}").claim_pid for t in range(TRIALS)}
    assert len(holders) == 2 or all(h is not None for h in holders)  # each trial has exactly one holder


def test_concurrent_tags_sweeps_and_members_make_one_row_each(db_url):
    registry = Registry(db_url)

    def setup(trial):
        registry.create_run(name=f"r{trial}", config={}, config_diff={}, config_hash=f"h{trial}", seed=0, total_steps=1)

    outcomes = _race(db_url, "tag", setup)
    assert all(pair == ["ok", "ok"] for pair in outcomes), outcomes
    with registry.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Tag)) == TRIALS
        assert conn.scalar(select(func.count()).select_from(Sweep)) == TRIALS
        assert conn.scalar(select(func.count()).select_from(SweepMember)) == TRIALS


FIRST_COMMAND = """
import sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
sys.argv = ["grpoctl", *sys.argv[3:], "--db", sys.argv[1]]
from grpoctl.cli import main
main()
"""


def _at_once(db: str, tmp_path: Path, commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Start real `grpoctl` processes, release them together, collect what they said."""
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_COMMAND, db, str(go), *cmd],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cmd in commands
    ]
    import time

    time.sleep(1.5)  # let them import grpoctl and wait at the line
    go.touch()
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


# A trainer for the sweeps here: records its run as finished, at once.
FAKE_TRAINER = """
import sys
from grpoctl.config import load_config, to_dict
from grpoctl.rules import config_hash
from grpoctl.errors import UserError
from grpoctl.registry import Registry
args = sys.argv[1:]
db = args[args.index("--db") + 1]
path = args[0] if "=" not in args[0] else None  # a sweep's run config file
cfg = load_config(path, [a for a in args if "=" in a])
try:
    registry = Registry(db)
    run = registry.create_run(name=cfg.name, config=to_dict(cfg), config_diff={}, config_hash=config_hash(cfg),
                              seed=cfg.seed, total_steps=2, group=cfg.group, variant=cfg.variant)
    registry.set_status(run.id, "finished")
except UserError as exc:
    sys.exit(f"error: {exc}")
"""


@pytest.fixture
def fake_trainer(tmp_path, monkeypatch):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    monkeypatch.setenv("GRPOCTL_TRAIN_CMD", f"{sys.executable} {script}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_six_first_commands_on_an_empty_registry_all_succeed(db_url, tmp_path, fake_trainer):
    # Before migrations, five of six crashed here on PostgreSQL (create_all racing).
    sweep = ["sweep", "lr", "--values", "1e-4,1e-3", "steps=2"]
    commands = [
        ["db", "upgrade"],
        sweep + ["--name", "a"],
        ["db", "upgrade"],
        sweep + ["--name", "b"],
        ["db", "upgrade"],
        sweep + ["--name", "c"],
    ]
    results = _at_once(db_url, tmp_path, commands)
    for result in results:
        assert result.returncode == 0, result.stderr + result.stdout
        assert "Traceback" not in result.stderr + result.stdout
    assert sum(r.stdout.startswith("created registry") for r in results) <= 1
    registry = Registry(db_url, readonly=True)
    assert sorted(s.name for s in registry.sweeps()) == ["a", "b", "c"]
    # The three sweeps want the same two configs: a sweep that plans after another's members
    # finished takes their runs (found by config hash) instead of training its own, so 2 to 6
    # runs exist, by timing. What must hold: every member of every sweep has a finished run.
    runs = registry.list_runs()
    assert 2 <= len(runs) <= 6 and {r.status for r in runs} == {"finished"}
    for name in ("a", "b", "c"):
        members = registry.sweep_members(name)
        assert len(members) == 2 and all(run is not None and run.status == "finished" for _, run in members), name
    status = subprocess.run(
        [sys.executable, "-m", "grpoctl", "db", "status", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert "up to date" in status.stdout, status


def test_two_sweeps_with_the_same_name_at_once(db_url, tmp_path, fake_trainer):
    command = ["sweep", "lr", "--values", "1e-4,3e-4,1e-3", "steps=2", "--name", "same"]
    results = _at_once(db_url, tmp_path, [command, command])
    for result in results:
        assert "Traceback" not in result.stderr + result.stdout, result.stderr
        assert "IntegrityError" not in result.stderr + result.stdout
        assert result.returncode in (0, 1), result  # 1: some of its runs had been started by the other
    registry = Registry(db_url, readonly=True)
    assert [s.name for s in registry.sweeps()] == ["same"]
    members = registry.sweep_members("same")
    assert [m.variant for m, _ in members] == ["lr=1e-4", "lr=3e-4", "lr=1e-3"]
    assert all(run is not None and run.status == "finished" for _, run in members), [(m, r) for m, r in members]
    assert len(registry.list_runs()) == 3
