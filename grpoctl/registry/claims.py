"""Exactly one writer per run: a claim taken by compare-and-set, checked by every commit.

`grpoctl train` takes the claim of the run it creates (in the same INSERT), and
`--resume` takes it with `claim_run`: an UPDATE that succeeds only if the token in the
row is still the one it read, so of two processes racing for a run exactly one wins,
on SQLite (where BEGIN IMMEDIATE serializes writers) and on PostgreSQL (where the
UPDATE's row lock does, at READ COMMITTED) alike. The claim is a random token, the
holder's host and pid, and a lease: it expires `lease_s()` after the last renewal.

Every commit of a claimed run (a step, an eval, a checkpoint, a status, a heartbeat)
starts with `_fence`: an UPDATE of the run row WHERE claim_token = ours, which renews the
lease. If it matches no row, another process has taken the run over, and the commit is
abandoned before anything else is written: `ClaimLost`, which stops the trainer. So even a
trainer that was only presumed dead (a frozen node, a partitioned network) can never
write beside its successor; the unique index on step keys is the backstop under this.

The lease: the trainer's heartbeat renews it every 60 s (each step commit does too), and
it lasts 180 s, so two heartbeats in a row may fail (a busy database) before the claim is
lost (both timings live in grpoctl/rules.py, where tests may shorten them). It can be
taken over when it has expired, from any host: a retry of a dead run on another node
waits at most the lease (`stale`, shown after 300 s without a heartbeat, is for people
and comes later). On the holder's own host a claim whose process no longer
exists can be taken at once, and so can a claim held by the caller's parent process: a
sweep member's supervisor claims the run (fencing out any trainer a dead machine left
behind) and then starts the trainer that resumes it, which takes the claim over. Clocks
of hosts sharing a registry must agree to within a few seconds (NTP), since each
compares the lease with its own.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import select, text, update
from sqlalchemy.exc import InterfaceError, OperationalError

from grpoctl.errors import TEMPFAIL_EXIT, UserError
from grpoctl.registry.models import Run, utcnow
from grpoctl.rules import lease_s, registry_link_s, registry_retry_s

log = logging.getLogger("grpoctl")
RETRY_PAUSE_S = 0.5
# How long a trainer needs, after its last attempt at a lost registry failed, to say so and
# exit: it stops retrying this long (plus a pause and an attempt) before its claim could lapse.
SAY_AND_EXIT_S = 1.0
Write = TypeVar("Write", bound=Callable[..., Any])


class ClaimLost(UserError):
    """Another process holds the run now; this one must stop without writing more."""


class RegistryUnreachable(UserError):
    """A claimed write kept failing on a lost connection for rules.registry_retry_s(): the
    trainer stops where it is; its claim lapses and a retry resumes the run from its last
    checkpoint (a sweep member does so itself, told by the exit code)."""

    exit_code = TEMPFAIL_EXIT


def retried_when_unreachable(already_done: Callable[..., bool] | None = None) -> Callable[[Write], Write]:
    """Retry a claimed write (or a read a trainer's step needs) to a PostgreSQL registry
    that failed on a lost connection (a restart, an outage, a partition noticed through
    rules.registry_link_s()), for up to rules.registry_retry_s(), and never past the moment
    a claim this process holds could lapse (`ClaimRenewals.lapse_at`, less the time of one
    more attempt and SAY_AND_EXIT_S): then it raises RegistryUnreachable, so a trainer cut
    off from the registry has stopped, and said why, before another machine may take its
    run over. Each retry is a new transaction that fences first, so a claim lost meanwhile
    stops it (ClaimLost), and `already_done(self, *args)` tells a write whose COMMIT went
    through before the link broke (its answer did not come back), which must not be
    written twice. SQLite's own errors are not retried."""

    def wrap(write: Write) -> Write:
        @functools.wraps(write)
        def retrying(self, *args, **kwargs):
            started: float | None = None
            until: float | None = None
            renewals: ClaimRenewals = self._renewals
            while True:
                try:
                    renewals.begin()
                    if started is not None and already_done is not None and already_done(self, *args, **kwargs):
                        result = None
                    else:
                        result = write(self, *args, **kwargs)
                    renewals.committed()
                    if started is not None:
                        log.warning(f"registry: reached again after {time.monotonic() - started:.1f} s")
                    return result
                except (OperationalError, InterfaceError) as exc:
                    if self.engine.dialect.name != "postgresql":
                        raise
                    now = time.monotonic()
                    if started is None or until is None:
                        started, until = now, now + registry_retry_s()
                        lapse = renewals.lapse_at()
                        if lapse is not None:  # one more attempt and a second to say so, before it lapses
                            until = min(until, lapse - registry_link_s() - RETRY_PAUSE_S - SAY_AND_EXIT_S)
                        log.warning(
                            f"registry: unreachable ({_first_line(exc)}); "
                            f"retrying for up to {max(0.0, until - now):.1f} s"
                        )
                    if now >= until:
                        raise RegistryUnreachable(
                            f"the registry was unreachable for {now - started:.1f} s ({_first_line(exc)}): "
                            "stopped without writing more; the run resumes from its last checkpoint"
                        ) from exc
                    time.sleep(RETRY_PAUSE_S)

        return retrying  # type: ignore[return-value]

    return wrap


class ClaimRenewals:
    """When this process last renewed each claim it holds, as far as it knows for sure:
    the moment (time.monotonic()) a fence began, counted once its commit came back. The
    lease runs from the renewal's own clock reading, taken after that moment, so the claim
    cannot lapse before `lapse_at()`. Fences are collected per thread (a trainer's
    heartbeat and its steps commit side by side) and count only when their commit does."""

    def __init__(self) -> None:
        self._renewed: dict[int, float] = {}
        self._fencing = threading.local()

    def taken(self, run_id: int, moment: float) -> None:
        """The claim of `run_id` was taken (or renewed) by a commit that began at `moment`."""
        self._renewed[run_id] = max(moment, self._renewed.get(run_id, moment))

    def forget(self, run_id: int) -> None:
        self._renewed.pop(run_id, None)

    def begin(self) -> None:
        """A commit begins on this thread: no fence of it counts yet."""
        self._fencing.runs = []

    def fencing(self, run_id: int, moment: float) -> None:
        runs = getattr(self._fencing, "runs", None)
        if runs is not None:
            runs.append((run_id, moment))

    def committed(self) -> None:
        """The commit this thread began came back: its fences renewed their claims."""
        for run_id, moment in getattr(self._fencing, "runs", None) or []:
            self.taken(run_id, moment)
        self._fencing.runs = None

    def lapse_at(self) -> float | None:
        """The earliest moment (time.monotonic()) a claim this process holds could lapse."""
        renewed = list(self._renewed.values())
        return min(renewed) + lease_s() if renewed else None


def _first_line(exc: OperationalError | InterfaceError) -> str:
    """The driver's own words, without SQLAlchemy's "(Background on this error at: ...)"."""
    return (str(exc.orig or exc).strip().splitlines() or [type(exc).__name__])[0]


def aware(moment: datetime) -> datetime:
    """`moment` with its time zone: UTC where the database returned none (SQLite)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _process_gone(host: str | None, pid: int | None) -> bool:
    """True when `pid` ran on this host and no longer exists (so its claim is dead)."""
    if not pid or host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def _handed_to_us(host: str | None, pid: int | None) -> bool:
    """True when the claim is held by this process's parent: a sweep member's supervisor
    claims a run before it starts the trainer that resumes it, then hands the claim on."""
    return bool(pid) and host == socket.gethostname() and pid == os.getppid()


def claim_refusal(run: Run, now: datetime | None = None) -> str | None:
    """Why `run` cannot be claimed now (its holder is alive as far as we can tell), or None."""
    now = aware(now or utcnow())
    if run.claim_token is None:
        if run.status != "running":
            return None
        # Written by a grpoctl from before claims: its heartbeat is all we have.
        expires = aware(run.heartbeat_at) + timedelta(seconds=lease_s())
        host, pid = run.host, run.pid
    else:
        expires = aware(run.claim_expires_at) if run.claim_expires_at else now
        host, pid = run.claim_host, run.claim_pid
    if now >= expires or _process_gone(host, pid) or _handed_to_us(host, pid):
        return None
    left = int((expires - now).total_seconds()) + 1
    return (
        f"run '{run.name}' is being written by pid {pid} on {host} (its claim expires in {left} s "
        "unless that process renews it)"
    )


class ClaimRecords:
    """Mixed into Registry; `_claims` maps the run ids this process claimed to their tokens
    (held, or lost to a takeover; a claim released by ending the run is forgotten)."""

    _claims: dict[int, str]
    _renewals: ClaimRenewals

    def claimable(self, run: Run) -> bool:
        return claim_refusal(run) is None

    def claim_run(self, run_id: int) -> None:
        """Take the run's claim, or raise UserError naming who holds it."""
        moment = time.monotonic()
        with self._write() as session, session.begin():
            run = session.get(Run, run_id)
            if run is None:
                raise UserError(f"no run with id {run_id}")
            # A resumer that read the run before a racing one finished it must not train it again.
            refusal = f"run '{run.name}' already finished" if run.status == "finished" else claim_refusal(run)
            if refusal:
                raise UserError(refusal)
            token = secrets.token_hex(16)
            taken = session.connection().execute(
                update(Run)
                .where(Run.id == run_id, Run.claim_token.is_not_distinct_from(run.claim_token))
                .values(**self._claim_values(token))
            )
            if taken.rowcount != 1:  # someone else's compare-and-set got there first: name them
                session.expire_all()
                now_held = session.get(Run, run_id)
                raise UserError(
                    claim_refusal(now_held)
                    if now_held is not None and claim_refusal(now_held)
                    else f"run '{run.name}' was just claimed by another process"
                )
        self._claims[run_id] = token
        self._renewals.taken(run_id, moment)

    def _claim_values(self, token: str) -> dict:
        pid = os.getpid()
        # A new claim is a new start: an old stop request is answered (the run ended).
        return dict(
            claim_token=token,
            claim_host=socket.gethostname(),
            claim_pid=pid,
            pid=pid,
            claim_expires_at=utcnow() + timedelta(seconds=lease_s()),
            stop_requested_at=None,
        )

    def _fence(self, conn, run_id: int, **values) -> None:
        """The first statement of every commit about a run: if this process holds the
        run's claim, prove it still does (and renew the lease) or abandon the commit."""
        token = self._claims.get(run_id)
        if token is None:
            if values:
                conn.execute(update(Run).where(Run.id == run_id).values(**values))
            return
        self._renewals.fencing(run_id, time.monotonic())
        values["claim_expires_at"] = utcnow() + timedelta(seconds=lease_s())
        if conn.dialect.name == "postgresql":
            # No statement of a claimed write may outlast the link's bound either (a lock
            # held by a stuck session, a server crawling after a restart).
            conn.execute(text(f"SET LOCAL statement_timeout = {int(registry_link_s() * 1000)}"))
        kept = conn.execute(update(Run).where(Run.id == run_id, Run.claim_token == token).values(**values))
        if kept.rowcount != 1:
            # The lost token stays in `_claims`: every later write about this run (from
            # any thread of this process) fails the same way, none goes through unfenced.
            holder = conn.execute(select(Run.name, Run.claim_host, Run.claim_pid).where(Run.id == run_id)).first()
            name, host, pid = holder if holder else (run_id, None, None)
            by = f" by pid {pid} on {host}" if pid else ""
            raise ClaimLost(
                f"run '{name}' was taken over{by} after this process's claim expired: stopped without writing more"
            )

    def _recorded_step(self, run_id: int) -> int:
        """The run's last complete step, as committed (for a retried step commit)."""
        with self.engine.connect() as conn:
            return conn.scalar(select(Run.last_step).where(Run.id == run_id))

    def _ended_as(self, run_id: int, status: str) -> bool:
        """Whether a retried set_status had committed already: the run ended so and let go."""
        if status == "running":
            return False  # idempotent: the retry writes it again
        with self.engine.connect() as conn:
            row = conn.execute(select(Run.status, Run.claim_token).where(Run.id == run_id)).first()
        return row is not None and row[0] == status and row[1] is None

    def _released(self, run_id: int) -> None:
        self._claims.pop(run_id, None)
        self._renewals.forget(run_id)
