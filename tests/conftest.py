"""Shared fixtures: a tiny random model directory, the fast-run config, and registries
(SQLite and PostgreSQL) for the registry tests.

Nothing here downloads anything: the model is built in-process as an ordinary Hugging
Face directory (Qwen2 architecture, byte-level tokenizer), like the embedded default.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# In-process CLI tests (tests/cli.py) render tables at the width subprocess tests ask for;
# rich reads it when grpoctl's consoles are made, on import.
os.environ.setdefault("COLUMNS", "200")


# --------------------------------------------------------------------------- tiers and workers
#
# The suite runs on both cores with pytest-xdist (`-n 2`, `--dist loadgroup`). Tests whose
# outcome depends on timing share one xdist group, so they run one at a time on one
# worker: registry races and concurrency (several processes racing against one database)
# and Ray clusters (each takes every core it is given, and their fault tests hold
# trainers at fault points). Later browser and cluster tests join them.
SERIAL_MODULES = {
    "test_registry_races",
    "test_registry_concurrency",
    "test_ray_setup",
    "test_ray_sweep",
    "test_ray_faults",
    "test_ui_browser",
    "test_cluster",
}


# Backends: the registry's own suites run every case on SQLite and PostgreSQL (`db_url`).
# End-to-end modules whose trainers or launchers only reach the registry through the same
# store run on SQLite, except the cases marked `postgres_too`, where PostgreSQL's own
# behaviour is the point: two resumers racing for a claim and a claim taken over (row
# locks, not SQLite's file lock), and a password that must never show in a sweep's argv,
# logs or plans.
E2E_ON_SQLITE = {"test_sweep_launcher", "test_registry_resume"}

# Tiers: the fast tier (`-m "not slow"`) is unit tests and in-process CLI tests on SQLite.
# Everything in these modules is end-to-end (real trainers in subprocesses, servers,
# clusters, engines), and so is every case on PostgreSQL (it needs the server); other
# slow cases carry @pytest.mark.slow themselves.
E2E_MODULES = {
    "test_train",
    "test_golden_step",
    "test_resume_v0",
    "test_faults",
    "test_tiny_warmstart",
    "test_threads",
    "test_vllm_backend",
    "test_ray_setup",
    "test_ray_sweep",
    "test_ray_faults",
    "test_registry_races",
    "test_registry_concurrency",
    "test_registry_resume",
    "test_sweep_launcher",
    "test_ui_browser",
    "test_cluster",
}


# Modules whose fixture is costly to build and cannot be shared between workers, so each
# runs on one worker (beside others): the bad-input corpus (it makes immutable files and
# undoes that at the end) and vLLM's engine (a 30 s start, one per module).
ONE_WORKER_MODULES = {"test_bad_inputs", "test_vllm_backend"}


def pytest_itemcollected(item):
    # Marked as each test is collected, so the mark is there before xdist's own
    # pytest_collection_modifyitems turns xdist_group marks into groups.
    module = item.module.__name__
    if module in SERIAL_MODULES:
        item.add_marker(pytest.mark.xdist_group("serial"))
    elif module in ONE_WORKER_MODULES:
        item.add_marker(pytest.mark.xdist_group(module))


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        module = item.module.__name__
        params = item.callspec.params if hasattr(item, "callspec") else {}
        backend = params.get("db_url")
        on_postgres = "postgresql" in params.values() or "pg_admin_url" in item.fixturenames
        if module in E2E_MODULES or on_postgres:
            item.add_marker(pytest.mark.slow)
        if module in E2E_ON_SQLITE and backend == "postgresql" and not item.get_closest_marker("postgres_too"):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def shared_once(tmp_path_factory, name: str, build) -> Path:
    """A directory built once for the whole run, whichever xdist worker asks first.

    Workers share the parent of their base temporary directories; the first to take the
    lock builds `name` there (`build(path)`), the others wait, then reuse it. Without
    xdist it is built in this session's own directory.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            build(path)
            (path / ".built").touch()
    return path


@pytest.fixture(scope="session")
def committed_registry():
    """The committed results registry NAME (`docs/results/NAME.xz`, e.g. "lab.db"), as a
    SQLite file: decompressed once into grpoctl's cache (registry/compressed.py), which
    every worker and subprocess shares. Read it; a test that changes it copies it first."""
    from functools import cache

    from grpoctl.registry.compressed import decompressed

    return cache(lambda name: decompressed(REPO / "docs" / "results" / f"{name}.xz"))


def record_service_start(name: str, seconds: float) -> None:
    """Note how long a service (postgresql, ray, vllm) took to start, for .ci/run's ledger."""
    path = os.environ.get("GRPOCTL_CI_TIMINGS")
    if path:
        with open(path, "a") as out:  # one short line per write: appends from workers do not interleave
            out.write(f"{name} {seconds:.2f}\n")


def record_module_seconds(module_file: str, seconds: float) -> None:
    """Note how long a whole test module took, first setup to last teardown, for .ci/run's
    ledger (a module with a target of its own: tests/test_cluster.py's 5 minutes)."""
    record_service_start(Path(module_file).name, seconds)  # `NAME.py SECONDS`: .ci/run tells them apart


@pytest.fixture
def plotted_labels(monkeypatch) -> list[str]:
    """The legend label of every line matplotlib draws from now on, in order (a report's plots)."""
    import matplotlib.axes

    labels: list[str] = []
    plot = matplotlib.axes.Axes.plot

    def drawn(ax, x, y, *args, **kwargs):
        labels.append(kwargs.get("label", ""))
        return plot(ax, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", drawn)
    return labels


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from grpoctl.tiny.model import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny-model") / "model", seed=0)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A finished 3-step tiny run (fast_overrides, named `e2e`) in `registry.db` under the
    returned directory, trained once for the whole test run, whichever worker asks first.

    Tests that only read a trained run share it: they must not write to it.
    """
    import subprocess

    from grpoctl.tiny.model import create_tiny_model_dir

    def build(path: Path) -> None:
        model = create_tiny_model_dir(path / "model", seed=0)
        cmd = [sys.executable, str(REPO / "tests" / "digit_reward_train.py"), "train", "addition"]
        cmd += fast_overrides(model, path) + ["name=e2e"]
        env = {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"} | {"PYTHONPATH": str(REPO)}
        out = subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]

    return shared_once(tmp_path_factory, "trained-run", build)


def fast_overrides(model_dir: Path, workdir: Path, **extra) -> list[str]:
    """A run small enough for a unit test: seconds on one CPU thread."""
    values = {
        "model.path": str(model_dir),
        "loop.n_grpo_steps": 3,
        "rollout.rollout_batch_size": 16,
        "rollout.group_size": 4,
        "loop.train_batch_size": 16,
        "loop.gradient_accumulation_steps": 2,
        "rollout.min_tokens": 1,
        "rollout.max_tokens": 12,
        "eval.max_tokens": 12,
        "eval.subset": 16,
        "eval.every": 2,
        "checkpoint.every": 2,
        "checkpoint.dir": str(workdir / "ckpt"),
        "runtime.cache_dir": str(workdir / "cache"),
        "runtime.threads": 1,
        "logging.live": "false",
        "optimizer.lr": 1e-3,
        "optimizer.warmup_steps": 0,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def lab_overrides(model: str | Path, workdir: Path, **extra) -> list[str]:
    """A 2-step run of experiments/lab.yaml, small enough for a test (`model` a lab model dir or name)."""
    values = {
        "model.path": model,
        "loop.n_grpo_steps": 2,
        "rollout.rollout_batch_size": 16,
        "loop.train_batch_size": 16,
        "rollout.group_size": 4,
        "rollout.max_tokens": 24,
        "eval.subset": 8,
        "eval.max_tokens": 24,
        "eval.every": 2,
        "checkpoint.dir": workdir / "ckpt",
        "runtime.cache_dir": workdir / "cache",
        "logging.live": "false",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def grpoctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "grpoctl", *args]


# --------------------------------------------------------------------------- registries
#
# Registry tests run against SQLite and PostgreSQL from one fixture, `db_url`. The
# PostgreSQL server is $GRPOCTL_TEST_PG_URL (an admin URL) when set, else a throwaway
# server this session starts itself when PostgreSQL is installed (tests/pg_server.py),
# else those tests skip; under CI=true a missing server or driver fails instead.

IN_CI = os.environ.get("CI", "").lower() == "true"


def _no_postgres(reason: str):
    if IN_CI:
        pytest.fail(f"PostgreSQL tests cannot run under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory):
    """An admin URL (a user that may CREATE DATABASE) of the tests' PostgreSQL server."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _no_postgres("psycopg is not installed (pip install 'grpoctl[postgres]')")
    given = os.environ.get("GRPOCTL_TEST_PG_URL")
    if given:
        yield given
        return
    import pg_server

    if pg_server.find_bindir() is None:
        _no_postgres("PostgreSQL is not installed and $GRPOCTL_TEST_PG_URL is not set")
    root = Path(tempfile.mkdtemp(prefix="grpoctl-pg-"))
    try:
        started = time.monotonic()
        url = pg_server.start(root)
        record_service_start("postgresql", time.monotonic() - started)
        yield url
    finally:
        pg_server.stop(root)
        shutil.rmtree(root, ignore_errors=True)


def pg_execute(admin_url: str, *statements: str) -> None:
    """Run statements outside a transaction (CREATE/DROP DATABASE need that)."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(admin_url)
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database, autocommit=True
    ) as conn:
        for statement in statements:
            conn.execute(statement)


def fresh_pg_database(admin_url: str) -> str:
    """A new, empty database on the server; returns its URL (same user and password)."""
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_execute(admin_url, f"CREATE DATABASE {name} TEMPLATE template0")
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(admin_url: str, url: str) -> None:
    from sqlalchemy.engine import make_url

    pg_execute(admin_url, f"DROP DATABASE IF EXISTS {make_url(url).database} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A registry location that does not exist yet: a SQLite path, or an empty PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "registry.db")
        return
    admin = request.getfixturevalue("pg_admin_url")
    url = fresh_pg_database(admin)
    yield url
    drop_pg_database(admin, url)


def registry_rows(url: str) -> dict[str, list[tuple]]:
    """Every row of every table, in id order: what 'nothing was written' compares."""
    from sqlalchemy import MetaData, create_engine, select

    from grpoctl.registry.engine import resolve_url

    engine = create_engine(resolve_url(url))
    try:
        meta = MetaData()
        with warnings.catch_warnings():  # the expression index cannot be reflected; it is not data
            warnings.simplefilter("ignore")
            meta.reflect(engine)
        with engine.connect() as conn:
            return {
                name: [tuple(r) for r in conn.execute(select(table).order_by(*table.primary_key.columns))]
                for name, table in sorted(meta.tables.items())
            }
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- signals

# What a process started from a terminal has: a test that launches `grpoctl` and presses
# Ctrl-C relies on it, because an ignored or blocked SIGINT is inherited through fork and
# exec (a sweep that starts with SIGINT ignored takes itself for a background job and
# ignores Ctrl-C). In-process code run by earlier tests on the same worker (a trainer's
# stop handlers, Ray's driver, grader pools) may leave either behind.
TERMINAL_SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


@pytest.fixture(autouse=True)
def _terminal_signals():
    """Every test starts with a terminal's SIGINT and SIGTERM handling, nothing blocked."""
    for sig, handler in TERMINAL_SIGNALS.items():
        if signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
    if signal.pthread_sigmask(signal.SIG_BLOCK, []):
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
    yield
