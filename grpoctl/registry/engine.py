"""Where the registry lives, and how we talk to it without "database is locked".

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

Any other SQLAlchemy URL (PostgreSQL for a team) gets none of this: it has row locks.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from grpoctl.errors import UserError

DEFAULT_DB_URL = "sqlite:///./registry.db"
BUSY_TIMEOUT_MS = 30_000
# The execution option that asks for `BEGIN IMMEDIATE` (see `writer_engine`).
BEGIN_MODE_OPTION = "grpoctl_sqlite_begin"


def default_db_url() -> str:
    """$GRPOCTL_DB if set, else `registry.db` in the current directory (the project root)."""
    return os.environ.get("GRPOCTL_DB") or DEFAULT_DB_URL


def resolve_url(url_or_path: str | None) -> URL:
    """Accept a SQLAlchemy URL or a plain file path (which means SQLite)."""
    text = url_or_path or default_db_url()
    if "://" in text:
        try:
            return make_url(text)
        except Exception as exc:  # sqlalchemy raises ArgumentError with a long message
            raise UserError(f"not a database URL or path: {text!r}") from exc
    return URL.create("sqlite", database=text)


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for other databases and in-memory SQLite."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def check_sqlite_file(url: URL, must_exist: bool) -> None:
    """Turn SQLite's "unable to open database file" into a sentence the user can act on."""
    path = sqlite_path(url)
    if path is None:
        return
    if must_exist and not path.exists():
        raise UserError(f"no registry at {path} (run `grpoctl train` first or pass --db)")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise UserError(f"cannot create registry {path}: directory {parent} does not exist")


def make_engine(url: URL) -> Engine:
    """An engine for `url`; for SQLite, with the pragmas and BEGIN handling above."""
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    # sqlite3's own `timeout` is its busy handler; the pragma below sets the same value,
    # both so that it also holds when someone swaps the driver.
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # No implicit BEGIN from sqlite3; `_on_begin` emits the one we want.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if sqlite_path(url) is not None:
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
