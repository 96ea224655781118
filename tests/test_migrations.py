"""Schema migrations: the first revision is exactly the schema of the registries that
exist (db81e36's), the chain ends where models.py is, and an old registry built by that
code (tests/fixtures/registry_v0.db, see make_registry_v0.py) upgrades on SQLite and,
once loaded, on PostgreSQL, and then shows the same runs and values.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
import zipfile
from datetime import UTC
from pathlib import Path

import pytest
from cli import Result, invoke
from sqlalchemy import MetaData, create_engine, insert, select, text

from grpoctl.config import load_config
from grpoctl.registry import Registry, schema
from grpoctl.rules import config_hash

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
BEFORE = json.loads((FIXTURES / "registry_v0_before.json").read_text())
RUNS = ("lr-sweep-lr=1e-4-s0", "lr-sweep-lr=1e-3-s0", "lr-sweep-lr=3e-4-s0", "solo-broken")


def grpoctl(*args: str, cwd: Path, python: str | None = None) -> Result | subprocess.CompletedProcess:
    """In this process (tests/cli.py), or in a subprocess of another interpreter (`python`)."""
    if python is None:
        return invoke(*args, cwd=cwd, env={"GRPOCTL_DB": None})
    env = {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [python, "-m", "grpoctl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def sqlite_objects(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    conn.close()
    return sorted(r for r in rows if r[2] != "alembic_version")


def test_revision_0001_is_exactly_the_schema_registries_have_today(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'base.db'}")
    with engine.connect() as conn, conn.begin():
        from alembic import command

        command.upgrade(schema._alembic_config(conn, None), "0001")
    engine.dispose()
    assert sqlite_objects(tmp_path / "base.db") == sqlite_objects(FIXTURES / "registry_v0.db")


def test_the_chain_ends_at_head_and_matches_the_models(db_url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlmodel import SQLModel

    from grpoctl.registry.schema import _alembic_config

    registry = Registry(db_url)
    with registry.engine.connect() as conn:
        scripts = ScriptDirectory.from_config(_alembic_config(conn, None))
        assert scripts.get_current_head() == schema.HEAD
        assert [s.revision for s in reversed(list(scripts.walk_revisions()))] == list(schema.REVISIONS)
        with warnings.catch_warnings():  # the COALESCE index cannot be reflected, so is not compared
            warnings.simplefilter("ignore")
            assert compare_metadata(MigrationContext.configure(conn), SQLModel.metadata) == []
        indexes = (
            conn.execute(
                text(
                    "SELECT sql FROM sqlite_master WHERE name = 'ux_metric_step_key'"
                    if conn.dialect.name == "sqlite"
                    else "SELECT indexdef FROM pg_indexes WHERE indexname = 'ux_metric_step_key'"
                )
            )
            .scalars()
            .all()
        )
    assert len(indexes) == 1 and "coalesce" in indexes[0].lower() and "unique" in indexes[0].lower()


# --------------------------------------------------------------------------- the old registry


def lay_out_checkpoints(project: Path) -> None:
    """The checkpoint folders that the old registry says are still on disk."""
    with sqlite3.connect(FIXTURES / "registry_v0.db") as conn:
        for (path,) in conn.execute("SELECT path FROM checkpoint WHERE deleted = 0"):
            (project / path).mkdir(parents=True)
            (project / path / "model.safetensors").write_text("weights")
    conn.close()


def load_into_postgres(url: str) -> None:
    """What an old PostgreSQL registry is: db81e36's tables, its rows, no alembic_version."""
    target = create_engine(url)
    with target.connect() as conn, conn.begin():
        from alembic import command

        command.upgrade(schema._alembic_config(conn, None), "0001")
        conn.execute(text("DROP TABLE alembic_version"))
    source = create_engine(f"sqlite:///{FIXTURES / 'registry_v0.db'}")
    meta = MetaData()
    meta.reflect(source)
    with source.connect() as src, target.begin() as dst:
        for table in meta.sorted_tables:
            rows = [dict(r._mapping) for r in src.execute(select(table))]
            for row in rows:  # SQLite hands back naive UTC datetimes
                for key, value in row.items():
                    if hasattr(value, "tzinfo") and value.tzinfo is None:
                        row[key] = value.replace(tzinfo=UTC)
            if rows:
                dst.execute(insert(table), rows)
            dst.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), (SELECT max(id) FROM {table.name}))")
            )
    source.dispose()
    target.dispose()


@pytest.fixture
def old_registry(db_url, tmp_path):
    """(--db value, project dir): the old registry, with its checkpoints on disk in the project."""
    project = tmp_path / "project"
    project.mkdir()
    lay_out_checkpoints(project)
    if db_url.startswith("postgresql"):
        load_into_postgres(db_url)
        return db_url, project
    shutil.copy(FIXTURES / "registry_v0.db", project / "registry.db")
    return str(project / "registry.db"), project


def assert_keeps(new, old, where: str = "") -> None:
    """`new` holds everything `old` held, with the same values (NaN now null); it may hold more keys."""
    if isinstance(old, dict):
        assert isinstance(new, dict), where
        for key, value in old.items():
            assert key in new, f"{where}.{key} is gone"
            assert_keeps(new[key], value, f"{where}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            assert_keeps(a, b, f"{where}[{i}]")
    elif isinstance(old, float) and math.isnan(old):
        assert new is None, where  # compare's JSON writes null for NaN now (strict JSON)
    else:
        assert new == old, where


def without_duplicate_keys(points: list) -> list:
    seen, out = set(), []
    for step, value in points:
        if step not in seen:
            seen.add(step)
            out.append([step, value])
    return out


@pytest.mark.slow
def test_an_old_registry_upgrades_and_shows_the_same_runs_and_values(old_registry, tmp_path):
    db, project = old_registry
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    is_pg = db.startswith("postgresql")

    status = grpoctl("db", "status", "--db", db, cwd=elsewhere)
    assert "revision 0001 (made before grpoctl had migrations)" in status.stdout, status.stderr
    if is_pg:
        # PostgreSQL, shared by many: commands refuse an old schema in one line, and not
        # even a command that writes upgrades it; `db upgrade` does, under its lock, taking
        # relative paths from where it runs.
        refused = grpoctl("runs", "list", "--db", db, cwd=elsewhere)
        assert refused.returncode == 2 and "schema revision 0001, older" in refused.stderr
        assert "grpoctl db upgrade" in refused.stderr and refused.stderr.count("\n") == 1
        tag = grpoctl("runs", "tag", "solo-broken", "x", "--db", db, cwd=elsewhere)
        assert tag.returncode == 2 and "grpoctl db upgrade" in tag.stderr
        upgraded = grpoctl("db", "upgrade", "--db", db, cwd=project)
        assert upgraded.returncode == 0, upgraded.stderr
        assert f"from schema revision 0001 to {schema.HEAD}" in upgraded.stdout
    else:
        # SQLite upgrades on open, by any command that can write the file, after a copy;
        # relative paths are taken from the file's directory, wherever the command runs.
        first = grpoctl("runs", "list", "--db", db, cwd=elsewhere)
        assert first.returncode == 0, first.stderr
        backup = project / "registry.db.bak-0001"
        assert first.stderr.strip() == (
            f"note: upgraded registry {db} from schema revision 0001 to {schema.HEAD} (the registry before: {backup})"
        )
        assert sqlite_objects(backup) == sqlite_objects(FIXTURES / "registry_v0.db")
        with sqlite3.connect(backup) as a, sqlite3.connect(FIXTURES / "registry_v0.db") as b:
            assert list(a.iterdump()) == list(b.iterdump())
    again = grpoctl("db", "upgrade", "--db", db, cwd=elsewhere)
    assert again.returncode == 0 and f"already at schema revision {schema.HEAD}" in again.stdout

    # The same runs, statuses and figures as db81e36's code showed.
    listed = grpoctl("runs", "list", "--db", db, cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:6] for line in listed.stdout.splitlines()[2:]] == [
        line.split()[:6] for line in BEFORE["list"].splitlines()[2:]
    ]
    compared = grpoctl("compare", "lr-sweep", "--format", "json", "--db", db, cwd=elsewhere)
    assert compared.returncode == 0, compared.stderr
    # The sweep still finds all its members, with every key compare printed then (later
    # versions only add keys: the comparison against the baseline). Two columns mean
    # something else since issue 18: grad_norm was the last step's norm and is the mean
    # per-step norm (one gradient-norm measure everywhere), null where a step's is NaN;
    # best_acc no longer counts the untrained step-0 eval.
    from grpoctl.analysis.compare import grad_norm_measure

    expected = json.loads(json.dumps(BEFORE["compare"]))
    for row in expected["rows"]:
        (run_name,) = row["runs"]
        series = [(s, math.nan if v is None else v) for s, v in BEFORE["show"][run_name]["metrics"]["train/grad_norm"]]
        mean = grad_norm_measure(series)
        row["grad_norm"] = None if mean is None or math.isnan(mean) else mean
        trained = [e for e in BEFORE["show"][run_name]["evals"] if e["step"] > 0]
        best = max(trained, key=lambda e: (e["accuracy"], -e["step"]))
        row["best_acc"], row["best_step"] = best["accuracy"], best["step"]
        row["best_acc_se"] = math.sqrt(best["accuracy"] * (1 - best["accuracy"]) / best["n"])
    assert_keeps(json.loads(compared.stdout), expected)
    for name in RUNS:
        shown = json.loads(grpoctl("runs", "show", name, "--format", "json", "--db", db, cwd=elsewhere).stdout)
        before = BEFORE["show"][name]
        # Migrations 0006, 0008 and 0009 only add the sampled eval's, the eval sets' and the
        # per-problem outcomes' columns; an old row reads as a greedy eval of the run's one
        # unnamed, headline set, its outcomes not recorded.
        assert [{k: e[k] for k in b} for e, b in zip(shown["evals"], before["evals"], strict=True)] == before["evals"]
        for e, b in zip(shown["evals"], before["evals"], strict=True):
            assert set(e) - set(b) <= {"kind", "sampling", "scores", "breakdown", "eval_set", "headline", "outcomes"}
            assert e.get("outcomes") is None
            assert e.get("kind", "greedy") == "greedy"
            assert e.get("eval_set", "") == "" and e.get("headline", True) is True
        metrics = {k: without_duplicate_keys(v) for k, v in before["metrics"].items()}
        assert shown["metrics"] == metrics  # NaN included; the duplicated key is gone
        keys = set(before["run"]) - {"config_hash", "output_dir"}
        assert {k: shown["run"][k] for k in keys} == {k: before["run"][k] for k in keys}
        # The real schema changes: absolute paths where the root is known, the claim columns.
        assert shown["run"]["claim_token"] is None
        for ckpt, old in zip(shown["checkpoints"], before["checkpoints"], strict=True):
            assert ckpt["path"] == str(project / old["path"]) and ckpt["deleted"] == old["deleted"]
        if name == "solo-broken":  # nothing of it exists on disk: its path stays as it was
            assert shown["run"]["output_dir"] == before["run"]["output_dir"]
        else:
            assert shown["run"]["output_dir"] == str(project / before["run"]["output_dir"])
    # Its members are now known by the hash today's code computes for the same variants.
    registry = Registry(db, readonly=True)
    for member, run in registry.sweep_members("lr-sweep"):
        lr = member.variant.split("=")[1]
        cfg = load_config(None, [f"optimizer.lr={lr}", "loop.n_grpo_steps=6", "name=x", "group=lr-sweep"])
        assert member.config_hash == config_hash(cfg) == run.config_hash
    reported = grpoctl("report", "lr-sweep", "-o", str(tmp_path / "rep"), "--db", db, cwd=elsewhere)
    assert reported.returncode == 0, reported.stderr
    text_ = (tmp_path / "rep" / "report.md").read_text()
    for name in RUNS[:3]:
        assert name in text_


def test_sqlite_upgrades_by_itself_when_a_command_writes(tmp_path):
    db = tmp_path / "registry.db"
    shutil.copy(FIXTURES / "registry_v0.db", db)
    tagged = grpoctl("runs", "tag", "solo-broken", "seen", cwd=tmp_path)
    assert tagged.returncode == 0, tagged.stderr
    assert (tmp_path / "registry.db.bak-0001").exists()
    assert "up to date" in grpoctl("db", "status", cwd=tmp_path).stdout
    assert Registry(str(db), readonly=True).tags(4) == ["broken", "seen"]


def test_postgres_upgrade_waits_for_the_advisory_lock(db_url, tmp_path):
    if not db_url.startswith("postgresql"):
        pytest.skip("the advisory lock is PostgreSQL's")
    load_into_postgres(db_url)
    engine = create_engine(db_url)
    holder = engine.connect()
    holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": schema.MIGRATION_LOCK_KEY})
    result: dict = {}
    # A process of its own: it blocks on the lock while this one holds it.
    upgrade = lambda: grpoctl("db", "upgrade", "--db", db_url, cwd=tmp_path, python=sys.executable)  # noqa: E731
    thread = threading.Thread(target=lambda: result.update(done=upgrade()))
    thread.start()
    time.sleep(3)
    assert thread.is_alive()  # waiting for whoever holds the lock
    holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": schema.MIGRATION_LOCK_KEY})
    holder.commit()
    thread.join(timeout=60)
    holder.close()
    engine.dispose()
    assert result["done"].returncode == 0 and f"to {schema.HEAD}" in result["done"].stdout, result["done"].stderr


@pytest.mark.slow
def test_a_wheel_carries_the_migrations_and_its_install_runs_them(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(wheels.glob("grpoctl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for revision in (
        "0001_base",
        "0002_run_identity",
        "0003_absolute_paths",
        "0004_claims",
        "0005_members_on_many_machines",
        "0006_sampled_evals",
        "0007_data_fingerprint",
        "0008_eval_sets",
        "0009_problem_outcomes",
        "0010_sweep_design",
    ):
        assert f"grpoctl/registry/migrations/versions/{revision}.py" in names
    assert "grpoctl/registry/migrations/env.py" in names

    # A venv with the wheel installed for real (not editable); its dependencies are the
    # test environment's, reached through a .pth line (which runs none of its .pth files,
    # so the editable grpoctl there stays out of it).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "sqlmodel").exists())
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    Path(site, "test-deps.pth").write_text(deps + "\n")
    where = subprocess.run(
        [python, "-c", "import grpoctl.registry.schema as s; print(s.migrations_dir())"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert where.returncode == 0 and where.stdout.startswith(site), (where.stdout, where.stderr)

    db = tmp_path / "registry.db"
    shutil.copy(FIXTURES / "registry_v0.db", db)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRPOCTL_DB")} | {"COLUMNS": "200"}
    upgraded = subprocess.run(
        [python, "-m", "grpoctl", "db", "upgrade", "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert upgraded.returncode == 0 and f"to {schema.HEAD}" in upgraded.stdout, upgraded.stderr
    listed = subprocess.run(
        [python, "-m", "grpoctl", "runs", "list", "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listed.returncode == 0 and "lr-sweep-lr=1e-4-s0" in listed.stdout, listed.stderr


def test_members_no_run_answered_are_dropped_and_the_rest_rehashed(tmp_path):
    db = tmp_path / "registry.db"
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn, conn.begin():
        from alembic import command

        command.upgrade(schema._alembic_config(conn, None), "0001")
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(
            text(
                "INSERT INTO sweep (id, name, kind, spec, created_at) VALUES (1, 's', 'sweep', '{}', "
                "'2026-01-01 00:00:00')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO sweepmember (sweep_id, config_hash, variant, seed) VALUES "
                "(1, 'old-ran', 'a', 0), (1, 'old-never-ran', 'b', 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO run (name, status, config, config_diff, config_hash, seed, host, device, version, "
                "total_steps, last_step, created_at, heartbeat_at) VALUES ('r', 'finished', :config, '{}', "
                "'old-ran', 0, 'h', 'cpu', '0', 1, 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            ),
            {"config": json.dumps({"optimizer": {"lr": 1e-3}, "checkpoint": {"dir": "/x"}})},
        )
    engine.dispose()
    registry = Registry(str(db))  # a command that writes upgrades SQLite by itself
    members = registry.sweep_members("s")
    assert [(m.variant, r.name if r else None) for m, r in members] == [("a", "r")]
    assert members[0][0].config_hash == config_hash({"optimizer": {"lr": 1e-3}, "checkpoint": {"dir": "/y"}})
