"""What supervising sweep members needs from the registry: names, progress, endings,
stop requests and logs. Mixed into `Registry` (store.py), like sweeps.py and claims.py.

A member's supervisor (the sweep's own process, or a Ray task on another machine) starts
a trainer and watches it; when the trainer dies without recording its end (kill -9, the
OOM killer), the supervisor records it, but only if the run's claim is still the dead
process's: `end_abandoned` is a compare-and-set on the claim's holder, so it can never
end a run that someone else has taken over meanwhile.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from sqlalchemy import insert, select, update

from grpoctl.registry.models import Run, RunLog, stored_text, utcnow


class MemberRecords:
    def runs_named(self, names: Iterable[str]) -> dict[str, Run]:
        """{name: run} for those of `names` that are runs (one query, for tables of members)."""
        names = list(names)
        if not names:
            return {}
        with self._read() as session:
            return {run.name: run for run in session.exec(select(Run).where(Run.name.in_(names))).scalars()}

    def names_taken(self, names: Iterable[str]) -> set[str]:
        """The run names in use among `names` and their retries (NAME-r2, NAME-r3, ...)."""
        taken: set[str] = set()
        with self._read() as session:
            for name in names:
                query = select(Run.name).where(Run.name.startswith(name, autoescape=True))
                taken |= set(session.exec(query).scalars())
        return taken

    def end_abandoned(self, run_id: int, pids: Iterable[int], status: str, error: str) -> bool:
        """Let go of a run whose claim is held on this host by one of `pids` (a trainer
        that died, or the supervisor that claimed the run for it); if the run is still
        `running`, its trainer died without saying so, and it is ended with `status`.
        Returns whether it was ended. A compare-and-set on the claim's token: a run taken
        over meanwhile is left alone."""
        with self._writer.begin() as conn:
            row = conn.execute(
                select(Run.status, Run.claim_token, Run.claim_host, Run.claim_pid).where(Run.id == run_id)
            ).first()
            if (
                row is None
                or row.claim_token is None
                or row.claim_host != socket.gethostname()
                or row.claim_pid not in set(pids)
            ):
                return False
            values = dict(claim_token=None, claim_host=None, claim_pid=None, claim_expires_at=None)
            running = row.status == "running"
            if running:
                now = utcnow()
                values |= dict(status=status, error=error, finished_at=now, heartbeat_at=now)
            conn.execute(update(Run).where(Run.id == run_id, Run.claim_token == row.claim_token).values(**values))
        self._released(run_id)
        return running

    # ---- stopping one run ------------------------------------------------------------

    def request_stop(self, run_id: int) -> None:
        """Ask the run's trainer to stop as it does on SIGTERM (it polls `stop_requested`)."""
        with self._writer.begin() as conn:
            conn.execute(update(Run).where(Run.id == run_id).values(stop_requested_at=utcnow()))

    def stop_requested(self, run_id: int) -> bool:
        with self.engine.connect() as conn:
            return conn.scalar(select(Run.stop_requested_at).where(Run.id == run_id)) is not None

    # ---- logs --------------------------------------------------------------------------

    def append_log(self, run_name: str, text: str, host: str | None = None) -> None:
        if not text:
            return
        with self._writer.begin() as conn:
            conn.execute(
                insert(RunLog).values(
                    run_name=run_name, host=host or socket.gethostname(), created_at=utcnow(), text=stored_text(text)
                )
            )

    def log_chunks(self, run_name: str, after_id: int = 0) -> list[tuple[int, str, str]]:
        """(id, host, text) of the run's stored log after chunk `after_id`, in order."""
        query = (
            select(RunLog.id, RunLog.host, RunLog.text)
            .where(RunLog.run_name == run_name, RunLog.id > after_id)
            .order_by(RunLog.id)
        )
        with self.engine.connect() as conn:
            return [tuple(row) for row in conn.execute(query)]

    def last_log_host(self, run_name: str) -> str | None:
        """The machine that stored the run's latest log lines: where its last attempt ran."""
        query = select(RunLog.host).where(RunLog.run_name == run_name).order_by(RunLog.id.desc()).limit(1)
        with self.engine.connect() as conn:
            return conn.scalar(query)
