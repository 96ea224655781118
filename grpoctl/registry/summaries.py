"""What tables of many runs read: each run's eval curve, chosen series, median step time
and peak memory, fetched for all the runs at once (never a query per run).

`compare` runs while sweeps train and must answer in under a second for 100 runs x 200
steps x 30 metrics (benchmarks/bench_compare.py), start-up included: the rows come through
SQLAlchemy Core straight off the DBAPI cursor, only for the metrics asked for, and the
aggregates (median, max) are computed in SQL. Mixed into Registry (store.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select

from grpoctl import metrics
from grpoctl.registry.models import COMPARABLE_EVAL_FIELDS, EVAL_KINDS, EvalResult, Metric
from grpoctl.rules import EvalPoint, eval_curve

ACCURACY_METRIC = metrics.EVAL_ACCURACY


@dataclass
class RunSummary:
    """One run's figures for a table of runs."""

    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # name -> [(step, value)], sorted
    evals: list[EvalPoint] = field(default_factory=list)  # its eval curve (rules.eval_curve)
    eval_meta: list[dict] = field(default_factory=list)  # COMPARABLE_EVAL_FIELDS of each trainer eval
    s_per_step: float | None = None  # median of time/step
    peak_mem: float | None = None  # highest mem/peak (MiB)


def _trainer_evals(run_ids: list[int]):
    """The headline (greedy) eval rows of the runs' own trainers: a `grpoctl eval CKPT`
    (which records its checkpoint path) may use other data or decoding, and a sampled
    eval is another measure; neither is a point of a run's accuracy curve."""
    return (EvalResult.run_id.in_(run_ids)) & EvalResult.checkpoint_path.is_(None) & (EvalResult.kind == EVAL_KINDS[0])


def fetch_rows(conn, query) -> list[tuple]:
    """Rows of a Core query straight from the DBAPI cursor, as plain tuples.

    SQLAlchemy's Row objects cost about a microsecond each, more than SQLite takes to
    read the row: on 100 runs x 200 steps x 6 series that was most of compare's second.
    """
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params = compiled.params
    if compiled.positional:
        params = [params[name] for name in compiled.positiontup]
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(str(compiled), params)
        return cursor.fetchall()
    finally:
        cursor.close()


def _medians(ids: list[int], name: str):
    """Median of a metric per run, in SQL (SQLite has no MEDIAN: rank the values with
    window functions and average the middle one or two)."""
    ranked = (
        select(
            Metric.run_id,
            Metric.value,
            func.row_number().over(partition_by=Metric.run_id, order_by=Metric.value).label("rank"),
            func.count().over(partition_by=Metric.run_id).label("n"),
        )
        .where(Metric.run_id.in_(ids), Metric.name == name, Metric.opt_step.is_(None), Metric.value.is_not(None))
        .subquery()
    )
    middle = ranked.c.rank.in_([(ranked.c.n + 1) // 2, (ranked.c.n + 2) // 2])
    return select(ranked.c.run_id, func.avg(ranked.c.value)).where(middle).group_by(ranked.c.run_id)


class RunSummaries:
    """Mixed into Registry: reads for tables of runs (`runs list`, `compare`, `report`)."""

    def run_summaries(self, run_ids: Iterable[int], series: Iterable[str]) -> dict[int, RunSummary]:
        """{run_id: RunSummary} with the per-step `series` named (eval/accuracy is always
        fetched: it is the curve of runs recorded before eval rows existed)."""
        ids = list(run_ids)
        out = {run_id: RunSummary() for run_id in ids}
        if not ids:
            return out
        names = list(dict.fromkeys([*series, ACCURACY_METRIC]))
        series_q = select(Metric.run_id, Metric.name, Metric.step, Metric.value).where(
            Metric.run_id.in_(ids), Metric.name.in_(names), Metric.opt_step.is_(None)
        )
        peak_q = (
            select(Metric.run_id, func.max(Metric.value))
            .where(Metric.run_id.in_(ids), Metric.name == metrics.MEM_PEAK, Metric.opt_step.is_(None))
            .group_by(Metric.run_id)
        )
        evals_q = select(
            EvalResult.run_id,
            EvalResult.step,
            EvalResult.accuracy,
            EvalResult.n,
            *(getattr(EvalResult, f) for f in COMPARABLE_EVAL_FIELDS),
        ).where(_trainer_evals(ids))
        trainer_evals: dict[int, list[EvalPoint]] = {run_id: [] for run_id in ids}
        # One read transaction: the queries see the same snapshot while trainers keep writing.
        with self.engine.connect() as conn, conn.begin():
            for run_id, name, step, value in fetch_rows(conn, series_q):
                out[run_id].series.setdefault(name, []).append((step, math.nan if value is None else value))
            for run_id, seconds in conn.execute(_medians(ids, metrics.STEP_TIME)):
                out[run_id].s_per_step = seconds
            for run_id, peak in conn.execute(peak_q):
                out[run_id].peak_mem = peak
            for run_id, step, accuracy, n, *meta in conn.execute(evals_q):
                out[run_id].eval_meta.append(dict(zip(COMPARABLE_EVAL_FIELDS, meta, strict=True)))
                if step is not None:
                    trainer_evals[run_id].append((step, accuracy, n))
        for run_id, summary in out.items():
            for points in summary.series.values():
                points.sort()  # usually sorted already: cheaper than an ORDER BY
            summary.evals = eval_curve(trainer_evals[run_id], summary.series.get(ACCURACY_METRIC, []))
        return out

    def eval_curves(self, run_ids: Iterable[int]) -> dict[int, list[EvalPoint]]:
        """{run_id: its eval curve (rules.eval_curve)}, in two queries whatever the number of runs."""
        ids = list(run_ids)
        trainer_evals: dict[int, list[EvalPoint]] = {run_id: [] for run_id in ids}
        metric: dict[int, list[tuple[int, float]]] = {run_id: [] for run_id in ids}
        if not ids:
            return {}
        with self.engine.connect() as conn, conn.begin():
            query = select(EvalResult.run_id, EvalResult.step, EvalResult.accuracy, EvalResult.n).where(
                _trainer_evals(ids), EvalResult.step.is_not(None)
            )
            for run_id, step, accuracy, n in conn.execute(query):
                trainer_evals[run_id].append((step, accuracy, n))
            older = [run_id for run_id in ids if not trainer_evals[run_id]]
            if older:
                query = select(Metric.run_id, Metric.step, Metric.value).where(
                    Metric.run_id.in_(older), Metric.name == ACCURACY_METRIC, Metric.opt_step.is_(None)
                )
                for run_id, step, value in conn.execute(query):
                    metric[run_id].append((step, math.nan if value is None else value))
        return {run_id: eval_curve(trainer_evals[run_id], metric[run_id]) for run_id in ids}
