"""The registry: every run, its metrics, samples, evals and checkpoints, in one database.

`Registry` is the only code that talks SQL. Each write is one short transaction (for
SQLite, `BEGIN IMMEDIATE`: see engine.py), so a sweep's runs can log into the same file
at once while `grpoctl runs` and `grpoctl compare` read it. Hot paths (`log_step`) use
SQLAlchemy Core bulk inserts; everything else uses SQLModel objects, returned detached
so callers can read their fields after the session is gone. Inserts that two processes
may race on (a run name, a sweep, a member, a tag) are single `INSERT ... ON CONFLICT DO
NOTHING` statements, atomic on SQLite and on PostgreSQL at READ COMMITTED. Writes about
a run this process has claimed are fenced by its claim (claims.py). Paths are stored
absolute, so a run can be resumed from any directory.

No torch here: commands that only read the registry must start fast.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, func, insert, update
from sqlmodel import Session, select

import grpoctl
from grpoctl.errors import UserError
from grpoctl.registry.claims import ClaimRecords, ClaimRenewals, aware, retried_when_unreachable
from grpoctl.registry.dashboard import DashboardReads
from grpoctl.registry.engine import (
    default_db_url,
    insert_ignoring_conflicts,
    public_url,
    resolve_url,
    writer_engine,
)
from grpoctl.registry.members import MemberRecords
from grpoctl.registry.models import (
    RUN_STATUSES,
    Checkpoint,
    EvalResult,
    Metric,
    Run,
    RunLog,
    Sample,
    Tag,
    stored_text,
    utcnow,
)
from grpoctl.registry.open import check_registry, open_registry
from grpoctl.registry.summaries import RunSummaries
from grpoctl.registry.sweeps import SweepRecords

__all__ = ["Registry", "STALE_AFTER_S", "default_db_url", "effective_status"]

# A run whose process stopped sending heartbeats this long ago is shown as "stale":
# it was killed without a chance to record its end (OOM killer, power cut, kill -9).
STALE_AFTER_S = 300


def effective_status(run: Run, now: datetime | None = None) -> str:
    """The status to show: "stale" for a "running" run that stopped heartbeating."""
    if run.status != "running":
        return run.status
    if (aware(now or utcnow()) - aware(run.heartbeat_at)).total_seconds() > STALE_AFTER_S:
        return "stale"
    return run.status


def _git_commit() -> str | None:
    """The commit of the code in the current directory, if it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _stored(value: float) -> float | None:
    # SQLite cannot hold NaN (it silently becomes NULL), so NULL *is* NaN, everywhere.
    value = float(value)
    return None if math.isnan(value) else value


def _loaded(value: float | None) -> float:
    return math.nan if value is None else value


def _absolute(path: str | None) -> str | None:
    # Relative to the directory the command runs in, as the user meant it; not resolved,
    # so a symlinked shared checkpoint root keeps the name everyone knows it by.
    return None if path is None else os.path.abspath(path)


class Registry(SweepRecords, ClaimRecords, RunSummaries, MemberRecords, DashboardReads):
    """An experiment registry at a SQLAlchemy URL or SQLite path (default: ./registry.db).

    Sweep methods (get_or_create_sweep, add_sweep_member, sweep_members...) are in
    sweeps.py, the single-writer claim (claim_run, claimable) in claims.py, the reads
    behind tables of runs (run_summaries, eval_curves) in summaries.py, what supervising
    sweep members needs (stop requests, logs, ending abandoned runs) in members.py, the
    dashboard's own reads (`grpoctl ui`) in dashboard.py.

    `must_exist=True`: a missing SQLite file is an error instead of a new registry.
    `readonly=True` is for commands that only read: the registry is opened read-only and
    never created, changed or upgraded (an older schema is refused, naming `grpoctl db
    upgrade`). Otherwise a new registry is created and an older SQLite one upgraded (after
    a backup); see schema.py. Every failure is a one-line UserError (open.py).
    `server=True`: a long-lived reader's pool and statement timeout (`grpoctl ui`).
    """

    def __init__(
        self, url: str | None = None, *, must_exist: bool = False, readonly: bool = False, server: bool = False
    ) -> None:
        self.url = resolve_url(url)
        # `engine` is for reading, by the methods of this package (no SQL lives outside
        # it); every write goes through a method here, on `_writer`, so that it takes
        # the lock up front.
        self.engine = open_registry(self.url, write=not readonly, must_exist=must_exist, server=server)
        self._writer = writer_engine(self.engine)
        self._claims: dict[int, str] = {}
        self._renewals = ClaimRenewals()

    @staticmethod
    def check(url: str | None = None, *, write: bool = True, must_exist: bool = False) -> None:
        """Raise the UserError that opening `url` would raise, creating nothing at all.

        For a command that must not write a byte before all its input is checked: it
        calls this first, and opens the registry (which may create it) only when it is
        about to write. A missing SQLite file passes when its directory could hold it.
        """
        check_registry(resolve_url(url), write=write, must_exist=must_exist)

    @property
    def public_url(self) -> str:
        """The registry's URL without its password (for children's argv, logs and the console)."""
        return public_url(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registry({self.url.render_as_string(hide_password=True)!r})"

    def _read(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def _write(self) -> Session:
        return Session(self._writer, expire_on_commit=False)

    # ---- runs ---------------------------------------------------------------------

    def create_run(
        self,
        *,
        name: str,
        config: dict,
        config_diff: dict,
        config_hash: str,
        seed: int,
        total_steps: int,
        group: str | None = None,
        variant: str | None = None,
        output_dir: str | None = None,
        parent: str | None = None,
        device: str = "cpu",
        data_fingerprint: dict | None = None,
    ) -> Run:
        moment = time.monotonic()  # before the claim's clock reading (claims.ClaimRenewals)
        now = utcnow()
        token = secrets.token_hex(16)
        fields = dict(
            name=name,
            group=group,
            variant=variant,
            config=json.dumps(config, default=str),
            config_diff=json.dumps(config_diff, default=str),
            config_hash=config_hash,
            seed=seed,
            host=socket.gethostname(),
            device=device,
            version=grpoctl.__version__,
            git_commit=_git_commit(),
            output_dir=_absolute(output_dir),
            parent=parent,
            total_steps=total_steps,
            data_fingerprint=json.dumps(data_fingerprint or {}, sort_keys=True),
            created_at=now,
            heartbeat_at=now,
            # The creator is the run's one writer from the first byte (see claims.py).
            **self._claim_values(token),
        )
        values = Run(**fields).model_dump(exclude={"id"})
        with self._writer.begin() as conn:
            run_id = insert_ignoring_conflicts(conn, Run.__table__, values, "name")
        if run_id is None:  # the name was taken, perhaps a moment ago by a process racing us
            raise UserError(f"a run named '{name}' already exists (choose another name)")
        self._claims[run_id] = token
        self._renewals.taken(run_id, moment)
        return Run(id=run_id, **values)

    @retried_when_unreachable(already_done=lambda self, run_id, step, *_, **__: self._recorded_step(run_id) >= step)
    def log_step(
        self,
        run_id: int,
        step: int,
        metrics: dict[str, float],
        opt_metrics: Iterable[tuple[int, dict[str, float]]] = (),
        samples: Iterable[dict] = (),
        eval: dict | list[dict] | None = None,
    ) -> None:
        """Commit one GRPO step: its metrics, per-optimizer-step metrics, samples and eval
        (the EvalResult fields but run and step), if it evaluated; a list when it had more
        than one (the headline eval and a sampled one).

        One transaction, so a step is either fully recorded or absent, and `last_step`
        always names a complete step (resume starts after it): an eval is never left
        without its step. None values are skipped.
        """
        rows = [
            {"run_id": run_id, "step": step, "opt_step": None, "name": k, "value": _stored(v)}
            for k, v in metrics.items()
            if v is not None
        ]
        for opt_step, values in opt_metrics:
            rows.extend(
                {"run_id": run_id, "step": step, "opt_step": opt_step, "name": k, "value": _stored(v)}
                for k, v in values.items()
                if v is not None
            )
        sample_rows = [{"run_id": run_id, "step": step, **{k: stored_text(v) for k, v in s.items()}} for s in samples]
        evals = [] if eval is None else [eval] if isinstance(eval, dict) else eval
        eval_rows = [EvalResult(run_id=run_id, step=step, **row).model_dump(exclude={"id"}) for row in evals]
        with self._writer.begin() as conn:
            self._fence(conn, run_id, last_step=step, heartbeat_at=utcnow())
            if rows:
                conn.execute(insert(Metric), rows)
            if sample_rows:
                conn.execute(insert(Sample), sample_rows)
            if eval_rows:
                conn.execute(insert(EvalResult), eval_rows)

    def _has_checkpoint(self, run_id: int, step: int, path: str) -> bool:
        with self.engine.connect() as conn:
            query = select(Checkpoint.id).where(
                Checkpoint.run_id == run_id, Checkpoint.step == step, Checkpoint.path == _absolute(path)
            )
            return conn.scalar(query) is not None

    @retried_when_unreachable()
    def heartbeat(self, run_id: int) -> None:
        """The trainer is alive: renews its claim's lease (and fails if it was lost)."""
        with self._writer.begin() as conn:
            self._fence(conn, run_id, heartbeat_at=utcnow())

    @retried_when_unreachable(already_done=lambda self, run_id, status, *_, **__: self._ended_as(run_id, status))
    def set_status(self, run_id: int, status: str, error: str | None = None, pid: int | None = None) -> None:
        """Record a run's status; `pid` names the process that now owns a running run.

        A status other than "running" ends the run's claim: it can be resumed at once.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {RUN_STATUSES}")
        now = utcnow()
        finished_at = None if status == "running" else now  # "running" again on resume
        values = dict(
            status=status,
            error=error,
            finished_at=finished_at,
            heartbeat_at=now,
            **({"pid": pid} if pid is not None else {}),
        )
        with self._writer.begin() as conn:
            self._fence(conn, run_id, **values)
            if status != "running":
                conn.execute(
                    update(Run)
                    .where(Run.id == run_id)
                    .values(claim_token=None, claim_host=None, claim_pid=None, claim_expires_at=None)
                )
        if status != "running":
            self._released(run_id)

    @retried_when_unreachable()
    def truncate_after(self, run_id: int, step: int) -> list[str]:
        """Forget everything a run recorded after `step`, so a resume can redo it.

        Returns the paths of the checkpoint rows removed (their files are the caller's).
        """
        with self._writer.begin() as conn:
            self._fence(conn, run_id, last_step=step)
            later = (Checkpoint.run_id == run_id) & (Checkpoint.step > step)
            paths = list(conn.scalars(select(Checkpoint.path).where(later)))
            for table in (Metric, Sample, EvalResult, Checkpoint):
                conn.execute(delete(table).where(table.run_id == run_id, table.step > step))
        return paths

    def delete_run(self, run_ref: str | int) -> list[str]:
        """Delete a run and all its rows. Returns the paths it had on disk (checkpoints,
        then output_dir) for the caller to remove: the registry never touches files."""
        run = self.get_run(run_ref)
        with self._writer.begin() as conn:
            paths = list(conn.scalars(select(Checkpoint.path).where(Checkpoint.run_id == run.id)))
            for table in (Metric, Sample, EvalResult, Checkpoint, Tag):
                conn.execute(delete(table).where(table.run_id == run.id))
            conn.execute(delete(RunLog).where(RunLog.run_name == run.name))
            conn.execute(delete(Run).where(Run.id == run.id))
        return paths + ([run.output_dir] if run.output_dir else [])

    def get_run(self, ref: str | int) -> Run:
        """A run by id, exact name, or a prefix of its name that only it has."""
        text = str(ref).strip()
        with self._read() as session:
            if text.isdigit() and (run := session.get(Run, int(text))) is not None:
                return run
            if (run := session.exec(select(Run).where(Run.name == text)).first()) is not None:
                return run
            matches = session.exec(
                select(Run).where(Run.name.startswith(text, autoescape=True)).order_by(Run.name)
            ).all()
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise UserError(f"no run named '{text}'")
        names = ", ".join(r.name for r in matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise UserError(f"'{text}' matches {len(matches)} runs: {names}")

    def list_runs(
        self,
        group: str | None = None,
        status: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
    ) -> list[Run]:
        """Runs, newest first. `status="stale"` finds running runs that stopped beating."""
        query = select(Run).order_by(Run.created_at.desc(), Run.id.desc())
        if group is not None:
            query = query.where(Run.group == group)
        if status is not None:
            query = query.where(Run.status == ("running" if status == "stale" else status))
        if tag is not None:
            query = query.where(Run.id.in_(select(Tag.run_id).where(Tag.tag == tag)))
        computed = status in ("stale", "running")  # staleness is computed, not stored
        if limit is not None and not computed:
            query = query.limit(limit)
        with self._read() as session:
            runs = list(session.exec(query).all())
        if computed:
            runs = [r for r in runs if effective_status(r) == status]
        return runs[:limit] if limit is not None else runs

    def runs_in_group(self, group: str) -> list[Run]:
        """A sweep's or ablation's runs, oldest first (the order they were launched)."""
        with self._read() as session:
            query = select(Run).where(Run.group == group).order_by(Run.created_at, Run.id)
            return list(session.exec(query).all())

    # ---- metrics and samples ------------------------------------------------------

    def metric_series(
        self, run_id: int, names: Iterable[str] | None = None, per_opt_step: bool = False
    ) -> dict[str, list[tuple[int, float]]]:
        """{name: [(step, value), ...]} in step order; NaN comes back as float("nan").

        With `per_opt_step=True`, the per-optimizer-step figures instead, as
        (opt_step, value) pairs; opt_step is whatever index the trainer logged.
        """
        query = select(Metric.name, Metric.step, Metric.opt_step, Metric.value).where(Metric.run_id == run_id)
        if names is not None:
            query = query.where(Metric.name.in_(list(names)))
        if per_opt_step:
            query = query.where(Metric.opt_step.is_not(None)).order_by(Metric.step, Metric.opt_step)
        else:
            query = query.where(Metric.opt_step.is_(None)).order_by(Metric.step)
        series: dict[str, list[tuple[int, float]]] = {}
        with self.engine.connect() as conn:
            for name, step, opt_step, value in conn.execute(query):
                x = opt_step if per_opt_step else step
                series.setdefault(name, []).append((x, _loaded(value)))
        return series

    def last_metrics(self, run_ids: Iterable[int], names: Iterable[str] | None = None) -> dict[int, dict[str, float]]:
        """{run_id: {name: value at the last step that logged it}}, for tables of runs."""
        run_ids = list(run_ids)
        # The filter is on both sides of the join: with it on the inner side alone,
        # PostgreSQL's planner hash-joins the whole metric table (90 ms for 100 runs x 200
        # steps, against 30 ms).
        wanted = [Metric.run_id.in_(run_ids), Metric.opt_step.is_(None)]
        if names is not None:
            wanted.append(Metric.name.in_(list(names)))
        last = (
            select(Metric.run_id, Metric.name, func.max(Metric.step).label("step"))
            .where(*wanted)
            .group_by(Metric.run_id, Metric.name)
            .subquery()
        )
        query = (
            select(Metric.run_id, Metric.name, Metric.value)
            .join(
                last,
                (Metric.run_id == last.c.run_id) & (Metric.name == last.c.name) & (Metric.step == last.c.step),
            )
            .where(*wanted)
        )
        out: dict[int, dict[str, float]] = {run_id: {} for run_id in run_ids}
        with self.engine.connect() as conn:
            for run_id, name, value in conn.execute(query):
                out[run_id][name] = _loaded(value)
        return out

    def samples(
        self,
        run_id: int,
        step: int | None = None,
        kind: str | None = None,
        limit: int | None = None,
    ) -> list[Sample]:
        """Stored completions, latest step first (in logging order within a step)."""
        query = select(Sample).where(Sample.run_id == run_id)
        if step is not None:
            query = query.where(Sample.step == step)
        if kind is not None:
            query = query.where(Sample.kind == kind)
        query = query.order_by(Sample.step.desc(), Sample.id).limit(limit)
        with self._read() as session:
            return list(session.exec(query).all())

    # ---- evals, checkpoints, tags -------------------------------------------------

    def add_eval(self, **fields) -> EvalResult:
        if isinstance(fields.get("decoding"), dict):
            fields["decoding"] = json.dumps(fields["decoding"], sort_keys=True)
        result = EvalResult(**fields)
        with self._write() as session, session.begin():
            if result.run_id is not None:
                self._fence(session.connection(), result.run_id)
            session.add(result)
        return result

    def evals(self, run_id: int) -> list[EvalResult]:
        with self._read() as session:
            query = select(EvalResult).where(EvalResult.run_id == run_id)
            return list(session.exec(query.order_by(EvalResult.step, EvalResult.id)).all())

    @retried_when_unreachable(
        already_done=lambda self, run_id, step, path, *_, **__: self._has_checkpoint(run_id, step, path)
    )
    def add_checkpoint(self, run_id: int, step: int, path: str, eval_accuracy: float | None = None) -> Checkpoint:
        checkpoint = Checkpoint(run_id=run_id, step=step, path=_absolute(path), eval_accuracy=eval_accuracy)
        with self._write() as session, session.begin():
            self._fence(session.connection(), run_id)
            session.add(checkpoint)
        return checkpoint

    @retried_when_unreachable()
    def mark_checkpoint_deleted(self, checkpoint_id: int) -> None:
        with self._writer.begin() as conn:
            run_id = conn.scalar(select(Checkpoint.run_id).where(Checkpoint.id == checkpoint_id))
            if run_id is not None:
                self._fence(conn, run_id)
            query = update(Checkpoint).where(Checkpoint.id == checkpoint_id)
            conn.execute(query.values(deleted=True))

    @retried_when_unreachable()  # a trainer's retention reads it after each checkpoint
    def checkpoints(self, run_id: int, include_deleted: bool = False) -> list[Checkpoint]:
        query = select(Checkpoint).where(Checkpoint.run_id == run_id)
        if not include_deleted:
            query = query.where(Checkpoint.deleted == False)  # noqa: E712 (SQL, not Python)
        with self._read() as session:
            return list(session.exec(query.order_by(Checkpoint.step, Checkpoint.id)).all())

    def add_tag(self, run_ref: str | int, tag: str) -> None:
        """Tag a run; tagging twice is fine."""
        run = self.get_run(run_ref)
        with self._writer.begin() as conn:
            insert_ignoring_conflicts(conn, Tag.__table__, {"run_id": run.id, "tag": tag}, "run_id", "tag")

    def remove_tag(self, run_ref: str | int, tag: str) -> None:
        run = self.get_run(run_ref)
        with self._writer.begin() as conn:
            gone = conn.execute(delete(Tag).where(Tag.run_id == run.id, Tag.tag == tag))
            if gone.rowcount == 0:
                raise UserError(f"run '{run.name}' has no tag '{tag}'")

    def tags(self, run_id: int) -> list[str]:
        with self._read() as session:
            return list(session.exec(select(Tag.tag).where(Tag.run_id == run_id).order_by(Tag.tag)))
