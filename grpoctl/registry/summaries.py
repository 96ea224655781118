"""What tables of many runs read: each run's eval curve, chosen series, median step time
and throughputs, and peak memory, fetched for all the runs at once (never a query per run).

`compare` runs while sweeps train and must answer in under a second for 100 runs x 200
steps x 30 metrics (benchmarks/bench_compare.py), start-up included: the rows come through
SQLAlchemy Core straight off the DBAPI cursor, only for the metrics asked for, and the
aggregates (median, max) are computed in SQL. Mixed into Registry (store.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Integer, func, select

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
    # medians of the throughputs, by metric (time/rollout_tokens_per_s, time/train_tokens_per_s)
    throughput: dict[str, float] = field(default_factory=dict)
    # The sampled evals' curves by score (eval/pass@8, eval/maj@8: unprefixed, of the set
    # read), each point (step, score, problems sampled): pass@k and maj@k read like accuracy.
    scores: dict[str, list[EvalPoint]] = field(default_factory=dict)


def _of_eval_set(eval_set: str | None):
    """Eval rows of each run's headline eval set, or of the set named `eval_set` (eval.sets, migration 0008)."""
    return EvalResult.headline.is_(True) if eval_set is None else EvalResult.eval_set == eval_set


def _trainer_evals(run_ids: list[int], eval_set: str | None = None, kind: str = EVAL_KINDS[0]):
    """The headline (greedy) eval rows of the runs' own trainers: a `grpoctl eval CKPT`
    (which records its checkpoint path) may use other data or decoding, and a sampled
    eval is another measure; neither is a point of a run's accuracy curve. Rows of the
    runs' headline eval set, or of the set named `eval_set`."""
    return (
        EvalResult.run_id.in_(run_ids)
        & EvalResult.checkpoint_path.is_(None)
        & (EvalResult.kind == kind)
        & _of_eval_set(eval_set)
    )


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


def _medians(ids: list[int], names: list[str]):
    """Median of each metric per run, in SQL, as (run_id, name, median) rows (SQLite has no
    MEDIAN: rank the values with window functions and average the middle one or two)."""
    ranked = (
        select(
            Metric.run_id,
            Metric.name,
            Metric.value,
            func.row_number().over(partition_by=(Metric.run_id, Metric.name), order_by=Metric.value).label("rank"),
            func.count().over(partition_by=(Metric.run_id, Metric.name)).label("n"),
        )
        .where(Metric.run_id.in_(ids), Metric.name.in_(names), Metric.opt_step.is_(None), Metric.value.is_not(None))
        .subquery()
    )
    middle = ranked.c.rank.in_([(ranked.c.n + 1) // 2, (ranked.c.n + 2) // 2])
    return (
        select(ranked.c.run_id, ranked.c.name, func.avg(ranked.c.value))
        .where(middle)
        .group_by(ranked.c.run_id, ranked.c.name)
    )


class RunSummaries:
    """Mixed into Registry: reads for tables of runs (`runs list`, `compare`, `report`)."""

    def run_summaries(
        self, run_ids: Iterable[int], series: Iterable[str], eval_set: str | None = None
    ) -> dict[int, RunSummary]:
        """{run_id: RunSummary} with the per-step `series` named (eval/accuracy is always
        fetched: it is the curve of runs recorded before eval rows existed). Its evals and
        scores are those of each run's headline eval set, or of the set named `eval_set`."""
        ids = list(run_ids)
        out = {run_id: RunSummary() for run_id in ids}
        if not ids:
            return out
        accuracy_metric = metrics.in_eval_set(eval_set, ACCURACY_METRIC) if eval_set else ACCURACY_METRIC
        names = list(dict.fromkeys([*series, accuracy_metric]))
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
        ).where(_trainer_evals(ids, eval_set))
        sampled_q = select(EvalResult.run_id, EvalResult.step, EvalResult.n, EvalResult.scores).where(
            _trainer_evals(ids, eval_set, EVAL_KINDS[1]), EvalResult.step.is_not(None)
        )
        trainer_evals: dict[int, list[EvalPoint]] = {run_id: [] for run_id in ids}
        # One read transaction: the queries see the same snapshot while trainers keep writing.
        with self.engine.connect() as conn, conn.begin():
            for run_id, name, step, value in fetch_rows(conn, series_q):
                out[run_id].series.setdefault(name, []).append((step, math.nan if value is None else value))
            medians = [metrics.STEP_TIME, *metrics.THROUGHPUT_OF_PHASE.values()]
            for run_id, name, median in conn.execute(_medians(ids, medians)):
                if name == metrics.STEP_TIME:
                    out[run_id].s_per_step = median
                else:
                    out[run_id].throughput[name] = median
            for run_id, peak in conn.execute(peak_q):
                out[run_id].peak_mem = peak
            for run_id, step, accuracy, n, *meta in conn.execute(evals_q):
                out[run_id].eval_meta.append(dict(zip(COMPARABLE_EVAL_FIELDS, meta, strict=True)))
                if step is not None:
                    trainer_evals[run_id].append((step, accuracy, n))
            for run_id, step, n, scores in conn.execute(sampled_q):
                for name, value in json.loads(scores or "{}").items():
                    if metrics.is_sampled_score(name) and value is not None:
                        out[run_id].scores.setdefault(name, []).append((step, float(value), n))
        for run_id, summary in out.items():
            for points in summary.series.values():
                points.sort()  # usually sorted already: cheaper than an ORDER BY
            for curve in summary.scores.values():
                curve.sort()
            summary.evals = eval_curve(trainer_evals[run_id], summary.series.get(accuracy_metric, []))
        return out

    def eval_set_names(self, run_ids: Iterable[int]) -> dict[int, list[str]]:
        """{run_id: the names of the eval sets its trainer recorded, the headline first};
        "" is a run's one unnamed set (a run without eval.sets)."""
        ids = list(run_ids)
        out: dict[int, list[str]] = {run_id: [] for run_id in ids}
        if not ids:
            return out
        query = (
            select(EvalResult.run_id, EvalResult.eval_set, func.max(EvalResult.headline.cast(Integer)))
            .where(EvalResult.run_id.in_(ids), EvalResult.checkpoint_path.is_(None))
            .group_by(EvalResult.run_id, EvalResult.eval_set)
        )
        with self.engine.connect() as conn, conn.begin():
            rows = conn.execute(query).all()
        for run_id, name, _ in sorted(rows, key=lambda r: (r[0], -(r[2] or 0), r[1])):
            out[run_id].append(name)
        return out

    def eval_breakdowns(
        self, run_ids: Iterable[int], eval_set: str | None = None
    ) -> dict[int, list[tuple[int, str, dict]]]:
        """{run_id: [(step, kind, breakdown)]} of its trainer's evals (eval row kind greedy or
        sampled) on its headline eval set or the set named `eval_set`, in step order;
        breakdown: {field: {value: {"n": problems, figure: mean}}} (analysis/breakdown.py)."""
        ids = list(run_ids)
        out: dict[int, list[tuple[int, str, dict]]] = {run_id: [] for run_id in ids}
        if not ids:
            return out
        query = select(EvalResult.run_id, EvalResult.step, EvalResult.kind, EvalResult.breakdown).where(
            EvalResult.run_id.in_(ids),
            EvalResult.checkpoint_path.is_(None),
            EvalResult.step.is_not(None),
            _of_eval_set(eval_set),
        )
        with self.engine.connect() as conn, conn.begin():
            rows = conn.execute(query).all()
        for run_id, step, kind, blob in sorted(rows, key=lambda r: (r[0], r[1], r[2])):
            table = json.loads(blob or "{}")
            if table:
                out[run_id].append((step, kind, table))
        return out

    def eval_outcomes(
        self, run_ids: Iterable[int], eval_set: str | None = None, kind: str = EVAL_KINDS[0]
    ) -> dict[int, dict[int, tuple[str, str | None]]]:
        """{run_id: {step: (subset_hash, its per-problem outcomes as stored, None: not
        recorded)}} of its trainer's evals of `kind` on its headline eval set or the set
        named `eval_set`; registry/outcomes.py's `decode` reads one (only those a measure
        weighs need decoding). Read only by what pairs problems (a comparison against a
        baseline, a finding), never by a table of runs."""
        ids = list(run_ids)
        out: dict[int, dict[int, tuple[str, str | None]]] = {run_id: {} for run_id in ids}
        if not ids:
            return out
        query = select(EvalResult.run_id, EvalResult.step, EvalResult.subset_hash, EvalResult.outcomes).where(
            _trainer_evals(ids, eval_set, kind), EvalResult.step.is_not(None)
        )
        with self.engine.connect() as conn, conn.begin():
            rows = fetch_rows(conn, query)
        for run_id, step, subset, text in rows:
            out[run_id][step] = (subset, text)
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
