"""Sweeps and ablations in the registry: what was asked for, and which runs answer it.

A sweep's members are known by config hash, not by run name: a variant is "done" when
some run has exactly its resolved config, whatever that run is called, so re-running
a sweep skips what exists and `compare` finds the runs even if they were renamed.

These methods are part of `Registry` (mixed in from here to keep store.py short); they
use its `_read()` session and `_writer` engine. Creating a sweep or a member is one
`INSERT ... ON CONFLICT DO NOTHING` followed by a read, so two sweeps started at once
with the same name both end with the same row, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json

from sqlalchemy import select as core_select
from sqlmodel import select

from grpoctl.errors import UserError
from grpoctl.registry.engine import insert_ignoring_conflicts
from grpoctl.registry.models import Run, Sweep, SweepMember, utcnow


class SweepRecords:
    def get_or_create_sweep(self, name: str, kind: str, spec: dict) -> Sweep:
        """The sweep called `name`; created with `spec` if new. An existing one keeps its
        first spec, so re-running a sweep to fill in missing runs changes nothing."""
        values = dict(name=name, kind=kind, spec=json.dumps(spec, default=str), created_at=utcnow())
        with self._writer.begin() as conn:
            insert_ignoring_conflicts(conn, Sweep.__table__, values, "name")
            row = conn.execute(core_select(Sweep.__table__).where(Sweep.name == name)).mappings().one()
        sweep = Sweep(**row)
        if sweep.kind != kind:
            raise UserError(f"'{name}' is already a {sweep.kind}, not a {kind}; pick another name")
        return sweep

    def add_sweep_member(self, sweep_id: int, config_hash: str, variant: str, seed: int) -> SweepMember:
        """Record that the sweep wants this config; adding it again returns the same row."""
        values = dict(sweep_id=sweep_id, config_hash=config_hash, variant=variant, seed=seed)
        table = SweepMember.__table__
        with self._writer.begin() as conn:
            insert_ignoring_conflicts(conn, table, values, "sweep_id", "config_hash")
            row = (
                conn.execute(core_select(table).where(table.c.sweep_id == sweep_id, table.c.config_hash == config_hash))
                .mappings()
                .one()
            )
        return SweepMember(**row)

    def set_sweep_design(self, sweep_id: int, design: dict) -> None:
        """Record a self-sizing sweep's design and the stage it reached (one UPDATE, so a
        sweep stopped at any moment has either the stage before or the one after)."""
        table = Sweep.__table__
        with self._writer.begin() as conn:
            conn.execute(table.update().where(table.c.id == sweep_id).values(design=json.dumps(design, default=str)))

    def get_sweep(self, name: str) -> Sweep:
        with self._read() as session:
            sweep = session.exec(select(Sweep).where(Sweep.name == name)).first()
        if sweep is None:
            raise UserError(f"no sweep or ablation named '{name}'")
        return sweep

    def sweeps(self) -> list[Sweep]:
        """All sweeps and ablations, newest first."""
        with self._read() as session:
            query = select(Sweep).order_by(Sweep.created_at.desc(), Sweep.id.desc())
            return list(session.exec(query))

    def sweep_members(self, name: str) -> list[tuple[SweepMember, Run | None]]:
        """Each member with its run (None if not run yet), in the order they were added.

        A member's run is the run with its config hash; if there are several (the same
        config was also run elsewhere), the one in this sweep's group wins, then the newest.
        """
        sweep = self.get_sweep(name)
        with self._read() as session:
            members = list(
                session.exec(select(SweepMember).where(SweepMember.sweep_id == sweep.id).order_by(SweepMember.id))
            )
        best = self.runs_by_config_hash([m.config_hash for m in members], group=name)
        return [(m, best.get(m.config_hash)) for m in members]

    def runs_by_config_hash(self, hashes: list[str], group: str | None = None) -> dict[str, Run]:
        """{config_hash: run} for the hashes some run has, whichever sweep (if any) made it.

        Where several runs share a hash, the one in `group` wins, then the newest. A sweep
        not yet recorded (a dry run's) finds the arms other sweeps already ran this way,
        as the real sweep does once it has recorded its members."""
        if not hashes:
            return {}
        with self._read() as session:
            runs = session.exec(select(Run).where(Run.config_hash.in_(list(dict.fromkeys(hashes))))).all()

        def preference(run: Run) -> tuple:
            return (group is not None and run.group == group, run.created_at, run.id)

        best: dict[str, Run] = {}
        for run in runs:
            current = best.get(run.config_hash)
            if current is None or preference(run) > preference(current):
                best[run.config_hash] = run
        return best
