"""The dashboard's JSON API: what the page reads, every figure computed here.

    GET /api/meta                               metric names, descriptions and units; poll interval
    GET /api/runs                               every run: status, progress, accuracy, reward, tags
    GET /api/studies/{name}                     a sweep's variants, runs and recorded metrics
    GET /api/studies/{name}/compare             compare's table (as --format json) and each run's health flags
    GET /api/studies/{name}/curves?metric=...   one metric, a curve per variant (curves.py)
    GET /api/runs/{id}                          config diff, evals, checkpoints, flags, metric names
    GET /api/runs/{id}/curves?metric=...        one metric of one run
    GET /api/runs/{id}/samples?step=&filter=    completions at a step, right or wrong
    GET /api/runs/{id}/log?after_id=            what the trainer printed (as `runs logs`)

Curves take `points` (buckets, 10-2000), `smoothing` (EMA weight in [0, 1)), `from` and
`to` (a zoom, in steps) and `after_step` (a live poll: only later points). Statistics
come from analysis/ (compare's own functions), reads from the registry's methods.
"""

from __future__ import annotations

import json

from starlette.requests import Request

from grpoctl import metrics
from grpoctl.analysis.compare import build_compare_table, load_compared_runs
from grpoctl.analysis.run_groups import fold_runs, resolve_runs
from grpoctl.errors import UserError
from grpoctl.registry import Registry, Run, effective_status
from grpoctl.registry.models import utcnow
from grpoctl.rules import headline_accuracy
from grpoctl.run_identity import flatten
from grpoctl.ui import params
from grpoctl.ui.curves import CurveQuery, load_points, variant_curves
from grpoctl.views import compare_records

CURVE_PARAMS = {"metric", "points", "smoothing", "from", "to", "after_step"}


class NotFound(Exception):
    """A run or study that does not exist (404)."""


def _iso(moment) -> str | None:
    return None if moment is None else moment.isoformat()


def _run_row(run: Run, now, accuracy, reward, tags) -> dict:
    return {
        "id": run.id,
        "name": run.name,
        "group": run.group,
        "variant": run.variant,
        "seed": run.seed,
        "status": effective_status(run, now),
        "last_step": max(run.last_step, 0),
        "total_steps": run.total_steps,
        "accuracy": accuracy,
        "reward": reward,
        "tags": tags,
        "created_at": _iso(run.created_at),
        "heartbeat_at": _iso(run.heartbeat_at),
    }


def warm_up(registry: Registry) -> None:
    """Run each read once at start, so that the first page a user opens does not pay for
    SQLAlchemy compiling its statements (a few hundred ms on a busy machine)."""
    runs = registry.list_runs(limit=1)
    ids = [run.id for run in runs]
    registry.last_metrics(ids, (metrics.REWARD,))
    registry.eval_curves(ids)
    registry.tags_of(ids)
    registry.metric_of_runs(ids, metrics.REWARD)
    registry.metric_names(ids)
    registry.sweeps()
    if runs and runs[0].group:
        resolve_runs(registry, [runs[0].group])


def meta(registry: Registry, request: Request, poll_s: float, location: str) -> dict:
    params.check_known(request.query_params, set())
    return {
        "registry": location,
        "poll_s": poll_s,
        "metrics": {
            name: {"description": i.description, "unit": i.unit, "higher_is_better": i.higher_is_better}
            for name, i in metrics.TABLE.items()
        },
        "headline": metrics.EVAL_ACCURACY,
    }


def runs(registry: Registry, request: Request) -> dict:
    params.check_known(request.query_params, set())
    all_runs = registry.list_runs()
    ids = [run.id for run in all_runs]
    last = registry.last_metrics(ids, (metrics.REWARD,))
    curves = registry.eval_curves(ids)
    tags = registry.tags_of(ids)
    now = utcnow()
    rows = []
    for run in all_runs:
        point = headline_accuracy(curves.get(run.id, []))
        rows.append(
            _run_row(run, now, None if point is None else point[1], last[run.id].get(metrics.REWARD), tags[run.id])
        )
    studies = {s.name: s.kind for s in registry.sweeps()}
    for run in all_runs:
        if run.group and run.group not in studies:
            studies[run.group] = "group"
    return {"now": now.isoformat(), "runs": rows, "studies": [{"name": n, "kind": k} for n, k in studies.items()]}


def _study_runs(registry: Registry, name: str) -> tuple[list[Run], dict[int, str]]:
    name = params.name(name, "study")
    try:
        members = registry.sweep_members(name)
    except UserError:
        members = None
    if members is None and not registry.runs_in_group(name):
        raise NotFound(f"no sweep or group named '{name}'")
    _, found, _, labels = resolve_runs(registry, [name])
    if not found:
        raise NotFound(f"'{name}' has no runs yet")
    return found, labels


def study(registry: Registry, request: Request, name: str) -> dict:
    """A study's variants and runs, and the metrics they recorded: cheap, for the first
    draw and every poll (compare's table and the health flags are `study_compare`)."""
    params.check_known(request.query_params, set())
    found, labels = _study_runs(registry, name)
    now = utcnow()
    groups = _folded(found, labels)
    variants = [
        {
            "label": label,
            "runs": [
                {
                    "id": run.id,
                    "name": run.name,
                    "seed": run.seed,
                    "status": effective_status(run, now),
                    "last_step": max(run.last_step, 0),
                }
                for run in runs
            ],
        }
        for label, runs in groups
    ]
    # Runs of one variant record the same metrics: ask one run of each, once while none runs.
    representatives = tuple(runs[0].id for _, runs in groups)
    live = any(r["status"] == "running" for v in variants for r in v["runs"])
    key = (registry.public_url, representatives)
    names = _names.get(key) if not live else None
    if names is None:
        names = registry.metric_names(representatives)
        if not live:
            if len(_names) > 64:
                _names.clear()
            _names[key] = names
    return {"name": name, "variants": variants, "metrics": names}


# The caches below are kept for the life of the process, and a process may serve more
# than one registry (create_app twice: the tests do, on SQLite then PostgreSQL): their
# keys start with the registry's URL, else two registries whose runs have the same ids
# would be answered from one another's figures.
_names: dict[tuple, list[str]] = {}


# compare's answer for a study, by the state of its runs: recomputed only when a run moved.
_compared: dict[tuple, dict] = {}


def study_compare(registry: Registry, request: Request, name: str) -> dict:
    """What `grpoctl compare NAME --format json` says, and each run's health flags."""
    params.check_known(request.query_params, set())
    found, _ = _study_runs(registry, name)
    now = utcnow()
    key = (registry.public_url, name, *((run.id, effective_status(run, now), run.last_step) for run in found))
    if key not in _compared:
        if len(_compared) > 16:
            _compared.clear()
        table = build_compare_table(registry, [name])
        flags = {
            str(rd.run.id): [{"kind": f.kind, "step": f.step, "detail": f.detail} for f in rd.flags]
            for row in table.rows
            for rd in row.runs
        }
        _compared[key] = {"compare": json.loads(compare_records.to_json(table)), "flags": flags}
    return _compared[key]


def _curve_query(request: Request) -> CurveQuery:
    query = request.query_params
    params.check_known(query, CURVE_PARAMS)
    lo = params.integer(query, "from", None, 0, params.MAX_STEP)
    hi = params.integer(query, "to", None, 0, params.MAX_STEP)
    if lo is not None and hi is not None and hi < lo:
        raise params.BadRequest("'to' must not be below 'from'")
    return CurveQuery(
        params.metric(query),
        buckets=params.integer(query, "points", 200, 10, 2000),
        smoothing=params.fraction(query, "smoothing", 0.6),
        lo=lo,
        hi=hi,
        after_step=params.integer(query, "after_step", None, -1, params.MAX_STEP),
    )


# A study's variants by its runs' ids and labels: a run's config never changes, and
# folding reads every config (a tenth of a second for 100 runs), so once per set of runs.
# (No registry in the key: the config hash names the config, so the folds are the same
# in any registry.)
_folds: dict[tuple, list[tuple[str, list[int]]]] = {}


def _folded(found: list[Run], labels: dict[int, str]) -> list[tuple[str, list[Run]]]:
    key = tuple((run.id, run.config_hash, labels.get(run.id, run.variant)) for run in found)
    if key not in _folds:
        if len(_folds) > 64:
            _folds.clear()
        _folds[key] = [(label, [run.id for run in runs]) for label, runs in fold_runs(found, labels)]
    by_id = {run.id: run for run in found}
    return [(label, [by_id[i] for i in ids]) for label, ids in _folds[key]]


def study_curves(registry: Registry, request: Request, name: str) -> dict:
    query = _curve_query(request)
    found, labels = _study_runs(registry, name)
    return variant_curves(_folded(found, labels), load_points(registry, found, query), query)


def _run(registry: Registry, run_id: int) -> Run:
    if run_id > 2**63 - 1:
        raise NotFound(f"no run with id {run_id}")
    try:
        return registry.get_run(run_id)
    except UserError:
        raise NotFound(f"no run with id {run_id}") from None


def run(registry: Registry, request: Request, run_id: int) -> dict:
    params.check_known(request.query_params, set())
    found = _run(registry, run_id)
    compared = load_compared_runs(registry, [found])[0]
    evals = [
        {
            "step": e.step,
            "n": e.n,
            "accuracy": e.accuracy,
            "format_rate": e.format_rate,
            "checkpoint": e.checkpoint_path,
        }
        for e in registry.evals(found.id)
    ]
    checkpoints = [
        {"step": c.step, "path": c.path, "eval_accuracy": c.eval_accuracy, "deleted": c.deleted}
        for c in registry.checkpoints(found.id, include_deleted=True)
    ]
    point = headline_accuracy(compared.evals)
    return {
        "run": _run_row(found, utcnow(), None if point is None else point[1], None, registry.tags(found.id)),
        "config_diff": flatten(json.loads(found.config_diff)),
        "error": found.error,
        "host": found.host,
        "device": found.device,
        "evals": evals,
        "checkpoints": checkpoints,
        "flags": [{"kind": f.kind, "step": f.step, "detail": f.detail} for f in compared.flags],
        "metrics": registry.metric_names([found.id]),
        "sample_steps": registry.sample_steps(found.id),
    }


def run_curves(registry: Registry, request: Request, run_id: int) -> dict:
    query = _curve_query(request)
    found = _run(registry, run_id)
    return variant_curves([(found.name, [found])], load_points(registry, [found], query), query)


def samples(registry: Registry, request: Request, run_id: int) -> dict:
    query = request.query_params
    params.check_known(query, {"step", "kind", "filter", "limit"})
    found = _run(registry, run_id)
    step = params.integer(query, "step", None, 0, params.MAX_STEP)
    kind = params.choice(query, "kind", ("train", "eval"), None)
    which = params.choice(query, "filter", ("all", "right", "wrong"), "all")
    limit = params.integer(query, "limit", 50, 1, 500)
    steps = registry.sample_steps(found.id)
    if step is None:
        step = steps[-1] if steps else None
    correct = {"all": None, "right": True, "wrong": False}[which or "all"]
    rows = [] if step is None else registry.samples_where(found.id, step, kind, correct, limit or 50)
    return {
        "step": step,
        "steps": steps,
        "samples": [
            {
                "kind": s.kind,
                "prompt": s.prompt,
                "response": s.response,
                "ground_truth": s.ground_truth,
                "reward": s.reward,
                "format_reward": s.format_reward,
                "answer_reward": s.answer_reward,
            }
            for s in rows
        ],
    }


def log(registry: Registry, request: Request, run_id: int) -> dict:
    query = request.query_params
    params.check_known(query, {"after_id"})
    found = _run(registry, run_id)
    after = params.integer(query, "after_id", 0, 0, 2**62) or 0
    chunks = registry.log_chunks(found.name, after_id=after)
    return {
        "chunks": [{"id": i, "host": h, "text": t} for i, h, t in chunks],
        "last_id": chunks[-1][0] if chunks else after,
    }
