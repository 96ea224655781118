"""The claim's timings (grpoctl/rules.py): the lease, the heartbeat and a retried member's
wait, defined once, 180 s, 60 s and their sum in production, shortened by tests only
through $GRPOCTL_LEASE_S and $GRPOCTL_HEARTBEAT_S, which are range-checked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cli import invoke

from grpoctl.errors import UserError
from grpoctl.registry import Registry
from grpoctl.registry.models import utcnow
from grpoctl.rules import HEARTBEAT_ENV, LEASE_ENV, claim_wait_s, heartbeat_s, lease_s
from grpoctl.train.trainer import Heartbeat


@pytest.fixture(autouse=True)
def no_timings(monkeypatch):
    monkeypatch.delenv(LEASE_ENV, raising=False)
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)


def test_the_production_timings():
    assert (lease_s(), heartbeat_s(), claim_wait_s()) == (180.0, 60.0, 240.0)


def test_a_shorter_lease_shortens_the_heartbeat_and_the_wait_with_it(monkeypatch):
    monkeypatch.setenv(LEASE_ENV, "10")
    assert lease_s() == 10 and heartbeat_s() == pytest.approx(10 / 3) and claim_wait_s() == pytest.approx(40 / 3)
    monkeypatch.setenv(HEARTBEAT_ENV, "3")
    assert (lease_s(), heartbeat_s(), claim_wait_s()) == (10.0, 3.0, 13.0)


@pytest.mark.parametrize(
    ("lease", "heartbeat", "named"),
    [
        ("ten", None, LEASE_ENV),
        ("0", None, LEASE_ENV),
        ("1", None, LEASE_ENV),
        ("-5", None, LEASE_ENV),
        ("nan", None, LEASE_ENV),
        ("inf", None, LEASE_ENV),
        ("100000", None, LEASE_ENV),
        ("10", "4", HEARTBEAT_ENV),  # over a third of the lease: two missed beats would lose it
        ("10", "0.1", HEARTBEAT_ENV),
        (None, "61", HEARTBEAT_ENV),
    ],
)
def test_out_of_range_values_are_one_line(monkeypatch, lease, heartbeat, named):
    for name, value in ((LEASE_ENV, lease), (HEARTBEAT_ENV, heartbeat)):
        if value is not None:
            monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as refused:
        heartbeat_s()
    message = str(refused.value)
    assert message.startswith(f"{named} must be seconds between") and "\n" not in message


def test_a_new_claim_lasts_the_lease(monkeypatch, tmp_path):
    monkeypatch.setenv(LEASE_ENV, "10")
    with Registry(str(tmp_path / "registry.db")) as registry:
        run = registry.create_run(name="r", config={}, config_diff={}, config_hash="h", seed=0, total_steps=1)
        left = run.claim_expires_at - utcnow()
    assert timedelta(seconds=8) < left <= timedelta(seconds=10)


def test_the_trainer_s_heartbeat_follows_it(monkeypatch):
    monkeypatch.setenv(LEASE_ENV, "12")
    assert Heartbeat(registry=None, run_id=1).every_s == 4  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [["train", "loop.n_grpo_steps=1"], ["sweep", "lr", "--values", "1e-4,1e-3"]])
def test_train_and_sweep_refuse_a_bad_value_before_writing_anything(tmp_path, command):
    out = invoke(*command, "--db", str(tmp_path / "registry.db"), cwd=tmp_path, env={LEASE_ENV: "soon"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr == f"error: {LEASE_ENV} must be seconds between 2 and 86400, got 'soon'\n"
    assert list(tmp_path.iterdir()) == []
