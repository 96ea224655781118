"""The registry API: what goes in comes back out (on SQLite and PostgreSQL), and SQLite is
set up for many writers."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select, update

from grpoctl.errors import UserError
from grpoctl.registry import (
    STALE_AFTER_S,
    Checkpoint,
    Metric,
    Registry,
    Run,
    Sample,
    Tag,
    default_db_url,
    effective_status,
)
from grpoctl.registry.models import utcnow


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "registry.db"


@pytest.fixture
def registry(db_url):
    with Registry(db_url) as reg:
        yield reg


@pytest.fixture
def sqlite_registry(db_path):
    with Registry(str(db_path)) as reg:
        yield reg


def new_run(registry: Registry, name: str = "run-a", **overrides) -> Run:
    fields = dict(
        name=name,
        config={"lr": 3e-5, "model": {"name": "tiny"}},
        config_diff={"lr": 3e-5},
        config_hash=f"hash-{name}",
        seed=0,
        total_steps=10,
    )
    fields.update(overrides)
    return registry.create_run(**fields)


def sample(i: int = 0) -> dict:
    return dict(
        prompt=f"What is {i}+{i}?",
        response=f"<answer>{2 * i}</answer>",
        ground_truth=str(2 * i),
        reward=1.0,
        format_reward=1.0,
        answer_reward=1.0,
    )


def count(registry: Registry, table) -> int:
    with registry.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


# ---- runs ---------------------------------------------------------------------------


def test_create_run_fills_in_where_and_when(registry):
    run = new_run(registry, group="g", variant="lr=3e-05", output_dir="out/a", device="cpu")
    assert run.id is not None
    back = registry.get_run(run.id)
    assert back.name == "run-a" and back.group == "g" and back.variant == "lr=3e-05"
    assert back.status == "running" and back.last_step == -1 and back.total_steps == 10
    assert back.host and back.version and back.device == "cpu"
    assert back.created_at.tzinfo is not None  # aware UTC, as SQLModel wants
    assert abs((utcnow() - back.created_at).total_seconds()) < 60
    assert '"model": {"name": "tiny"}' in back.config


def test_run_names_are_unique_and_a_clash_writes_nothing(registry):
    new_run(registry)
    with pytest.raises(UserError, match="already exists"):
        new_run(registry)
    assert count(registry, Run) == 1


def test_get_run_by_id_name_and_unique_prefix(registry):
    for name in ("lr-1e-5", "lr-3e-5", "baseline", "a_b"):
        new_run(registry, name)
    assert registry.get_run(1).name == "lr-1e-5"
    assert registry.get_run("2").name == "lr-3e-5"
    assert registry.get_run("lr-3e-5").name == "lr-3e-5"
    assert registry.get_run("base").name == "baseline"
    with pytest.raises(UserError, match=r"^'lr-' matches 2 runs: lr-1e-5, lr-3e-5$"):
        registry.get_run("lr-")
    with pytest.raises(UserError, match=r"^no run named 'nope'$"):
        registry.get_run("nope")
    # LIKE wildcards in a prefix are literal characters
    with pytest.raises(UserError, match="no run named"):
        registry.get_run("%")
    assert registry.get_run("a_").name == "a_b"


def test_list_runs_filters_newest_first(registry):
    a = new_run(registry, "a", group="sweep1")
    b = new_run(registry, "b", group="sweep1")
    c = new_run(registry, "c")
    registry.set_status(c.id, "failed", error="boom")
    registry.add_tag("a", "best")
    assert [r.name for r in registry.list_runs()] == ["c", "b", "a"]
    assert [r.name for r in registry.list_runs(group="sweep1")] == ["b", "a"]
    assert [r.name for r in registry.list_runs(status="failed")] == ["c"]
    assert [r.name for r in registry.list_runs(tag="best")] == ["a"]
    assert [r.name for r in registry.list_runs(limit=1)] == ["c"]
    assert [r.name for r in registry.runs_in_group("sweep1")] == ["a", "b"]
    assert registry.get_run("c").error == "boom"
    assert {a.id, b.id} == {r.id for r in registry.list_runs(status="running")}


def test_set_status_records_the_end_and_resume_clears_it(registry):
    run = new_run(registry)
    registry.set_status(run.id, "finished")
    assert registry.get_run(run.id).finished_at is not None
    registry.set_status(run.id, "running")
    assert registry.get_run(run.id).finished_at is None
    with pytest.raises(ValueError):
        registry.set_status(run.id, "done")


def test_stale_when_heartbeat_stops(registry):
    run = new_run(registry)
    assert effective_status(registry.get_run(run.id)) == "running"
    long_ago = utcnow() - timedelta(seconds=STALE_AFTER_S + 60)
    with registry.engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run.id).values(heartbeat_at=long_ago))
    stale = registry.get_run(run.id)
    assert effective_status(stale) == "stale"
    assert effective_status(stale, now=long_ago + timedelta(seconds=1)) == "running"
    assert [r.name for r in registry.list_runs(status="stale")] == ["run-a"]
    assert registry.list_runs(status="running") == []
    registry.heartbeat(run.id)
    assert effective_status(registry.get_run(run.id)) == "running"
    registry.set_status(run.id, "interrupted")
    tomorrow = utcnow() + timedelta(days=1)
    assert effective_status(registry.get_run(run.id), now=tomorrow) == "interrupted"


# ---- metrics and samples ------------------------------------------------------------


def test_log_step_round_trip(registry):
    run = new_run(registry)
    before = registry.get_run(run.id).heartbeat_at
    registry.log_step(
        run.id,
        0,
        {"train/reward": 0.25, "train/loss": float("nan"), "mem/peak": float("inf"), "train/skipped": None},
        opt_metrics=[(0, {"train/grad_norm": 1.5}), (1, {"train/grad_norm": 2.5})],
        samples=[sample(1), sample(2)],
    )
    registry.log_step(run.id, 1, {"train/reward": 0.5, "train/loss": 0.1}, opt_metrics=[(2, {"train/grad_norm": 0.5})])
    series = registry.metric_series(run.id)
    assert set(series) == {"train/reward", "train/loss", "mem/peak"}  # None is not stored
    assert series["train/reward"] == [(0, 0.25), (1, 0.5)]
    assert math.isnan(series["train/loss"][0][1]) and series["train/loss"][1] == (1, 0.1)
    assert series["mem/peak"] == [(0, math.inf)]
    assert registry.metric_series(run.id, names=["train/reward"]) == {"train/reward": [(0, 0.25), (1, 0.5)]}
    assert registry.metric_series(run.id, per_opt_step=True) == {"train/grad_norm": [(0, 1.5), (1, 2.5), (2, 0.5)]}
    assert registry.last_metrics([run.id]) == {run.id: {"train/reward": 0.5, "train/loss": 0.1, "mem/peak": math.inf}}
    back = registry.get_run(run.id)
    assert back.last_step == 1 and back.heartbeat_at >= before
    rows = registry.samples(run.id)
    assert [(s.step, s.prompt) for s in rows] == [(0, "What is 1+1?"), (0, "What is 2+2?")]
    assert registry.samples(run.id, step=0, kind="eval") == []
    assert len(registry.samples(run.id, limit=1)) == 1


def test_truncate_after_forgets_later_steps(registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = new_run(registry)
    for step in range(5):
        registry.log_step(run.id, step, {"train/reward": float(step)}, samples=[sample(step)])
        registry.add_eval(
            run_id=run.id, step=step, n=8, accuracy=0.1 * step, format_rate=1.0, mean_response_length=10.0
        )
        registry.add_checkpoint(run.id, step, f"out/step_{step}")
    removed = registry.truncate_after(run.id, 2)
    # Paths are stored absolute (relative ones are taken from where the command runs).
    assert removed == [str(tmp_path / "out/step_3"), str(tmp_path / "out/step_4")]
    assert registry.get_run(run.id).last_step == 2
    assert registry.metric_series(run.id)["train/reward"] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert [s.step for s in registry.samples(run.id)] == [2, 1, 0]
    assert [e.step for e in registry.evals(run.id)] == [0, 1, 2]
    assert [c.step for c in registry.checkpoints(run.id)] == [0, 1, 2]


def test_checkpoints_evals_and_tags(registry):
    run = new_run(registry)
    first = registry.add_checkpoint(run.id, 1, "/out/step_1", eval_accuracy=0.2)
    registry.add_checkpoint(run.id, 2, "/out/step_2")
    registry.mark_checkpoint_deleted(first.id)
    assert [c.path for c in registry.checkpoints(run.id)] == ["/out/step_2"]
    assert [c.deleted for c in registry.checkpoints(run.id, include_deleted=True)] == [True, False]

    result = registry.add_eval(
        run_id=run.id,
        step=2,
        n=64,
        accuracy=0.5,
        format_rate=0.9,
        mean_response_length=100.0,
        decoding={"temperature": 0.0},
    )
    assert result.id is not None
    assert registry.evals(run.id)[0].decoding == '{"temperature": 0.0}'

    registry.add_tag("run-a", "best")
    registry.add_tag(run.id, "best")  # twice is fine
    registry.add_tag(run.id, "arxiv")
    assert registry.tags(run.id) == ["arxiv", "best"]
    registry.remove_tag(run.id, "best")
    assert registry.tags(run.id) == ["arxiv"]
    with pytest.raises(UserError, match="has no tag 'best'"):
        registry.remove_tag(run.id, "best")


def test_delete_run_removes_every_row_and_returns_its_paths(registry):
    keep = new_run(registry, "keep")
    run = new_run(registry, "gone", output_dir="/out/gone")
    for r in (keep, run):
        registry.log_step(r.id, 0, {"x": 1.0}, samples=[sample()])
        registry.add_checkpoint(r.id, 0, f"/out/{r.name}/step_0")
        registry.add_eval(run_id=r.id, step=0, n=1, accuracy=1, format_rate=1, mean_response_length=1)
        registry.add_tag(r.id, "t")
    assert registry.delete_run("gone") == ["/out/gone/step_0", "/out/gone"]
    assert [r.name for r in registry.list_runs()] == ["keep"]
    for table in (Metric, Sample, Checkpoint, Tag):
        assert count(registry, table) == 1
    assert len(registry.evals(keep.id)) == 1
    with pytest.raises(UserError):
        registry.delete_run("gone")


# ---- sweeps -------------------------------------------------------------------------


def test_sweep_members_are_found_by_config_hash(registry):
    sweep = registry.get_or_create_sweep("lr-sweep", "sweep", {"lr": [1e-5, 3e-5, 1e-4]})
    assert registry.get_or_create_sweep("lr-sweep", "sweep", {"other": 1}).id == sweep.id
    with pytest.raises(UserError, match="already a sweep"):
        registry.get_or_create_sweep("lr-sweep", "ablation", {})
    for label in ("lr=1e-05", "lr=3e-05", "lr=1e-04"):
        registry.add_sweep_member(sweep.id, f"h-{label}", label, seed=0)
    again = registry.add_sweep_member(sweep.id, "h-lr=1e-05", "lr=1e-05", seed=0)
    assert again.variant == "lr=1e-05"

    # lr=1e-05 was also run outside the sweep, later: the sweep's own run still wins
    mine = new_run(registry, "lr-sweep-1e-05", config_hash="h-lr=1e-05", group="lr-sweep")
    new_run(registry, "elsewhere", config_hash="h-lr=1e-05")
    # lr=3e-05 was run twice outside any group: the newest wins
    new_run(registry, "old", config_hash="h-lr=3e-05")
    newest = new_run(registry, "new", config_hash="h-lr=3e-05")

    members = registry.sweep_members("lr-sweep")
    assert [m.variant for m, _ in members] == ["lr=1e-05", "lr=3e-05", "lr=1e-04"]
    assert [r.id if r else None for _, r in members] == [mine.id, newest.id, None]
    with pytest.raises(UserError, match="no sweep or ablation named 'nope'"):
        registry.sweep_members("nope")


# ---- where the registry lives, and SQLite settings -----------------------------------


def test_default_url_and_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPOCTL_DB", raising=False)
    assert default_db_url() == "sqlite:///./registry.db"
    monkeypatch.setenv("GRPOCTL_DB", str(tmp_path / "env.db"))
    assert default_db_url() == str(tmp_path / "env.db")
    Registry().close()
    assert (tmp_path / "env.db").exists()

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRPOCTL_DB")
    Registry().close()
    assert (tmp_path / "registry.db").exists()
    Registry(f"sqlite:///{tmp_path / 'url.db'}").close()
    assert (tmp_path / "url.db").exists()


def test_missing_file_or_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"^no registry at .*absent\.db \(run `grpoctl train`"):
        Registry(str(tmp_path / "absent.db"), must_exist=True)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(UserError, match="directory .* does not exist"):
        Registry(str(tmp_path / "no" / "such" / "dir.db"))


def test_in_memory_sqlite_works_without_file_pragmas():
    with Registry("sqlite://") as reg:
        run = new_run(reg)
        reg.log_step(run.id, 0, {"x": 1.0})
        assert reg.metric_series(run.id) == {"x": [(0, 1.0)]}


def test_sqlite_pragmas_are_set(sqlite_registry):
    registry = sqlite_registry
    with registry.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 30000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_writes_begin_immediate_and_reads_deferred(sqlite_registry):
    registry = sqlite_registry
    statements: list[str] = []

    @event.listens_for(registry.engine, "connect")
    def trace(dbapi_connection, _record):
        dbapi_connection.set_trace_callback(statements.append)

    registry.engine.dispose()  # reconnect, so the trace is installed
    run = new_run(registry)
    registry.log_step(run.id, 0, {"x": 1.0})
    registry.list_runs()
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE", "BEGIN IMMEDIATE", "BEGIN DEFERRED"]


@pytest.mark.slow
def test_a_write_transaction_holds_the_lock_from_its_start(sqlite_registry, db_path):
    registry = sqlite_registry
    # Nothing written yet inside the transaction, but the lock is already ours: with a
    # deferred BEGIN, the other connection could still write here.
    other = sqlite3.connect(db_path, timeout=0, isolation_level=None)
    with registry._writer.begin():
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()


def test_a_writer_waits_for_the_lock_instead_of_failing(sqlite_registry, db_path):
    registry = sqlite_registry
    run = new_run(registry)
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is in the middle of a step
    outcome: dict = {}

    def write():
        start = time.perf_counter()
        try:
            registry.log_step(run.id, 0, {"x": 1.0})
        except Exception as exc:  # pragma: no cover - this is the failure being tested
            outcome["error"] = exc
        outcome["waited"] = time.perf_counter() - start

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)
    # Readers are not blocked by the writer holding the lock (WAL).
    start = time.perf_counter()
    assert [r.name for r in registry.list_runs()] == ["run-a"]
    assert time.perf_counter() - start < 0.4
    other.execute("COMMIT")
    writer.join(timeout=10)
    other.close()
    assert "error" not in outcome
    assert outcome["waited"] >= 0.4
    assert registry.metric_series(run.id) == {"x": [(0, 1.0)]}


# ---- reads for tables of runs ----------------------------------------------------------


def test_tables_of_runs_read_every_run_at_once(registry):
    """eval_curves and run_summaries take the same few statements for 2 runs as for 12, and
    agree on each run's curve: its trainer's evals; else (recorded before eval rows) its
    eval/accuracy metric; never a later eval of a checkpoint."""
    runs = []
    for i in range(12):
        run = new_run(registry, f"r{i}")
        runs.append(run)
        registry.log_step(run.id, 1, {"eval/accuracy": 0.1 * i, "time/step": 2.0 + i, "mem/peak": 100.0 + i})
        if i % 2:  # the odd runs have eval rows, whose accuracy differs from the metric's
            for step in (1, 0):
                registry.add_eval(
                    run_id=run.id,
                    step=step,
                    n=64,
                    accuracy=0.5 + 0.01 * i + step,
                    format_rate=1.0,
                    mean_response_length=9.0,
                    decoding={"greedy": True},
                    grader="g",
                )
        registry.add_eval(
            run_id=run.id,
            step=1,
            checkpoint_path=f"/ckpt/{i}",
            n=8,
            accuracy=0.99,
            format_rate=1.0,
            mean_response_length=9.0,
        )
    statements = []
    event.listen(registry.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def reads(ids):
        statements.clear()
        curves = registry.eval_curves(ids)
        summaries = registry.run_summaries(ids, ["time/step"])
        return len(statements), curves, summaries

    few, _, _ = reads([r.id for r in runs[:2]])
    many, curves, summaries = reads([r.id for r in runs])
    assert many == few <= 8
    for i, run in enumerate(runs):
        want = [(step, 0.5 + 0.01 * i + step, 64) for step in (0, 1)] if i % 2 else [(1, pytest.approx(0.1 * i), None)]
        assert curves[run.id] == want == summaries[run.id].evals
        assert summaries[run.id].s_per_step == 2.0 + i and summaries[run.id].peak_mem == 100.0 + i
        assert len(summaries[run.id].eval_meta) == (2 if i % 2 else 0)
