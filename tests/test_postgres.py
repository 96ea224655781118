"""PostgreSQL specifics: where the password may come from, a role that may only read,
libpq options through the URL, and how many connections a process holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import Result, invoke
from conftest import pg_execute
from sqlalchemy import text
from sqlalchemy.engine import make_url

from grpoctl.registry import Registry
from grpoctl.registry.engine import PG_MAX_OVERFLOW, PG_POOL_SIZE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pg_url(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    with Registry(db_url) as registry:
        run = registry.create_run(
            name="one",
            config={"optimizer": {"lr": 1e-3}},
            config_diff={},
            config_hash="h",
            seed=0,
            total_steps=2,
            group="g",
            variant="a",
        )
        registry.log_step(run.id, 1, {"train/reward": 0.5, "eval/accuracy": 0.25})
        registry.set_status(run.id, "finished")
    return db_url


def grpoctl(*args: str, cwd: Path, **env) -> Result:
    # In-process (tests/cli.py); libpq reads PGPASSWORD and PGPASSFILE at each connect.
    return invoke(*args, cwd=cwd, env={"GRPOCTL_DB": None, "PGPASSWORD": None, "PGPASSFILE": None, **env})


def without_password(url: str) -> str:
    u = make_url(url)
    return f"postgresql+psycopg://{u.username}@{u.host}:{u.port}/{u.database}"


def test_the_password_may_come_from_pgpassword_or_pgpass(pg_url, tmp_path):
    bare, password = without_password(pg_url), make_url(pg_url).password
    assert grpoctl("runs", "list", "--db", bare, cwd=tmp_path, PGPASSWORD=password).returncode == 0
    pgpass = tmp_path / "pgpass"
    u = make_url(pg_url)
    pgpass.write_text(f"{u.host}:{u.port}:*:{u.username}:{password}\n")
    pgpass.chmod(0o600)
    listed = grpoctl("runs", "list", "--db", bare, cwd=tmp_path, PGPASSFILE=str(pgpass))
    assert listed.returncode == 0 and "one" in listed.stdout, listed.stderr
    # Nowhere to get it from: one line, asking for it.
    none = grpoctl("runs", "list", "--db", bare, cwd=tmp_path, PGPASSFILE=str(tmp_path / "absent"))
    assert none.returncode == 2 and none.stderr.count("\n") == 1, none.stderr
    assert "password" in none.stderr


def test_a_read_only_role_can_read_but_not_write(pg_url, pg_admin_url, tmp_path):
    database = make_url(pg_url).database
    role = f"reader_{database}"
    pg_execute(pg_admin_url, f"CREATE ROLE {role} LOGIN PASSWORD 'readpw'")
    pg_execute(
        pg_url, f"GRANT USAGE ON SCHEMA public TO {role}", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    )
    reader = make_url(pg_url).set(username=role, password="readpw").render_as_string(hide_password=False)
    try:
        for args in (
            ["runs", "list"],
            ["runs", "show", "one"],
            ["compare", "g"],
            ["db", "status"],
            ["report", "g", "-o", str(tmp_path / "rep")],
        ):
            result = grpoctl(*args, "--db", reader, cwd=tmp_path)
            assert result.returncode == 0, (args, result.stderr)
        for args in (["runs", "tag", "one", "x"], ["train", "steps=1"], ["db", "upgrade"]):
            result = grpoctl(*args, "--db", reader, cwd=tmp_path)
            assert result.returncode == 2 and result.stderr.count("\n") == 1, (args, result.stderr)
            assert f"user '{role}' may only read the registry" in result.stderr, result.stderr
            assert "readpw" not in result.stderr
        assert list(tmp_path.glob("outputs")) == []
    finally:
        pg_execute(
            pg_url, f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}", f"REVOKE ALL ON SCHEMA public FROM {role}"
        )
        pg_execute(pg_admin_url, f"DROP ROLE {role}")


def test_libpq_options_pass_through_the_url(pg_url):
    with Registry(pg_url + "?sslmode=disable&application_name=sweep-7") as registry:
        with registry.engine.connect() as conn:
            assert conn.execute(text("SHOW application_name")).scalar() == "sweep-7"
            assert conn.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")).scalar() is False


def test_a_process_holds_few_connections(pg_url):
    # 16 trainers x (2 + 1) connections stay far below max_connections = 100.
    assert (PG_POOL_SIZE, PG_MAX_OVERFLOW) == (2, 1)
    registry = Registry(pg_url)
    run = registry.create_run(name="busy", config={}, config_diff={}, config_hash="b", seed=0, total_steps=50)
    for step in range(50):
        registry.log_step(run.id, step, {"x": 1.0})
        registry.heartbeat(run.id)
        registry.list_runs()
    with registry.engine.connect() as conn:
        mine = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'grpoctl' "
                "AND datname = current_database()"
            )
        ).scalar()
        limit = int(conn.execute(text("SHOW max_connections")).scalar())
    assert 1 <= mine <= PG_POOL_SIZE + PG_MAX_OVERFLOW and limit == 100
    registry.close()


def test_a_reader_cannot_write_even_by_accident(pg_url):
    with Registry(pg_url, readonly=True) as registry:
        with registry.engine.connect() as conn:
            assert conn.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
        with pytest.raises(Exception, match="read-only transaction"):
            registry.add_tag("one", "x")
