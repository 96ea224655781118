"""The reads behind `grpoctl ui` that no command made before: one metric of many runs,
the metric names a set of runs recorded, tags and sample steps of many runs at once,
completions filtered right or wrong, and the schema revision the server started on.

Every read is a SELECT, in a fixed number of queries whatever the number of runs (a
poll of the dashboard must stay cheap while a sweep trains). Mixed into Registry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sqlmodel import select

from grpoctl.registry import schema
from grpoctl.registry.models import Metric, Sample, Tag
from grpoctl.registry.summaries import fetch_rows


class DashboardReads:
    """Mixed into Registry: what the dashboard's JSON API reads."""

    def metric_of_runs(
        self, run_ids: Iterable[int], name: str, after_step: int | None = None
    ) -> dict[int, list[tuple[int, float]]]:
        """{run_id: [(step, value)] in step order} of one per-step metric (NaN as nan),
        only the steps after `after_step` when it is given: one query."""
        ids = list(run_ids)
        out: dict[int, list[tuple[int, float]]] = {run_id: [] for run_id in ids}
        if not ids:
            return out
        query = select(Metric.run_id, Metric.step, Metric.value).where(
            Metric.run_id.in_(ids), Metric.name == name, Metric.opt_step.is_(None)
        )
        if after_step is not None:
            query = query.where(Metric.step > after_step)
        with self.engine.connect() as conn, conn.begin():
            for run_id, step, value in fetch_rows(conn, query):
                out[run_id].append((step, math.nan if value is None else value))
        for points in out.values():
            points.sort()
        return out

    def metric_names(self, run_ids: Iterable[int]) -> list[str]:
        """Every metric name the runs recorded, sorted. (Per-optimizer-step figures are
        also summarised per step under their name, so opt_step is not asked: the query
        reads the (run_id, name, step) index alone.)"""
        ids = list(run_ids)
        if not ids:
            return []
        query = select(Metric.name).where(Metric.run_id.in_(ids)).distinct()
        with self.engine.connect() as conn:
            return sorted(name for (name,) in fetch_rows(conn, query))

    def tags_of(self, run_ids: Iterable[int]) -> dict[int, list[str]]:
        """{run_id: its tags, sorted}, in one query."""
        ids = list(run_ids)
        out: dict[int, list[str]] = {run_id: [] for run_id in ids}
        if not ids:
            return out
        with self.engine.connect() as conn:
            for run_id, tag in conn.execute(select(Tag.run_id, Tag.tag).where(Tag.run_id.in_(ids)).order_by(Tag.tag)):
                out[run_id].append(tag)
        return out

    def sample_steps(self, run_id: int) -> list[int]:
        """The steps at which a run stored completions, in order."""
        query = select(Sample.step).where(Sample.run_id == run_id).distinct().order_by(Sample.step)
        with self.engine.connect() as conn:
            return [step for (step,) in conn.execute(query)]

    def samples_where(
        self, run_id: int, step: int, kind: str | None = None, correct: bool | None = None, limit: int = 50
    ) -> list[Sample]:
        """A step's completions in logging order; `correct`: only those whose answer was
        right (answer_reward > 0) or only the wrong ones."""
        query = select(Sample).where(Sample.run_id == run_id, Sample.step == step)
        if kind is not None:
            query = query.where(Sample.kind == kind)
        if correct is True:
            query = query.where(Sample.answer_reward > 0)
        elif correct is False:
            query = query.where(Sample.answer_reward <= 0)
        with self._read() as session:
            return list(session.exec(query.order_by(Sample.id).limit(limit)).all())

    def schema_revision(self) -> str:
        """The registry's schema revision now (schema.revision_of): a long-lived reader
        checks it did not change under it (a newer grpoctl upgraded the file)."""
        with self.engine.connect() as conn:
            return schema.revision_of(conn)
