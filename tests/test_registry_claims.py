"""One writer per run, on SQLite and PostgreSQL: the claim, its lease, fencing, and the
unique index under it. Two `Registry` objects stand for two processes (the multi-process
races are in test_registry_races.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from grpoctl.errors import UserError
from grpoctl.registry import ClaimLost, Metric, Registry, Run
from grpoctl.registry.models import utcnow
from grpoctl.rules import lease_s


def new_run(registry: Registry, name: str = "run-a") -> Run:
    return registry.create_run(
        name=name, config={"lr": 1e-3}, config_diff={}, config_hash=f"h-{name}", seed=0, total_steps=10
    )


def expire(registry: Registry, run_id: int, **extra) -> None:
    """Make the run's lease run out, as if its holder stopped renewing it."""
    past = utcnow() - timedelta(seconds=lease_s() + 1)
    with registry.engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run_id).values(claim_expires_at=past, **extra))


def metric_count(registry: Registry, run_id: int) -> int:
    with registry.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(Metric).where(Metric.run_id == run_id))


@pytest.fixture
def two(db_url):
    """Two registries on the same database: two processes, as far as claims can tell."""
    a, b = Registry(db_url), Registry(db_url)
    yield a, b
    a.close()
    b.close()


def test_the_creator_holds_the_claim_and_a_second_writer_is_refused(two):
    a, b = two
    run = new_run(a)
    row = b.get_run(run.id)
    assert row.claim_token and row.claim_pid == os.getpid() and row.claim_host == socket.gethostname()
    assert row.claim_expires_at > utcnow() + timedelta(seconds=lease_s() - 30)
    with pytest.raises(UserError, match=r"^run 'run-a' is being written by pid \d+ on .*expires in \d+ s"):
        b.claim_run(run.id)
    a.log_step(run.id, 1, {"x": 1.0})  # the holder writes on
    assert metric_count(b, run.id) == 1


def test_a_finished_run_releases_its_claim_for_a_resume(two):
    a, b = two
    run = new_run(a)
    a.set_status(run.id, "interrupted", error="Ctrl-C")
    assert b.get_run(run.id).claim_token is None
    b.claim_run(run.id)
    b.log_step(run.id, 1, {"x": 1.0})
    with pytest.raises(UserError, match="is being written by"):
        a.claim_run(run.id)


def test_a_takeover_after_the_lease_fences_out_the_old_writer(two):
    a, b = two
    run = new_run(a)
    a.log_step(run.id, 1, {"x": 1.0})
    expire(a, run.id, claim_host="node-that-died")  # its heartbeats stopped reaching us
    b.claim_run(run.id)
    before = metric_count(b, run.id)
    # Everything the old writer tries now is refused before a row is written.
    with pytest.raises(ClaimLost, match=r"^run 'run-a' was taken over by pid \d+ on .*stopped without writing"):
        a.log_step(
            run.id,
            2,
            {"x": 2.0},
            samples=[dict(prompt="p", response="r", ground_truth="g", reward=0, format_reward=0, answer_reward=0)],
        )
    assert metric_count(b, run.id) == before and b.samples(run.id) == []
    # Once fenced out, always fenced out: a later write (say, from its heartbeat thread)
    # does not slip through as if it had never held a claim.
    with pytest.raises(ClaimLost):
        a.log_step(run.id, 2, {"x": 2.0})
    with pytest.raises(ClaimLost):
        a.heartbeat(run.id)
    with pytest.raises(UserError, match="is being written by"):
        a.claim_run(run.id)
    b.log_step(run.id, 2, {"x": 2.0})
    assert b.get_run(run.id).last_step == 2 and b.get_run(run.id).status == "running"


@pytest.mark.parametrize(
    "write", ["heartbeat", "set_status", "add_checkpoint", "truncate_after", "add_eval", "mark_checkpoint_deleted"]
)
def test_every_trainer_write_checks_the_claim(two, write):
    a, b = two
    run = new_run(a)
    ckpt = a.add_checkpoint(run.id, 1, "/ckpt/step-1")
    expire(a, run.id)
    b.claim_run(run.id)
    calls = {
        "heartbeat": lambda: a.heartbeat(run.id),
        "set_status": lambda: a.set_status(run.id, "failed", error="late"),
        "add_checkpoint": lambda: a.add_checkpoint(run.id, 2, "/ckpt/step-2"),
        "truncate_after": lambda: a.truncate_after(run.id, 0),
        "add_eval": lambda: a.add_eval(
            run_id=run.id, step=2, n=1, accuracy=1.0, format_rate=1.0, mean_response_length=1.0
        ),
        "mark_checkpoint_deleted": lambda: a.mark_checkpoint_deleted(ckpt.id),
    }
    with pytest.raises(ClaimLost):
        calls[write]()
    after = b.get_run(run.id)
    assert after.status == "running" and after.error is None
    assert [(c.step, c.deleted) for c in b.checkpoints(run.id, include_deleted=True)] == [(1, False)]
    assert b.evals(run.id) == []


def test_a_dead_process_on_this_host_can_be_taken_over_at_once(two):
    a, b = two
    run = new_run(a)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    with a.engine.begin() as conn:  # the claim of a process that was killed moments ago
        conn.execute(update(Run).where(Run.id == run.id).values(claim_pid=dead.pid))
    b.claim_run(run.id)
    assert b.get_run(run.id).claim_pid == os.getpid()
    # The same pid on another host proves nothing: that claim stands until its lease ends.
    with a.engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run.id).values(claim_pid=dead.pid, claim_host="elsewhere"))
    with pytest.raises(UserError, match="on elsewhere"):
        a.claim_run(run.id)


def test_runs_from_before_claims_are_judged_by_their_heartbeat(two):
    a, b = two
    run = new_run(a)
    with a.engine.begin() as conn:  # a running run written by a grpoctl without claims, on another host
        conn.execute(
            update(Run)
            .where(Run.id == run.id)
            .values(claim_token=None, claim_expires_at=None, claim_pid=None, claim_host=None, host="old-node", pid=1234)
        )
    with pytest.raises(UserError, match="on old-node"):
        b.claim_run(run.id)
    with a.engine.begin() as conn:
        conn.execute(
            update(Run).where(Run.id == run.id).values(heartbeat_at=utcnow() - timedelta(seconds=lease_s() + 1))
        )
    assert b.claimable(b.get_run(run.id))
    b.claim_run(run.id)


def test_a_metric_key_is_stored_once_even_without_a_claim(two):
    a, _ = two
    run = new_run(a)
    a.log_step(run.id, 1, {"x": 1.0}, opt_metrics=[(0, {"g": 1.0})])
    for opt_step in (None, 0):  # NULL opt_step is one value for the index (COALESCE)
        with pytest.raises(IntegrityError):
            with a.engine.begin() as conn:
                conn.execute(
                    insert(Metric),
                    [
                        {
                            "run_id": run.id,
                            "step": 1,
                            "opt_step": opt_step,
                            "name": "x" if opt_step is None else "g",
                            "value": 2.0,
                        }
                    ],
                )
    # A whole step is one transaction: a duplicate inside it leaves none of that step.
    with pytest.raises(IntegrityError):
        a.log_step(run.id, 1, {"y": 1.0, "x": 3.0})
    assert a.metric_series(run.id) == {"x": [(1, 1.0)]} and a.get_run(run.id).last_step == 1


def test_a_run_finished_by_a_racing_resumer_is_not_claimed_again(two):
    # The loser of a resume race may have read the run before the winner finished it.
    a, b = two
    run = new_run(a)
    a.set_status(run.id, "finished")
    with pytest.raises(UserError, match=r"^run 'run-a' already finished$"):
        b.claim_run(run.id)
