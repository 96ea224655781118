"""A PostgreSQL registry that goes away under a training run: restarted with a step's
commit in flight, down for longer than one reconnect, down for longer than a trainer may
wait. Each run trains against a server of this module's own (it is restarted and
stopped here), with the tests' short claim timings (lease 10 s, heartbeat 3 s: see
grpoctl/rules.py, registry_link_s and registry_retry_s).

The trainer stops itself just before its step-3 commit (GRPOCTL_FAULT `step-record@3`),
and the test breaks the server there, so what fails is that commit:
- a restart with the commit in flight: the test holds a lock on the run's row, so the
  trainer's commit is open and waiting inside the server when `pg_ctl restart -m fast`
  ends its session. The trainer retries the step's transaction and finishes.
- an outage of several seconds: the server is stopped, the trainer finds it gone, and
  it is started again while the trainer retries. The trainer finishes.
- an outage longer than the trainer may wait (registry_retry_s(), and never past the
  moment its claim could lapse): the trainer stops in one line without writing more
  (exit 75, a temporary failure, which a sweep member retries), before its claim has
  lapsed, and `--resume` (once the server is back) finishes the run.

After each, the run's rows are exactly an uninterrupted run's, and no claim is held.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pg_server
import psycopg
import pytest
from conftest import record_service_start
from run_rows import assert_same_rows, url_rows
from test_faults import overrides, start, stderr_of, straight_rows, wait, wait_stopped

from grpoctl.errors import TEMPFAIL_EXIT
from grpoctl.registry.claims import aware
from grpoctl.rules import registry_link_s

pytestmark = pytest.mark.slow
TIMINGS = {"GRPOCTL_LEASE_S": "10", "GRPOCTL_HEARTBEAT_S": "3"}


@pytest.fixture(scope="module")
def server():
    """A server of this module's own (it is restarted and stopped here)."""
    if pg_server.find_bindir() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("PostgreSQL is not installed under CI=true")
        pytest.skip("PostgreSQL is not installed")
    root = Path(tempfile.mkdtemp(prefix="grpoctl-outage-pg-"))  # one the postgres user can reach
    try:
        started = time.monotonic()
        admin = pg_server.start(root)
        record_service_start("postgresql", time.monotonic() - started)
        yield root, admin
    finally:
        pg_server.stop(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def database(server, request):
    root, admin = server
    name = "outage_" + request.node.name.split("[")[0][-40:].lower()
    with psycopg.connect(_plain(admin), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return root, admin.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict:
    """The rows of the run never interrupted (on SQLite; shared with tests/test_faults.py)."""
    return straight_rows(tmp_path_factory)


@pytest.fixture(autouse=True)
def short_timings(monkeypatch):
    for key, value in TIMINGS.items():
        monkeypatch.setenv(key, value)


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def trainer(db: str, workdir: Path, tiny_model_dir: Path):
    args = ["train", "addition", *overrides(tiny_model_dir, workdir), "name=straight", "--db", db]
    proc = start(args, workdir, "step-record@3:STOP")
    wait_stopped(proc, workdir)
    return proc


def wait_for(what, timeout: float = 60.0, why: str = ""):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, why
        time.sleep(0.05)
    return found


def assert_finished_whole(db: str, want: dict) -> None:
    with psycopg.connect(_plain(db)) as conn:
        row = conn.execute("SELECT status, last_step, claim_token FROM run WHERE name = 'straight'").fetchone()
    assert row == ("finished", 5, None), row
    assert_same_rows(url_rows(db, "straight"), want)


def test_a_restart_with_a_step_commit_in_flight_is_retried(database, tiny_model_dir, tmp_path, straight):
    root, db = database
    proc = trainer(db, tmp_path, tiny_model_dir)
    blocker = psycopg.connect(_plain(db))  # ended by the restart: not a context manager
    try:
        blocker.execute("SELECT id FROM run WHERE name = 'straight' FOR UPDATE")  # holds the row
        proc.send_signal(signal.SIGCONT)

        def commit_waits() -> bool:
            with psycopg.connect(_plain(db), autocommit=True) as probe:
                return bool(
                    probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'grpoctl' "
                        "AND wait_event_type = 'Lock'"
                    ).fetchone()[0]
                )

        wait_for(commit_waits, why="the trainer's step commit never waited on the held row")
        pg_server.restart(root)  # ends both sessions: the commit in flight is rolled back
    finally:
        blocker.close()
    assert wait(proc, tmp_path) == 0, stderr_of(tmp_path)[-2000:]
    err = stderr_of(tmp_path)
    assert "registry: unreachable" in err and "registry: reached again after" in err, err[-2000:]
    assert_finished_whole(db, straight)


def test_an_outage_longer_than_one_reconnect_is_waited_out(database, tiny_model_dir, tmp_path, straight):
    root, db = database
    proc = trainer(db, tmp_path, tiny_model_dir)
    pg_server.pause(root)
    proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "registry: unreachable" in stderr_of(tmp_path), why="the trainer never noticed the outage")
    noticed = time.monotonic()
    # Down for a few reconnects (each refused at once, one each RETRY_PAUSE_S), well inside
    # the trainer's bound: registry_retry_s() from its first failure, and its claim's lapse
    # (its last renewal was before the hold) less a last attempt and SAY_AND_EXIT_S.
    while time.monotonic() - noticed < 2.0:
        assert proc.poll() is None, stderr_of(tmp_path)[-2000:]
        time.sleep(0.1)
    pg_server.resume(root)
    assert wait(proc, tmp_path) == 0, stderr_of(tmp_path)[-2000:]
    assert "registry: reached again after" in stderr_of(tmp_path)
    assert_finished_whole(db, straight)


def test_an_outage_past_the_retry_bound_stops_the_trainer_and_resume_finishes(
    database, tiny_model_dir, tmp_path, straight
):
    root, db = database
    proc = trainer(db, tmp_path, tiny_model_dir)
    pg_server.pause(root)
    stopped_at = time.monotonic()
    proc.send_signal(signal.SIGCONT)
    code = wait(proc, tmp_path)
    took, exited = time.monotonic() - stopped_at, datetime.now(UTC)
    pg_server.resume(root)
    err = stderr_of(tmp_path)
    assert code == TEMPFAIL_EXIT, err[-2000:]  # a temporary failure: a sweep member retries it
    assert took >= registry_link_s(), took  # it tried for a while (the bound is checked below)
    with psycopg.connect(_plain(db)) as conn:
        lapse = conn.execute("SELECT claim_expires_at FROM run WHERE name = 'straight'").fetchone()[0]
    # It had stopped, and said why, before its claim could lapse: nobody could have taken
    # the run over while it still tried.
    assert exited < aware(lapse), (exited, lapse)
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: the registry was unreachable for") and "stopped without writing more" in last
    assert "Traceback" not in err and "sqlalche.me" not in err
    with psycopg.connect(_plain(db)) as conn:
        assert conn.execute("SELECT status, last_step FROM run WHERE name = 'straight'").fetchone() == ("running", 2)
    (tmp_path / "stderr.txt").unlink()
    resumed = start(["train", "--resume", "straight", "--db", db], tmp_path, "")
    assert wait(resumed, tmp_path) == 0, stderr_of(tmp_path)[-2000:]
    assert_finished_whole(db, straight)
