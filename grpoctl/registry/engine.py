"""Where the registry lives, and how we talk to it: SQLite for one machine, PostgreSQL for a team.

The embedded default is one SQLite file (`./registry.db`), written by several training
processes at once (a sweep runs its variants side by side) and read by `grpoctl runs`
and `grpoctl compare` while they train. Three SQLite settings make that safe:

- WAL journal: readers never block the writer and the writer never blocks readers.
- busy_timeout of 30 s: a writer that finds the lock taken waits for it instead of
  failing at once.
- writes start with `BEGIN IMMEDIATE`: the write lock is taken when the transaction
  starts. With a plain (deferred) `BEGIN`, a transaction that reads first and writes
  later must upgrade its lock mid-way; if another process wrote in between, SQLite
  returns "database is locked" at once, without waiting, because waiting could not help.

Python's sqlite3 module issues its own `BEGIN` (deferred, and only before DML), so we
turn that off (`isolation_level = None`) and emit BEGIN ourselves on SQLAlchemy's
"begin" event, as SQLAlchemy's SQLite dialect documentation recommends. Which BEGIN is
chosen by an execution option, so reads still start deferred (in WAL they never wait).
Commands that only read cannot write to the file, not even by accident: they open it
with `PRAGMA query_only`, or read-only (`mode=ro`) when the user may not write the file
or its directory, so that reading works there too.

PostgreSQL (`postgresql+psycopg://USER@HOST/DB`, psycopg 3 from `grpoctl[postgres]`) has
row locks and runs at READ COMMITTED; the store's writes are written so that this is
enough (inserts that may race use ON CONFLICT, claims are compare-and-set updates). The
password comes from the URL, $PGPASSWORD or ~/.pgpass (libpq reads both when the URL has
none); SSL and other libpq options pass through the URL's query (`?sslmode=require`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from grpoctl.errors import UserError
from grpoctl.registry import compressed
from grpoctl.rules import registry_link_s

DEFAULT_DB_URL = "sqlite:///./registry.db"
BUSY_TIMEOUT_MS = 30_000
# The execution option that asks for `BEGIN IMMEDIATE` (see `writer_engine`).
BEGIN_MODE_OPTION = "grpoctl_sqlite_begin"
POSTGRES_EXTRA = "pip install 'grpoctl[postgres]'"
# A trainer holds at most two connections (its steps, and the heartbeat thread); a
# reader one. pool_size 2 + max_overflow 1 caps a process at 3, so 16 trainers of a sweep
# plus a few readers stay far below PostgreSQL's default max_connections of 100 (16 x 3
# = 48), and idle connections are kept, not reopened at every step.
PG_POOL_SIZE = 2
PG_MAX_OVERFLOW = 1
PG_CONNECT_TIMEOUT_S = 10  # at most: a command at a terminal should not hang longer
# `grpoctl ui` (a long-lived server beside the trainers): at most 2 connections, and no
# query of its own may hold one longer than this.
SERVER_POOL_SIZE = 2
SERVER_STATEMENT_TIMEOUT_MS = 5_000


def default_db_url() -> str:
    """$GRPOCTL_DB if set, else `registry.db` in the current directory (the project root)."""
    return os.environ.get("GRPOCTL_DB") or DEFAULT_DB_URL


def resolve_url(url_or_path: str | None) -> URL:
    """Accept a SQLAlchemy URL or a plain file path (which means SQLite).

    `postgresql://` means psycopg 3 (SQLAlchemy's own default would be psycopg2). An
    unknown scheme or a driver that is not installed is refused here, in one line.
    """
    text = url_or_path or default_db_url()
    if "://" not in text:
        return URL.create("sqlite", database=_uncompressed(text))
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as exc:  # sqlalchemy's message is long, and may hold the password
        raise UserError(f"not a database URL or path: {redact_text(text)!r}") from exc
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() == "sqlite" and url.database and compressed.is_compressed(url.database):
        url = url.set(database=_uncompressed(url.database))
    try:
        dialect = url.get_dialect()
    except NoSuchModuleError:
        raise UserError(
            f"unknown database URL scheme '{url.drivername}://' in {public_url(url)} (use a "
            "SQLite path, sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)"
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError:
        driver = url.get_driver_name()
        if url.get_backend_name() != "postgresql":
            hint = "install it, or use SQLite or PostgreSQL"
        elif driver == "psycopg":
            hint = POSTGRES_EXTRA
        else:
            hint = f"grpoctl uses psycopg 3: postgresql+psycopg://..., {POSTGRES_EXTRA}"
        raise UserError(f"the database driver '{driver}' for {url.drivername}:// is not installed ({hint})") from None
    return url


def _uncompressed(path: str) -> str:
    """A SQLite path as given, or for a compressed registry (`.db.xz`) its cached copy."""
    return str(compressed.decompressed(path)) if compressed.is_compressed(path) else path


def public_url(url: URL) -> str:
    """The URL without its password: safe for argv, logs, the console and error messages.
    A compressed registry's cached copy is named by the compressed file, as the user gave it."""
    source = compressed.source_of(url.database) if url.get_backend_name() == "sqlite" and url.database else None
    if source is not None:
        return URL.create("sqlite", database=str(source)).render_as_string(hide_password=False)
    # (url.set(password=None) would keep the password: None means "unchanged" there.)
    bare = URL.create(
        url.drivername, username=url.username, host=url.host, port=url.port, database=url.database, query=url.query
    )
    return bare.render_as_string(hide_password=False)


def redact_text(text: str, password: str | None = None) -> str:
    """`text` with a URL's password (or `password`) replaced, for messages built from raw input."""
    if password:
        text = text.replace(password, "***")
    if "://" in text and "@" in text:
        scheme, rest = text.split("://", 1)
        userinfo, at, tail = rest.rpartition("@")
        if ":" in userinfo:
            text = f"{scheme}://{userinfo.split(':', 1)[0]}:***@{tail}"
    return text


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for other databases and in-memory SQLite."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def _read_only_flags(path: Path, probe: bool = False) -> str | None:
    """How a reader opens `path`: None for a normal connection (query_only: it still
    cleans up its -wal and -shm files when it closes), `mode=ro` when we may not write
    the file, `immutable=1` too when nobody may write its directory (so no writer can
    exist, and SQLite could not create its WAL index there) or when the connection only
    probes which schema a file we may not write has: `mode=ro` on a WAL file would leave
    a -shm and a -wal file beside one we may be about to refuse untouched."""
    directory = path.absolute().parent
    if os.access(path, os.W_OK) and os.access(directory, os.W_OK | os.X_OK):
        return None
    no_wal = not path.with_name(path.name + "-wal").exists()
    if no_wal and (probe or not os.access(directory, os.W_OK)):
        return "mode=ro&immutable=1"
    return "mode=ro"


def pg_link_settings() -> dict[str, int]:
    """libpq's settings that notice a silent server within rules.registry_link_s(): on
    connecting (connect_timeout, whole seconds), with data unacknowledged
    (tcp_user_timeout), and on an idle pooled connection (keepalives). Without them a
    commit in flight over a cut link waits for TCP to give up, which takes many minutes."""
    link = registry_link_s()
    return {
        "connect_timeout": max(2, math.ceil(min(link, PG_CONNECT_TIMEOUT_S))),
        "tcp_user_timeout": int(link * 1000),
        "keepalives": 1,
        "keepalives_idle": max(1, int(link / 2)),
        "keepalives_interval": max(1, int(link / 6)),
        "keepalives_count": 3,
    }


def make_engine(url: URL, read_only: bool = False, probe: bool = False, server: bool = False) -> Engine:
    """An engine for `url`; for SQLite, with the pragmas and BEGIN handling above.

    `read_only`: the engine cannot write (SQLite: see the module docstring; PostgreSQL:
    its transactions are read-only). `probe`: it only reads which schema the registry has.
    `server`: for `grpoctl ui` (PostgreSQL: SERVER_POOL_SIZE connections at most, each
    with SERVER_STATEMENT_TIMEOUT_MS as its statement timeout).
    """
    if url.get_backend_name() == "postgresql":
        # Defaults only: whatever the URL's query says (sslmode, application_name, ...) wins.
        defaults: dict = {"application_name": "grpoctl", **pg_link_settings()}
        options = []
        if read_only:  # the server refuses any write in a reader's transactions
            options.append("-c default_transaction_read_only=on")
        if server:
            options.append(f"-c statement_timeout={SERVER_STATEMENT_TIMEOUT_MS}")
        if options:
            defaults["options"] = " ".join(options)
        connect_args = {k: v for k, v in defaults.items() if k not in url.query}
        pool_size, overflow = (SERVER_POOL_SIZE, 0) if server else (PG_POOL_SIZE, PG_MAX_OVERFLOW)
        return create_engine(
            url, pool_pre_ping=True, pool_size=pool_size, max_overflow=overflow, connect_args=connect_args
        )
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    path = sqlite_path(url)
    target: URL | str = url
    flags = _read_only_flags(path, probe) if path is not None and read_only and path.exists() else None
    if flags:
        target = f"sqlite:///file:{quote(str(path.resolve()))}?{flags}&uri=true"
    # sqlite3's own `timeout` is its busy handler; the pragma below sets the same value,
    # both so that it also holds when someone swaps the driver.
    engine = create_engine(target, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # No implicit BEGIN from sqlite3; `_on_begin` emits the one we want.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if read_only:
            cursor.execute("PRAGMA query_only = ON")
        elif path is not None:
            # WAL is stored in the file: after the first connection this is a no-op.
            cursor.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable in WAL mode except for the last commits before a power
            # cut, and saves an fsync per commit: a metric step costs microseconds.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        mode = connection.get_execution_options().get(BEGIN_MODE_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def writer_engine(engine: Engine) -> Engine:
    """The same engine (same pool, same listeners) whose transactions BEGIN IMMEDIATE."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{BEGIN_MODE_OPTION: "IMMEDIATE"})


def insert_ignoring_conflicts(conn, table, values: dict, *keys: str):
    """INSERT that does nothing if a row with the same unique `keys` exists (one statement,
    so two processes racing on it cannot both insert nor fail); returns the new id or None."""
    # Imported here: the PostgreSQL dialect module costs ~20 ms at start-up, and the
    # commands that only read (runs list, compare) never insert.
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql as dialect
    else:
        from sqlalchemy.dialects import sqlite as dialect
    statement = dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(keys))
    return conn.execute(statement.returning(table.c.id)).scalar()
