"""Registries that cannot be used: each is one line on stderr, exit code 2, no traceback,
the password never shown, and nothing written (a file stays byte for byte what it was,
and no -wal, backup, registry or outputs/ appears).

Permission cases run without root's power to ignore file modes (as root, through
`setpriv` dropping CAP_DAC_OVERRIDE), so a read-only file is read-only for real.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli import invoke

from grpoctl.registry import Registry, schema

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "registry_v0.db"
SECRET = "s3cret-never-shown"
UNPRIVILEGED = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []

BLOCK_PSYCOPG = (
    "import sys; sys.modules['psycopg'] = None\n"  # as if `grpoctl[postgres]` were not installed
    "sys.argv = ['grpoctl', *sys.argv[1:]]\nfrom grpoctl.cli import main\nmain()\n"
)


def grpoctl(args: list[str], cwd: Path, unprivileged: bool = False, no_psycopg: bool = False, own_process=False):
    if not (unprivileged and UNPRIVILEGED) and not no_psycopg and not own_process:  # this process will do
        return invoke(*args, cwd=cwd, env={"GRPOCTL_DB": None, "PGPASSWORD": None})
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOCTL_DB", "PGPASSWORD")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="200")
    runner = [sys.executable, "-c", BLOCK_PSYCOPG] if no_psycopg else [sys.executable, "-m", "grpoctl"]
    return subprocess.run(
        (UNPRIVILEGED if unprivileged else []) + runner + args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def registry_file(tmp: Path) -> Path:
    path = tmp / "registry.db"
    with Registry(str(path)) as registry:
        run = registry.create_run(name="one", config={}, config_diff={}, config_hash="h", seed=0, total_steps=1)
        registry.log_step(run.id, 0, {"x": 1.0})
        registry.set_status(run.id, "finished")
    return path


def foreign_sqlite(tmp: Path) -> Path:
    path = tmp / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO note (body) VALUES ('mine, not grpoctl''s')")
    conn.close()
    return path


def no_tables_sqlite(tmp: Path) -> Path:
    path = tmp / "blank.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")  # a valid SQLite file with no tables at all
    conn.commit()
    conn.close()
    return path


def random_bytes(tmp: Path) -> Path:
    path = tmp / "registry.db"
    path.write_bytes(os.urandom(8192))
    return path


def truncated(tmp: Path) -> Path:
    path = registry_file(tmp)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def corrupt_page(tmp: Path) -> Path:
    """Header intact, a table's page overwritten: found only when a query reads it."""
    path = registry_file(tmp)
    with sqlite3.connect(path) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'run'").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xff" * page)
    return path


def newer_schema(tmp: Path) -> Path:
    path = registry_file(tmp)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    return path


def column_missing(tmp: Path) -> Path:
    """grpoctl's tables from before migrations, with a column dropped by hand."""
    path = tmp / "registry.db"
    shutil.copy(FIXTURE, path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE run DROP COLUMN git_commit")
    conn.close()
    return path


def read_only_file(tmp: Path) -> Path:
    path = registry_file(tmp)
    path.chmod(0o444)
    return path


def read_only_dir(tmp: Path) -> Path:
    inner = tmp / "shared"
    inner.mkdir()
    path = registry_file(inner)
    inner.chmod(0o555)
    return path


def unreadable(tmp: Path) -> Path:
    path = registry_file(tmp)
    path.chmod(0o000)
    return path


def old_schema(tmp: Path) -> Path:
    path = tmp / "registry.db"
    shutil.copy(FIXTURE, path)
    return path


def old_schema_read_only(tmp: Path) -> Path:
    # Writable, an old SQLite registry is upgraded on open; read-only, it cannot be.
    path = old_schema(tmp)
    path.chmod(0o444)
    return path


@dataclass
class Case:
    id: str
    make: Callable[[Path], Path | str] | str  # a file to create, or a URL/path as text
    args: list[str]
    message: str
    unprivileged: bool = False
    no_psycopg: bool = False
    needs_pg: bool = False
    # A process of its own: a corrupt page is found with the connection open, and SQLite
    # removes the empty -wal file it made only when the process ends.
    own_process: bool = False
    # 2 for what the user must fix; 75 (EX_TEMPFAIL) for a server that did not answer, which
    # a sweep tries again (grpoctl/registry/open.py, RegistryNotAnswering)
    exit_code: int = 2

    @property
    def in_process(self) -> bool:
        return not (self.unprivileged and UNPRIVILEGED) and not self.no_psycopg and not self.own_process


PG = "postgresql+psycopg://grpoctl:{password}@127.0.0.1:{port}/{database}"
LIST, TAG, TRAIN, UPGRADE = ["runs", "list"], ["runs", "tag", "one", "best"], ["train"], ["db", "upgrade"]
CASES = [
    Case("directory-read", lambda t: t, LIST, "is a directory, not a file"),
    Case("directory-train", lambda t: t, TRAIN, "is a directory, not a file"),
    Case("missing-parent", lambda t: str(t / "no" / "such" / "r.db"), TRAIN, "does not exist"),
    Case("read-only-file-write", read_only_file, TAG, "is read-only, and this command writes to it", unprivileged=True),
    Case("read-only-file-train", read_only_file, TRAIN, "is read-only", unprivileged=True),
    Case("read-only-dir-write", read_only_dir, TAG, "read-only directory", unprivileged=True),
    Case("unreadable", unreadable, LIST, "cannot read registry", unprivileged=True),
    Case("random-bytes", random_bytes, LIST, "is not a SQLite database"),
    Case("random-bytes-train", random_bytes, TRAIN, "is not a SQLite database"),
    Case("truncated", truncated, LIST, "is truncated"),
    Case("corrupt-page", corrupt_page, LIST, "is corrupt", own_process=True),
    Case("zero-bytes", lambda t: (t / "registry.db").touch() or t / "registry.db", TAG, "is an empty file"),
    Case("zero-bytes-upgrade", lambda t: (t / "registry.db").touch() or t / "registry.db", UPGRADE, "is an empty file"),
    Case("foreign-sqlite-read", foreign_sqlite, LIST, "is not a grpoctl registry: its tables (note)"),
    Case("foreign-sqlite-train", foreign_sqlite, TRAIN, "is not a grpoctl registry"),
    Case("foreign-sqlite-upgrade", foreign_sqlite, UPGRADE, "is not a grpoctl registry"),
    Case("sqlite-without-tables", no_tables_sqlite, TAG, "it has no tables"),
    Case("newer-schema", newer_schema, LIST, "revision 9999, newer than this grpoctl"),
    Case("newer-schema-upgrade", newer_schema, UPGRADE, "newer than this grpoctl"),
    Case("column-missing", column_missing, LIST, "missing columns git_commit"),
    Case("column-missing-upgrade", column_missing, UPGRADE, "in a layout no grpoctl made"),
    Case(
        "older-schema-read-only",
        old_schema_read_only,
        LIST,
        f"older than this grpoctl's ({schema.HEAD}): run `grpoctl db upgrade",
        unprivileged=True,
    ),
    Case("scheme-foo", "foo://registry", LIST, "unknown database URL scheme 'foo://'"),
    Case("scheme-http", "http://example.com/registry", TRAIN, "unknown database URL scheme 'http://'"),
    Case("driver-mysql", "mysql://me@127.0.0.1/registry", LIST, "driver 'mysqldb' for mysql:// is not installed"),
    Case("driver-psycopg2", f"postgresql+psycopg2://me:{SECRET}@127.0.0.1/r", LIST, "grpoctl uses psycopg 3"),
    Case(
        "driver-missing",
        f"postgresql+psycopg://me:{SECRET}@127.0.0.1/r",
        TRAIN,
        "pip install 'grpoctl[postgres]'",
        no_psycopg=True,
    ),
    Case(
        "refused-port",
        f"postgresql+psycopg://me:{SECRET}@127.0.0.1:1/registry",
        LIST,
        "cannot connect to PostgreSQL at 127.0.0.1:1: connection refused",
        exit_code=75,
    ),
    Case(
        "refused-port-train",
        f"postgresql+psycopg://me:{SECRET}@127.0.0.1:1/registry",
        TRAIN,
        "connection refused",
        exit_code=75,
    ),
    Case("wrong-password", PG.replace("{password}", SECRET), LIST, "password authentication failed", needs_pg=True),
    Case(
        "wrong-password-sweep",
        PG.replace("{password}", SECRET),
        ["sweep", "lr", "--values", "1e-4,1e-3"],
        "password authentication failed",
        needs_pg=True,
    ),
    Case("missing-database", PG.replace("{database}", "nosuchdb"), LIST, "has no database 'nosuchdb'", needs_pg=True),
    Case("ssl-required", PG + "?sslmode=require", LIST, "server does not support SSL", needs_pg=True),
]


def snapshot(tmp: Path) -> dict[str, bytes | None]:
    """Every file under tmp, with its bytes (None for directories), to compare after."""
    out = {}
    for p in sorted(tmp.rglob("*")):
        try:
            out[str(p.relative_to(tmp))] = None if p.is_dir() else p.read_bytes()
        except PermissionError:
            out[str(p.relative_to(tmp))] = b"(unreadable)"
    return out


def test_there_are_at_least_fifteen_cases():
    assert len(CASES) >= 15 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "case",
    # the cases that need a process of their own, or the PostgreSQL server, are end-to-end
    [pytest.param(c, id=c.id, marks=[] if c.in_process and not c.needs_pg else [pytest.mark.slow]) for c in CASES],
)
def test_bad_registry_is_one_line_exit_2_or_75_and_untouched(case, tmp_path, request):
    work = tmp_path / "work"
    work.mkdir()
    password = SECRET
    if case.needs_pg:
        from sqlalchemy.engine import make_url

        admin = make_url(request.getfixturevalue("pg_admin_url"))
        db = case.make.format(
            password=admin.password if "{password}" in case.make else SECRET, port=admin.port, database="postgres"
        )
        password = make_url(db).password
    elif callable(case.make):
        db = str(case.make(work))
    else:
        db = case.make
    before = snapshot(work)
    try:
        result = grpoctl(
            [*case.args, "--db", db],
            cwd=work,
            unprivileged=case.unprivileged,
            no_psycopg=case.no_psycopg,
            own_process=case.own_process,
        )
        after = snapshot(work)
    finally:
        for p in [work, *work.rglob("*")]:  # give back what the setup took away, for cleanup
            if p.is_dir() or p.exists():
                p.chmod(0o755 if p.is_dir() else 0o644)
    assert result.returncode == case.exit_code, (result.returncode, result.stderr, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert case.message in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert password not in result.stderr + result.stdout
    assert after == before  # byte for byte; no registry, -wal, .bak or outputs/ appeared


@pytest.mark.slow
@pytest.mark.parametrize("make", [read_only_file, read_only_dir], ids=["read-only-file", "read-only-dir"])
def test_commands_that_only_read_work_on_a_read_only_registry(make, tmp_path):
    path = make(tmp_path)
    before = path.read_bytes()
    try:
        listed = grpoctl(["runs", "list", "--db", str(path)], cwd=tmp_path, unprivileged=True)
        shown = grpoctl(["runs", "show", "one", "--db", str(path)], cwd=tmp_path, unprivileged=True)
        status = grpoctl(["db", "status", "--db", str(path)], cwd=tmp_path, unprivileged=True)
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)
    assert listed.returncode == 0 and "one" in listed.stdout and "finished" in listed.stdout, listed.stderr
    assert shown.returncode == 0 and "0/1 done" in shown.stdout, shown.stderr
    assert status.returncode == 0 and "up to date" in status.stdout, status.stderr
    assert path.read_bytes() == before


def test_check_creates_nothing_and_says_what_opening_would(tmp_path):
    # For `train`: everything is checked before the first byte is written anywhere.
    Registry.check(str(tmp_path / "new.db"), write=True)
    foreign = foreign_sqlite(tmp_path)
    before = foreign.read_bytes()
    with pytest.raises(Exception, match="is not a grpoctl registry"):
        Registry.check(str(foreign), write=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"] and foreign.read_bytes() == before
