"""The dashboard's safety (grpoctl/ui/guard.py, params.py, app.py): static files cannot
be escaped, no parameter reaches SQL or a traceback, a huge or malformed query is
refused, a foreign Host header is refused, the network needs a token, the server never
writes (and serves every view under a PostgreSQL role that may only SELECT), and the
registry's password appears in no answer and nowhere in the server's log."""

from __future__ import annotations

import secrets
import sqlite3
import time
import uuid
from dataclasses import dataclass

import pytest
import ui_registry
from conftest import drop_pg_database, fresh_pg_database, pg_execute, registry_rows
from sqlalchemy.engine import make_url
from ui_server import Server, free_port

from grpoctl import metrics
from grpoctl.errors import UserError

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install 'grpoctl[ui]')")
import httpx  # noqa: E402  (what starlette's test client is built on)
from starlette.testclient import TestClient  # noqa: E402

from grpoctl.registry import schema  # noqa: E402
from grpoctl.ui.app import create_app  # noqa: E402

BASE = "http://127.0.0.1:8321"
ATTACKS = [
    "' OR 1=1 --",
    "1; DROP TABLE run",
    "abl' UNION SELECT password FROM pg_shadow --",
    "../../../etc/passwd",
    "%00",
    "<script>alert(1)</script>",
    "9" * 400,
    "-5",
    "1e9999",
    "train/reward'); DELETE FROM metric; --",
]


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    return ui_registry.shared_sqlite(tmp_path_factory)


@pytest.fixture(scope="module")
def client(registry_url):
    app = create_app(registry_url[0])
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as test_client:
        yield test_client
    app.state.registry.close()


def every_request(run_id: int) -> list[str]:
    """Each endpoint with each parameter set to each attack."""
    from urllib.parse import quote

    paths = []
    for attack in ATTACKS:
        a = quote(attack, safe="")
        paths += [
            f"/api/studies/{a}",
            f"/api/studies/{a}/curves",
            f"/api/studies/{a}/compare",
            f"/api/runs/{a}",
            f"/api/runs/{a}/curves",
            f"/api/runs/{a}/samples",
            f"/api/runs/{a}/log",
        ]
        for key in ("metric", "points", "smoothing", "from", "to", "after_step"):
            paths += [f"/api/studies/abl/curves?{key}={a}", f"/api/runs/{run_id}/curves?{key}={a}"]
        for key in ("step", "kind", "filter", "limit"):
            paths.append(f"/api/runs/{run_id}/samples?{key}={a}")
        paths += [f"/api/runs/{run_id}/log?after_id={a}", f"/api/runs?{a}=1", f"/api/meta?x={a}"]
        # endpoints that take no parameter refuse any, attacks included
        paths += [f"/api/studies/abl?{a}=1", f"/api/studies/abl/compare?{a}=1", f"/api/runs/{run_id}?{a}=1"]
    return paths


def every_view(ids: dict[str, int]) -> list[str]:
    """Each endpoint as the page asks for it, over tests/ui_registry.py's registry: all
    of them answer 200."""
    paths = ["/", "/static/app.js", "/api/meta", "/api/runs", "/api/studies/abl", "/api/studies/abl/compare"]
    paths += [f"/api/studies/abl/curves?metric={m}" for m in (metrics.EVAL_ACCURACY, metrics.REWARD, metrics.GRAD_NORM)]
    paths.append(f"/api/studies/abl/curves?metric={metrics.REWARD}&after_step=5")
    for run_id in ids.values():
        paths += [
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/curves?metric={metrics.REWARD}",
            f"/api/runs/{run_id}/curves?metric={metrics.REWARD}&after_step=2",
            f"/api/runs/{run_id}/samples?filter=wrong",
            f"/api/runs/{run_id}/log",
        ]
    return paths


def test_no_parameter_reaches_sql_or_a_traceback_and_nothing_is_written(client, registry_url):
    url, ids = registry_url
    before = registry_rows(url)
    for path in every_request(ids["solo-live"]):
        response = client.get(path)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text[:300])
        assert "Traceback" not in response.text and "sqlalchemy" not in response.text.lower(), path
        assert set(response.json()) == {"error"}, path
    assert registry_rows(url) == before


def test_static_files_cannot_be_escaped(client):
    for path in (
        "/static/../app.py",
        "/static/%2e%2e/app.py",
        "/static/..%2fapp.py",
        "/static/vendor/../../api.py",
        "/static/%2e%2e/%2e%2e/registry/models.py",
        "/static//etc/passwd",
        "/static/..%5capp.py",
    ):
        response = client.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert "import" not in response.text and "root:" not in response.text, path
    assert client.get("/static/vendor/uplot/LICENSE").text.startswith("The MIT License")


def test_a_huge_or_malformed_query_is_refused(client, registry_url):
    run_id = registry_url[1]["solo-live"]
    assert client.get(f"/api/runs?{'x' * 5000}=1").status_code == 414
    assert client.get(f"/api/runs/{run_id}/curves?metric={'a/' + 'b' * 5000}").status_code == 414
    for path, line in (
        (f"/api/runs/{run_id}/curves?points=5", "'points' must be between 10 and 2000"),
        (f"/api/runs/{run_id}/curves?points=10&points=20", "given more than once"),
        (f"/api/runs/{run_id}/curves?smoothing=1", "'smoothing' must be below 1"),
        (f"/api/runs/{run_id}/curves?from=9&to=3", "'to' must not be below 'from'"),
        (f"/api/runs/{run_id}/curves?metric=reward", "is not a metric name"),
        (f"/api/runs/{run_id}/curves?colour=red", "unknown query parameter 'colour'"),
        (f"/api/runs/{run_id}/samples?filter=maybe", "'filter' must be one of all, right, wrong"),
    ):
        response = client.get(path)
        assert response.status_code == 400 and line in response.json()["error"], (path, response.text)
    assert client.post("/api/runs").status_code == 405


def test_a_foreign_host_header_is_refused(client):
    for host in ("evil.example", "127.0.0.1.evil.example", "localhost.evil", "[::2]:8321", ""):
        response = client.get("/api/runs", headers={"host": host})
        assert response.status_code == 400 and "Host" in response.json()["error"], host
    for host in ("localhost:8321", "127.0.0.1", "[::1]:8321", "LOCALHOST"):
        assert client.get("/api/runs", headers={"host": host}).status_code == 200, host


def test_a_network_bind_needs_a_token_compared_on_every_request(registry_url):
    url = registry_url[0]
    with pytest.raises(UserError, match="needs an access token"):
        create_app(url, host="0.0.0.0")
    app = create_app(url, host="10.1.2.3", token="s3cret-token")
    with TestClient(app, base_url="http://10.1.2.3:8321") as client:
        assert client.get("/api/runs").status_code == 401
        assert client.get("/api/runs?token=wrong").status_code == 401
        assert client.get("/", headers={"host": "127.0.0.1"}).status_code == 401
        assert client.get("/api/runs", headers={"x-grpoctl-token": "s3cret-token"}).status_code == 200
        first = client.get("/?token=s3cret-token")
        assert first.status_code == 200 and "HttpOnly" in first.headers["set-cookie"]
        assert client.get("/api/runs").status_code == 200  # the cookie carries it now
        assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400
    app.state.registry.close()


def test_answers_carry_no_framing_no_foreign_scripts_no_referrer(client):
    headers = client.get("/").headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"


def test_a_registry_upgraded_under_the_server_is_refused(tmp_path):
    url = str(tmp_path / "registry.db")
    ui_registry.build(url)
    app = create_app(url)
    with TestClient(app, base_url=BASE) as client:
        assert client.get("/api/runs").status_code == 200
        with sqlite3.connect(url) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '9999'")
        response = client.get("/api/runs")
        assert response.status_code == 503
        assert "schema revision 9999" in response.json()["error"] and schema.HEAD in response.json()["error"]
    app.state.registry.close()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_postgres_password_in_no_answer_pool_of_two_and_a_statement_timeout(db_url):
    password = make_url(db_url).password
    assert password, "the test server's URL carries a password"
    ids = ui_registry.build(db_url)
    app = create_app(db_url)
    registry = app.state.registry
    assert registry.engine.pool.size() == 2 and registry.engine.pool._max_overflow == 0
    with registry.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "5s"
        assert conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as client:
        for path in every_view(ids) + every_request(ids["solo-live"])[:40]:
            assert password not in client.get(path).text, path
    registry.close()


@dataclass
class Reader:
    """A login role that may only read one registry, as a team gives its dashboard."""

    url: str  # the role's URL, password included
    role: str
    password: str  # random and long: found in a text, it cannot be there by chance
    database_url: str  # the same database as the tests' admin user
    ids: dict[str, int]


@pytest.fixture
def reader(pg_admin_url):
    """tests/ui_registry.py's registry in a fresh database, and a role granted nothing on
    it but CONNECT, USAGE and SELECT. Roles belong to the whole server: it is dropped after."""
    database_url = fresh_pg_database(pg_admin_url)
    role, password = f"ui_reader_{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(24)
    try:
        ids = ui_registry.build(database_url)
        pg_execute(
            database_url,
            f"CREATE ROLE {role} LOGIN PASSWORD '{password}'",
            f"GRANT CONNECT ON DATABASE {make_url(database_url).database} TO {role}",
            f"GRANT USAGE ON SCHEMA public TO {role}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",
        )
        url = make_url(database_url).set(username=role, password=password).render_as_string(hide_password=False)
        yield Reader(url, role, password, database_url, ids)
    finally:
        drop_pg_database(pg_admin_url, database_url)  # its grants go with it
        pg_execute(pg_admin_url, f"DROP ROLE IF EXISTS {role}")


def test_postgres_a_select_only_role_serves_every_view_and_writes_nothing(reader):
    import psycopg

    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # else this test would prove nothing
        pg_execute(reader.url, "DELETE FROM tag")
    before = registry_rows(reader.database_url)
    app = create_app(reader.url)
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as client:
        for path in every_view(reader.ids):
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
    app.state.registry.close()
    assert registry_rows(reader.database_url) == before


def _until_disconnected(database_url: str, role: str) -> None:
    """Wait until the server has ended every session of `role` (pg_terminate_backend only
    asks: a session still there would answer the dashboard's next query)."""
    import psycopg

    url = make_url(database_url)
    deadline = time.monotonic() + 30
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database, autocommit=True
    ) as conn:
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)).fetchone()[0]:
            assert time.monotonic() < deadline, f"the sessions of {role} did not end"
            time.sleep(0.05)


def test_postgres_password_never_reaches_the_servers_log(reader, pg_admin_url, tmp_path):
    """`grpoctl ui` over a URL with a password, in a subprocess, everything it prints
    captured: it serves; its role's password changes and its connections are cut (it
    answers 503 and logs why); the password is put back (it serves again); the database
    is dropped (503 again). A start while the role is refused fails in one line. The
    password is in no answer, and nowhere in the server's log."""
    from cli import invoke

    server = Server(reader.url, tmp_path)
    answers = []
    try:
        answers.append(httpx.get(server.url + "/api/runs", timeout=60))
        assert answers[-1].status_code == 200, answers[-1].text
        pg_execute(
            reader.database_url,
            f"ALTER ROLE {reader.role} PASSWORD '{secrets.token_urlsafe(24)}'",
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{reader.role}'",
        )
        _until_disconnected(reader.database_url, reader.role)
        answers.append(httpx.get(server.url + "/api/studies/abl/compare", timeout=60))
        assert answers[-1].status_code == 503 and "password authentication failed" in answers[-1].json()["error"]
        refused_start = invoke("ui", "--db", reader.url, "--port", str(free_port()))
        assert refused_start.returncode == 2 and "password authentication failed" in refused_start.stderr
        assert len(refused_start.stderr.strip().splitlines()) == 1, refused_start.stderr
        assert reader.password not in refused_start.stdout + refused_start.stderr
        pg_execute(reader.database_url, f"ALTER ROLE {reader.role} PASSWORD '{reader.password}'")
        answers.append(httpx.get(server.url + f"/api/runs/{reader.ids['solo-live']}", timeout=60))
        assert answers[-1].status_code == 200, answers[-1].text
        drop_pg_database(pg_admin_url, reader.database_url)
        answers.append(httpx.get(server.url + "/api/runs", timeout=60))
        assert answers[-1].status_code == 503 and "has no database" in answers[-1].json()["error"]
    finally:
        server.stop()
    log = server.log_path.read_text()
    # What it printed names the registry and the failures: the password had its chances.
    assert reader.role in log and log.count("registry error") == 2, log
    assert "password authentication failed" in log and "has no database" in log, log
    assert reader.password not in log
    assert not [a.url for a in answers if reader.password in a.text]


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    from cli import invoke

    for args, line in (
        (["--port", "0"], "--port must be between 1 and 65535"),
        (["--poll", "0.01"], "--poll must be between 0.2 and 600"),
        (["--db", str(tmp_path / "missing.db")], "no registry at"),
    ):
        out = invoke("ui", *args, cwd=tmp_path)
        assert out.returncode == 2 and line in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists()
