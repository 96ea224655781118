"""The sweep launcher against a fake trainer: a script that speaks `grpoctl train`'s
command line and writes a few steps to the registry in a fraction of a second. Every
test runs on SQLite and PostgreSQL; on PostgreSQL a password must never show.

What is checked: a sweep records its members by config hash and runs each variant once;
re-invoking it skips finished runs, leaves failed ones alone unless --retry-failed,
resumes interrupted ones with --resume; --parallel runs children side by side; Ctrl-C
reaches the children, which record "interrupted", and the parent exits 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from grpoctl.cli.sweep_view import summary_table
from grpoctl.registry import Registry
from grpoctl.sweep import launcher, spec

ROOT = Path(__file__).resolve().parents[1]

# The contract: `[CONFIG] key=value ... --db URL` or `--resume RUN --db URL`; the run's
# name, group and variant arrive as overrides; its hash is config_hash(load_config(...)).
FAKE_TRAINER = r"""
import os, signal, sys, time
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.rules import config_hash
from grpoctl.registry import Registry

args = sys.argv[1:]
db = args[args.index("--db") + 1]
args = args[:args.index("--db")] + args[args.index("--db") + 2:]
registry = Registry(db)
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\n")
if args[0] == "--resume":
    run = registry.get_run(args[1])
    start = run.last_step + 1
else:
    path = args[0] if args and "=" not in args[0] else None
    cfg = load_config(path, [a for a in args if "=" in a])
    run = registry.create_run(
        name=cfg.name, config=to_dict(cfg), config_diff=config_diff(cfg), config_hash=config_hash(cfg),
        seed=cfg.seed, total_steps=cfg.loop.n_grpo_steps, group=cfg.group, variant=cfg.variant)
    start = 0
registry.set_status(run.id, "running")

def interrupted(*_):
    registry.set_status(run.id, "interrupted", error="Ctrl-C")
    sys.exit(130)

signal.signal(signal.SIGINT, interrupted)
print(f"training {run.name}", flush=True)
if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in run.name:
    registry.set_status(run.id, "failed", error="RuntimeError: boom")
    sys.exit(1)
lr = float(os.environ.get("FAKE_LR", "0.5"))
for step in range(start, run.total_steps + 1):  # step 0 is the eval before training, as in grpoctl
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    registry.log_step(run.id, step, {"train/reward": 0.1 * step, "eval/accuracy": 0.2 + 0.1 * step})
    registry.add_checkpoint(run.id, step, f"ckpt/{run.name}/step-{step}")  # a sweep resumes only from one
    fail_after = os.environ.get("FAKE_FAIL_AFTER", "")  # "NAME_PART:STEP": fail once that step is saved
    if fail_after and fail_after.split(":")[0] in run.name and step == int(fail_after.split(":")[1]):
        registry.set_status(run.id, "failed", error="OperationalError: the server closed the connection")
        sys.exit(1)
registry.set_status(run.id, "finished")
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """GRPOCTL_TRAIN_CMD pointing at the fake; returns the file listing its invocations."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    calls = tmp_path / "calls.txt"
    calls.touch()
    monkeypatch.setenv("GRPOCTL_TRAIN_CMD", f"{sys.executable} {script}")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(tmp_path)
    return calls


def sweep(registry: Registry, plan: spec.SweepPlan, **kwargs) -> launcher.SweepResult:
    return launcher.run_sweep(plan, registry, log_root=Path("logs"), **kwargs)


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_reinvoked_sweep_skips_finished_and_retries_failed_on_request(fake, tmp_path, monkeypatch, db_url):
    registry = Registry(db_url)
    plan = spec.param_sweep("lr", "3e-4,1e-3", overrides=["steps=3"])
    monkeypatch.setenv("FAKE_FAIL", "lr=1e-3")

    first = sweep(registry, plan)
    assert [j.outcome for j in first.jobs] == ["finished", "failed"]
    assert len(calls(fake)) == 2
    runs = {r.name: r for r in registry.runs_in_group("lr-sweep")}
    assert set(runs) == {"lr-sweep-lr=3e-4-s0", "lr-sweep-lr=1e-3-s0"}
    assert {m.config_hash for m, _ in registry.sweep_members("lr-sweep")} == {v.config_hash for v in plan.variants}
    assert runs["lr-sweep-lr=3e-4-s0"].last_step == 3
    assert "training lr-sweep-lr=3e-4-s0" in (tmp_path / "logs/lr-sweep/lr-sweep-lr=3e-4-s0.log").read_text()

    again = sweep(registry, spec.param_sweep("lr", "3e-4,1e-3", overrides=["steps=3"]))
    assert again.jobs == [] and len(calls(fake)) == 2  # nothing ran
    assert [why.split(" ")[0] for _, why, _ in again.skipped] == ["finished", "failed"]

    monkeypatch.delenv("FAKE_FAIL")
    retry = sweep(registry, plan, retry_failed=True)
    assert [(j.action, j.run_name, j.outcome) for j in retry.jobs] == [("retry", "lr-sweep-lr=1e-3-s0-r2", "finished")]
    members = registry.sweep_members("lr-sweep")
    assert [run.name for _, run in members][-1] == "lr-sweep-lr=1e-3-s0-r2"  # the newest answers
    assert all(run.status == "finished" for _, run in members)


def test_retry_failed_resumes_a_failed_run_from_its_checkpoint(fake, tmp_path, monkeypatch, db_url):
    """A run that failed on something outside it (a database outage) keeps its progress:
    --retry-failed resumes it under its own name instead of starting a new run at step 0."""
    registry = Registry(db_url)
    plan = spec.param_sweep("lr", "3e-4,1e-3", overrides=["steps=4"])
    monkeypatch.setenv("FAKE_FAIL_AFTER", "lr=1e-3:2")
    first = sweep(registry, plan)
    assert [j.outcome for j in first.jobs] == ["finished", "failed"]
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    retry = sweep(registry, plan, retry_failed=True)
    assert [(j.action, j.run_name, j.outcome) for j in retry.jobs] == [("resume", "lr-sweep-lr=1e-3-s0", "finished")]
    assert calls(fake)[-1].startswith("--resume lr-sweep-lr=1e-3-s0 ")
    run = registry.get_run("lr-sweep-lr=1e-3-s0")
    assert (run.status, run.last_step) == ("finished", 4) and len(registry.list_runs()) == 2  # no -r2 run
    assert [s for s, _ in registry.metric_series(run.id)["train/reward"]] == [0, 1, 2, 3, 4]  # none twice


def test_interrupted_run_is_resumed_not_restarted(fake, tmp_path, db_url):
    registry = Registry(db_url)
    plan = spec.param_sweep("loss", "grpo_no_clip", overrides=["steps=4"])
    sweep(registry, plan)
    run = registry.get_run("loss-sweep-loss=grpo_no_clip-s0")
    registry.truncate_after(run.id, 1)
    registry.set_status(run.id, "interrupted")

    result = sweep(registry, plan)
    assert [(j.action, j.run_name) for j in result.jobs] == [("resume", run.name)]
    assert calls(fake)[-1].startswith(f"--resume {run.name} --db")
    run = registry.get_run(run.id)
    assert (run.status, run.last_step) == ("finished", 4)
    assert len(registry.list_runs()) == 1


def test_ablation_runs_in_parallel_and_summarizes(fake, tmp_path, monkeypatch, db_url):
    (tmp_path / "base.yaml").write_text("loop:\n  n_grpo_steps: 3\n")
    (tmp_path / "abl.yaml").write_text(
        "name: abl\nbase: base.yaml\nseeds: [1]\n"
        "variants:\n  mean: {loss.length_normalization: mean}\n  constant: {loss: {length_normalization: constant}}\n"
    )
    monkeypatch.setenv("FAKE_SLEEP", "0.2")
    registry = Registry(db_url)
    plan = spec.ablation(tmp_path / "abl.yaml")
    started = time.monotonic()
    result = sweep(registry, plan, parallel=2)
    assert [j.outcome for j in result.jobs] == ["finished"] * 2
    assert {(r.variant, r.seed) for r in registry.runs_in_group("abl")} == {("mean", 1), ("constant", 1)}
    assert time.monotonic() - started < 60

    text = Console(width=200, record=True, file=open(os.devnull, "w"))
    text.print(summary_table(plan, result, registry))
    summary = text.export_text()
    assert "abl-constant-s1" in summary and "3/3" in summary and "0.500" in summary  # eval at step 3


def test_gpu_ids_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert launcher.gpu_ids() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert launcher.gpu_ids() == []


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_ctrl_c_interrupts_children_and_says_how_to_resume(fake, tmp_path, monkeypatch, how, db_url):
    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    env = dict(os.environ)
    db = db_url
    parent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpoctl",
            "sweep",
            "lr",
            "--values",
            "1e-4,2e-4,3e-4",
            "steps=100",
            "--parallel",
            "2",
            "--db",
            db,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    registry = Registry(db)
    # Until both children have logged a step: a signal sent while a child is still being
    # spawned can land before it can handle one (seen under CI load, with a 30 s wait).
    deadline = time.monotonic() + 120
    while sum(r.last_step >= 0 for r in registry.list_runs()) < 2:
        assert time.monotonic() < deadline and parent.poll() is None, "the two children never logged a step"
        time.sleep(0.1)
    if how == "ctrl-c":
        os.killpg(parent.pid, signal.SIGINT)  # what Ctrl-C at the terminal sends
    else:
        parent.terminate()  # `kill PARENT`: a background sweep ignores SIGINT
    out, _ = parent.communicate(timeout=60)
    assert parent.returncode == 130, out
    assert "again to resume" in out
    assert sorted(r.status for r in registry.list_runs()) == ["interrupted", "interrupted"]


@pytest.mark.postgres_too
def test_a_password_never_shows_in_argv_logs_plans_or_messages(fake, tmp_path, monkeypatch, db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has no password")
    from sqlalchemy.engine import make_url

    password = make_url(db_url).password
    monkeypatch.setenv("FAKE_SLEEP", "0.3")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    base = [
        sys.executable,
        "-m",
        "grpoctl",
        "sweep",
        "lr",
        "--values",
        "1e-4,2e-4",
        "steps=6",
        "--parallel",
        "2",
        "--db",
        db_url,
    ]
    plan = subprocess.run(base + ["--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert "--db postgresql+psycopg://" in plan.stdout and password not in plan.stdout + plan.stderr

    parent = subprocess.Popen(base, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + 60
    while parent.poll() is None and time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
        # this sweep's own children: other tests may run sweeps of their own meanwhile
        children = [line for line in ps.splitlines() if "fake_train.py" in line and str(tmp_path) in line]
        seen += children
        time.sleep(0.05)
    out, _ = parent.communicate(timeout=60)
    assert parent.returncode == 0, out
    assert seen and all("--db postgresql+psycopg://" in line for line in seen), seen  # they were looked at
    assert not any(password in line for line in seen)
    logs = list((tmp_path / "outputs" / "sweeps").rglob("*.log"))
    assert len(logs) == 2 and all("--db postgresql+psycopg://" in p.read_text() for p in logs)
    assert not any(password in p.read_text() for p in logs)
    assert password not in out and "compare them" in out
    registry = Registry(db_url)
    assert sorted(r.status for r in registry.list_runs()) == ["finished", "finished"]


def test_a_bare_one_value_sweep_is_the_run_a_bare_train_made(tmp_path):
    """`grpoctl train lr=1e-4 steps=2` and `grpoctl sweep lr --values 1e-4 steps=2`, neither
    given a config, build on the same default (the lab): the sweep's member has the train
    run's config hash, so the sweep finds that run instead of training another."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOCTL_DB", "GRPOCTL_TRAIN_CMD")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="200")

    def grpoctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "grpoctl", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )

    trained = grpoctl("train", "lr=1e-4", "steps=2")
    assert trained.returncode == 0, trained.stderr[-2000:]
    plan = grpoctl("sweep", "lr", "--values", "1e-4", "steps=2", "--dry-run")
    assert "  base    lab (built in, the default, as `grpoctl train` without a config)" in plan.stdout, plan.stdout
    swept = grpoctl("sweep", "lr", "--values", "1e-4", "steps=2")
    assert swept.returncode == 0, swept.stderr[-2000:]
    with Registry(str(tmp_path / "registry.db"), readonly=True) as registry:
        (run,) = registry.list_runs()  # the train run; the sweep trained none of its own
        ((member, member_run),) = registry.sweep_members("lr-sweep")
    assert member.config_hash == run.config_hash and member_run.id == run.id
    assert json.loads(run.config)["model"]["path"] == "lab"
