"""The retry of a claimed write whose connection was lost (registry/claims.py,
retried_when_unreachable): what it retries, for how long, and what it never writes twice.
The end-to-end cases (a real restart and outages under a trainer) are in
tests/test_registry_outage.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from sqlalchemy.exc import OperationalError

from grpoctl.registry.claims import (
    RETRY_PAUSE_S,
    SAY_AND_EXIT_S,
    ClaimRenewals,
    RegistryUnreachable,
    retried_when_unreachable,
)


class Store:
    """A registry stand-in: `failures` lost connections, then the write goes through."""

    def __init__(self, failures: int, dialect: str = "postgresql", committed_anyway: bool = False) -> None:
        self.engine = SimpleNamespace(dialect=SimpleNamespace(name=dialect))
        self.failures, self.committed_anyway = failures, committed_anyway
        self.attempts, self.rows = 0, []
        self._renewals = ClaimRenewals()
        self.fenced_at = 0.0  # the time.monotonic() its fences note (the clock is the tests')

    @retried_when_unreachable(already_done=lambda self, step: step in self.rows)
    def log_step(self, step: int) -> None:
        self.attempts += 1
        self._renewals.fencing(1, self.fenced_at)  # as Registry._fence does, for run 1's claim
        if self.attempts <= self.failures:
            if self.committed_anyway:  # the COMMIT went through; its answer was lost
                self.rows.append(step)
            raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly\nmore"))
        self.rows.append(step)


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    monkeypatch.setenv("GRPOCTL_LEASE_S", "3")  # retried for 2 s
    monkeypatch.setattr("grpoctl.registry.claims.time.sleep", lambda s: None)


def test_a_lost_connection_is_retried_until_the_write_goes_through(caplog):
    store = Store(failures=3)
    with caplog.at_level(logging.WARNING, logger="grpoctl"):
        store.log_step(4)
    assert store.rows == [4] and store.attempts == 4
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "registry: unreachable (server closed the connection unexpectedly); retrying for up to 2.0 s"
    assert said[1].startswith("registry: reached again after") and len(said) == 2


def test_a_commit_whose_answer_was_lost_is_not_written_again():
    store = Store(failures=1, committed_anyway=True)
    store.log_step(4)
    assert store.rows == [4] and store.attempts == 1  # the retry saw the step recorded


def test_past_the_bound_the_trainer_stops_in_one_line(monkeypatch):
    clock = iter(x * RETRY_PAUSE_S for x in range(1000))
    monkeypatch.setattr("grpoctl.registry.claims.time.monotonic", lambda: next(clock))
    store = Store(failures=10_000)
    with pytest.raises(RegistryUnreachable) as caught:
        store.log_step(4)
    assert store.attempts == 5  # 0, 0.5, ..., 2.0 s: the last one past the bound
    assert str(caught.value) == (
        "the registry was unreachable for 2.0 s (server closed the connection unexpectedly): "
        "stopped without writing more; the run resumes from its last checkpoint"
    )
    assert caught.value.exit_code == 75 and store.rows == []


def test_a_trainer_stops_retrying_before_its_claim_could_lapse(monkeypatch):
    """Lease 6 s (link 2 s, retried for 4 s): a claim last renewed at 0 s lapses at 6 s, so
    the write that fails from 0.5 s on is given up at the first look past 6 - 2 - 0.5 - 1 =
    2.5 s (one more pause and a whole attempt, then a second to say so and exit), before
    registry_retry_s (4 s after its first failure) would have ended it."""
    clock = iter(x * RETRY_PAUSE_S for x in range(1, 1000))
    monkeypatch.setattr("grpoctl.registry.claims.time.monotonic", lambda: next(clock))
    monkeypatch.setenv("GRPOCTL_LEASE_S", "6")
    assert 6 - 2 - RETRY_PAUSE_S - SAY_AND_EXIT_S == 2.5
    held, unclaimed = Store(failures=10_000), Store(failures=10_000)
    held._renewals.taken(1, 0.0)
    with pytest.raises(RegistryUnreachable):
        held.log_step(4)
    assert held.attempts == 5  # failures seen at 0.5, 1.0, ... 2.5 s: given up there
    clock = iter(x * RETRY_PAUSE_S for x in range(1, 1000))
    with pytest.raises(RegistryUnreachable):
        unclaimed.log_step(4)  # no claim to lose: registry_retry_s alone, 4 s from 0.5 s
    assert unclaimed.attempts == 9


def test_only_a_fence_whose_commit_came_back_renews_the_claim():
    store = Store(failures=0)  # lease 3 s
    store._renewals.taken(1, 0.0)
    store.fenced_at = 10.0
    store.log_step(4)  # fenced at 10 s, and committed
    assert store._renewals.lapse_at() == 13.0
    store._renewals.begin()
    store._renewals.fencing(1, 20.0)  # a fence whose commit never came back
    assert store._renewals.lapse_at() == 13.0
    store._renewals.forget(1)  # released: no claim held, no lapse to stop before
    assert store._renewals.lapse_at() is None


def test_sqlite_errors_are_not_retried():
    store = Store(failures=1, dialect="sqlite")
    with pytest.raises(OperationalError):
        store.log_step(4)
    assert store.attempts == 1


@pytest.mark.parametrize(
    "said, expected",
    [
        (
            'connection to server at "192.0.2.10", port 5432 failed: Permission denied',
            "cannot connect to PostgreSQL at 192.0.2.10:5432: no route to it from this machine",
        ),
        (
            'connection to server at "192.0.2.10", port 5432 failed: No route to host',
            "cannot connect to PostgreSQL at 192.0.2.10:5432: no route to it from this machine",
        ),
        ("permission denied for table run", "user 'grpo' may not do this in database 'g' at 192.0.2.10:5432"),
    ],
)
def test_a_route_that_refuses_is_not_mistaken_for_a_missing_privilege(said, expected):
    from sqlalchemy.engine import make_url

    from grpoctl.registry.open import describe_error

    assert describe_error(Exception(said), make_url("postgresql+psycopg://grpo@192.0.2.10/g")).startswith(expected)


@pytest.mark.parametrize(
    "url, said, expected",
    [
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            "Connection refused",
            "cannot connect to PostgreSQL at 192.0.2.10:5432: connection refused (is the server running?)",
        ),
        (
            "postgresql+psycopg://grpo:s3cret@192.0.2.10/g",
            'password authentication failed for user "grpo" s3cret',
            "PostgreSQL at 192.0.2.10:5432 refused user 'grpo': password authentication failed",
        ),
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            "fe_sendauth: no password supplied",
            "PostgreSQL at 192.0.2.10:5432 wants a password for user 'grpo'",
        ),
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            'database "g" does not exist',
            "PostgreSQL at 192.0.2.10:5432 has no database 'g' (create it, e.g. `createdb g`)",
        ),
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            'role "grpo" does not exist',
            "PostgreSQL at 192.0.2.10:5432 has no user 'grpo'",
        ),
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            "timeout expired",
            "cannot connect to PostgreSQL at 192.0.2.10:5432: timed out",
        ),
        (
            "postgresql+psycopg://grpo@192.0.2.10/g",
            "server closed the connection {0}",
            "PostgreSQL at 192.0.2.10:5432, database 'g': server closed the connection {0}",
        ),
        ("sqlite:////tmp/r.db", "file is not a database", "registry /tmp/r.db is corrupt or not a SQLite database"),
        ("sqlite:////tmp/r.db", "attempt to write a readonly database", "registry /tmp/r.db is read-only"),
        ("sqlite:////tmp/r.db", "unable to open database file", "cannot open registry /tmp/r.db"),
        ("sqlite:////tmp/r.db", "database is locked", "registry /tmp/r.db stayed locked by another process"),
        ("sqlite:////tmp/r.db", "disk I/O error", "registry /tmp/r.db: disk I/O error"),
    ],
)
def test_each_driver_message_becomes_its_line_and_never_shows_the_password(url, said, expected):
    from sqlalchemy.engine import make_url

    from grpoctl.registry.open import describe_error

    line = describe_error(Exception(said), make_url(url))
    assert line.startswith(expected) and "s3cret" not in line


@pytest.mark.parametrize(
    "url, said, exit_code",
    [
        ("postgresql+psycopg://grpo@192.0.2.10/g", "connection failed: Connection refused", 75),
        ("postgresql+psycopg://grpo@192.0.2.10/g", "FATAL: the database system is starting up", 75),
        ("postgresql+psycopg://grpo@192.0.2.10/g", "terminating connection due to administrator command", 75),
        ("postgresql+psycopg://grpo@192.0.2.10/g", "timeout expired", 75),
        ("postgresql+psycopg://grpo:s3cret@192.0.2.10/g", 'password authentication failed for user "grpo"', 2),
        ("postgresql+psycopg://grpo@192.0.2.10/g", 'database "g" does not exist', 2),
        ("sqlite:////tmp/r.db", "database is locked", 2),
    ],
)
def test_a_server_that_did_not_answer_is_a_temporary_failure(url, said, exit_code):
    """A PostgreSQL server that did not answer exits 75, so that a sweep member whose
    trainer met a restart at its start is tried again (sweep/member.py); what the user must
    fix (a password, a database name) stays exit 2. The line is describe_error's either way."""
    from sqlalchemy.engine import make_url

    from grpoctl.registry.open import describe_error, registry_error

    exc = OperationalError("SELECT 1", {}, Exception(said))
    error = registry_error(exc, make_url(url))
    assert error.exit_code == exit_code and str(error) == describe_error(exc, make_url(url))
