"""Sweeps on a real Ray cluster (one node on 127.0.0.1 with 2 fake GPUs) into a real
PostgreSQL registry, with real `grpoctl train` members (a random tiny model and a reward
it can earn, tests/digit_reward_train.py), driven by the CLI as a user would:
`grpoctl sweep ... --executor ray --ray-address ADDRESS`.

What is checked: four members that each reserve a GPU run two at a time, each pair on
different devices (Ray's CUDA_VISIBLE_DEVICES, as each trainer saw it), and all finish
with exactly the rows such a run writes; a re-invoked sweep skips them; `runs stop`
stops one member on its own and `runs logs --follow` shows it to the end; Ctrl-C makes
the others checkpoint and end `interrupted`, and the sweep run again resumes and
finishes them; the password never shows in a trainer's argv or a stored log.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli import invoke
from conftest import drop_pg_database, fast_overrides, fresh_pg_database
from ray_cluster import local_cluster, lr_sweep_argv, need_ray, recorder, seen, stopped
from sqlalchemy import text

need_ray()

from grpoctl.registry import Registry  # noqa: E402

TIMEOUT_S = 420
# Every trainer of this module's cluster stops itself once step 5's rollouts exist (see
# grpoctl/train/faults.py), so that a test acts on a run mid-way, not on a timing guess.
# Runs of 3 steps (the default here) never get there.
HOLD = "step-rollouts@5"
# The stop/Ctrl-C test's runs: long enough that a member let go after `runs stop` cannot
# reach the end before its heartbeat thread (which looks every 2 s) sees the request: at
# about 0.06 s a step, 20 steps were not (seen once in CI: the run finished at step 20,
# the request seen at step 19), 60 leave 3 s; short enough that the resumed sweep
# finishing both is quick.
LONG_STEPS = 60
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ray-sweep")
    with local_cluster(recorder(workdir) | {"GRPOCTL_FAULT": f"{HOLD}:STOP"}, num_cpus=4, num_gpus=2) as address:
        yield address, workdir


@pytest.fixture
def pg_url(pg_admin_url):
    url = fresh_pg_database(pg_admin_url)
    yield url
    drop_pg_database(pg_admin_url, url)


def grpoctl(*args: str, cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grpoctl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, COLUMNS="200"),
    )


def sweep_args(address: str, db: str, model: Path, workdir: Path, values: str, **extra) -> list[str]:
    argv = lr_sweep_argv(address, db, (values,), fast_overrides(model, workdir, **extra))
    return argv[argv.index("sweep") :]  # for `grpoctl` above


def counts(registry: Registry, run) -> dict[str, int]:
    """How many rows of each kind the run has; its metric keys are checked to be unique."""
    with registry.engine.connect() as conn:
        keys = conn.execute(
            text("SELECT step, coalesce(opt_step, -1), name FROM metric WHERE run_id = :id"), {"id": run.id}
        ).all()
    assert len(keys) == len(set(keys)), f"duplicated metric rows in {run.name}"
    return {
        "metric keys": len(keys),
        "evals": len(registry.evals(run.id)),
        "checkpoints": len(registry.checkpoints(run.id, include_deleted=True)),
        "samples": len(registry.samples(run.id)),
    }


def release_in_pairs(driver: subprocess.Popen, workdir: Path) -> None:
    """Let the trainers held at HOLD go on two at a time: two members are then known to run
    at once (a 6-step tiny run is over in a second or two, so without this two members on
    two free GPUs may still miss each other). A trainer held alone for 60 s goes on alone."""
    held_since: dict[int, float] = {}
    released: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while driver.poll() is None and time.monotonic() < deadline:
        for pid in seen(workdir):
            try:
                if pid not in released and pid not in held_since and stopped(pid):
                    held_since[pid] = time.monotonic()
            except FileNotFoundError:  # that trainer is over
                released.add(pid)
        alone_too_long = any(time.monotonic() - t > 60 for t in held_since.values())
        if len(held_since) >= 2 or alone_too_long:
            for pid in held_since:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            released.update(held_since)
            held_since.clear()
        time.sleep(0.1)


def test_four_members_on_two_fake_gpus_run_two_at_a_time(cluster, pg_url, tiny_model_dir, tmp_path):
    address, workdir = cluster
    args = sweep_args(
        address,
        pg_url,
        tiny_model_dir,
        tmp_path,
        "1e-3,2e-3,3e-3,4e-3",
        **{"loop.n_grpo_steps": 6, "eval.every": 3, "checkpoint.every": 3},
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "grpoctl", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
    )
    try:
        release_in_pairs(driver, workdir)
        out, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, out
    registry = Registry(pg_url)
    runs = registry.runs_in_group("lr-sweep")
    assert [r.status for r in runs] == ["finished"] * 4

    # 6 steps; evals at 0, 3 and 6; checkpoints at 3 and 6; one optimizer step per GRPO step (from 0);
    # 4 completions stored per step, 4 more per eval.
    for run in runs:
        assert counts(registry, run) == {
            "metric keys": counts(registry, runs[0])["metric keys"],
            "evals": 3,
            "checkpoints": 2,
            "samples": 4 * 6 + 4 * 3,
        }, run.name
        assert {s for s, _ in registry.metric_series(run.id)["train/reward"]} == set(range(1, 7))
        assert [o for o, _ in registry.metric_series(run.id, per_opt_step=True)["train/loss"]] == list(range(6))

    # Which devices each trainer saw (every member ran once: its run's pid is its trainer).
    devices = {pid: d for pid, (d, _) in seen(workdir).items()}
    device = {r.name: devices[r.pid] for r in runs}
    assert set(device.values()) <= {"0", "1"}
    spans = {r.name: (r.created_at, r.finished_at) for r in runs}
    overlapping = [
        (a, b) for a, b in itertools.combinations(spans, 2) if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    ]
    assert overlapping, "no two members ran at the same time"
    assert all(device[a] != device[b] for a, b in overlapping), (overlapping, device)
    for name, (start, _end) in spans.items():  # never three at once: at most one other at its start
        assert sum(1 for other, (s, e) in spans.items() if other != name and s <= start < e) <= 1, spans

    # The password travels by object reference, never in a trainer's argv or in a log.
    from sqlalchemy.engine import make_url

    password = make_url(pg_url).password
    assert not any(password in a for _, a in seen(workdir).values())
    for run in runs:
        log = invoke("runs", "logs", run.name, "--db", pg_url, cwd=tmp_path)  # in-process: a read
        assert log.returncode == 0 and "run finished" in log.stdout and password not in log.stdout
        assert "CUDA_VISIBLE_DEVICES=" + device[run.name] in log.stdout

    again = grpoctl(*args, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("skip ") == 4, again.stdout
    assert len(registry.list_runs()) == 4


def signal_pending(pid: int, sig: int) -> bool:
    """Whether `sig` waits to be delivered to the (stopped) process `pid`."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    mask = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return bool(mask >> (sig - 1) & 1)


def test_stop_one_member_follow_its_log_then_ctrl_c_and_resume(cluster, pg_url, tiny_model_dir, tmp_path):
    address, _ = cluster
    args = sweep_args(
        address,
        pg_url,
        tiny_model_dir,
        tmp_path,
        "1e-3,2e-3",
        **{"loop.n_grpo_steps": LONG_STEPS, "checkpoint.every": 5},
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "grpoctl", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=os.environ,
    )
    registry = Registry(pg_url)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:  # until both trainers hold at step 5
            runs = registry.runs_in_group("lr-sweep")
            if len(runs) == 2 and all(r.pid and stopped(r.pid) for r in runs):
                break
            assert driver.poll() is None, driver.stdout.read()
            time.sleep(0.2)
        first, second = registry.runs_in_group("lr-sweep")
        follow = subprocess.Popen(
            [sys.executable, "-m", "grpoctl", "runs", "logs", first.name, "--follow", "--db", pg_url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
        )
        stop = grpoctl("runs", "stop", first.name, "--db", pg_url, cwd=tmp_path, timeout=60)
        assert stop.returncode == 0 and "asked run" in stop.stdout, stop.stderr
        os.kill(first.pid, signal.SIGCONT)  # its heartbeat sees the request at once: it stops after step 5
        followed, _ = follow.communicate(timeout=TIMEOUT_S)  # and the log ends by itself when the run does
        assert follow.returncode == 0 and "run interrupted" in followed.splitlines()[-1], followed[-500:]
        assert registry.get_run(first.id).status == "interrupted"
        assert registry.get_run(second.id).status == "running"  # the other member goes on

        os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C at the sweep's terminal
        # The cancel reaches the member through Ray, which forwards it as SIGINT: wake the
        # trainer only once that is pending (a fixed 3 s was not always enough under CI load,
        # and the member then finished its 20 steps first).
        deadline = time.monotonic() + TIMEOUT_S
        while not signal_pending(second.pid, signal.SIGINT):
            assert time.monotonic() < deadline, "the sweep's Ctrl-C never reached the running member"
            time.sleep(0.2)
        os.kill(second.pid, signal.SIGCONT)
        out, _ = driver.communicate(timeout=TIMEOUT_S)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130 and "again to resume" in out, out
    for run in (first, second):
        run = registry.get_run(run.id)
        assert run.status == "interrupted" and 5 <= run.last_step < LONG_STEPS, (run.name, run.status, run.last_step)
        assert max(c.step for c in registry.checkpoints(run.id)) == run.last_step  # checkpointed as it stopped
    assert "SIGTERM" in registry.get_run(first.id).error and "Ctrl-C" in registry.get_run(second.id).error

    resumed = grpoctl(*args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("(resume)") == 2, resumed.stdout
    for run in registry.runs_in_group("lr-sweep"):
        assert (run.status, run.last_step) == ("finished", LONG_STEPS)
        keys = [(s, n) for n, points in registry.metric_series(run.id).items() for s, _ in points]
        assert len(keys) == len(set(keys)) and {s for s, n in keys if n == "train/reward"} == set(
            range(1, LONG_STEPS + 1)
        )
    assert len(registry.list_runs()) == 2
