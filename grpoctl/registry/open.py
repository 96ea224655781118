"""Opening a registry: every way it can fail becomes one line the user can act on.

`open_registry` is what `Registry(...)` runs; `check_registry` runs the same checks and
creates nothing, so a command can make sure the registry is usable before it writes its
first byte anywhere (`Registry.check(url, write=True)`).

Before any connection, a SQLite location is checked on disk: a directory, a file that
cannot be read, a read-only file or directory when the command must write, a file that
is empty, not SQLite (random bytes) or shorter than its header says (truncated). Only
then is it opened, read-only when the command only reads, and its schema identified
(schema.py): a SQLite file of another application is refused and never gets our tables.
A PostgreSQL server that refuses the connection, the user or the password, or lacks the
database, is named with host, port, user and database, never with the password.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from grpoctl.errors import TEMPFAIL_EXIT, UserError
from grpoctl.registry import compressed, schema
from grpoctl.registry.engine import make_engine, public_url, redact_text, sqlite_path, writer_engine

SQLITE_MAGIC = b"SQLite format 3\x00"
log = logging.getLogger("grpoctl")


class NoRegistry(UserError):
    """There is no registry there yet (a missing SQLite file, an empty database)."""


# --------------------------------------------------------------------------- on disk


def _sqlite_header_problem(path: Path) -> str | None:
    """Why `path` is not a usable SQLite file, judged from its first 100 bytes; None if fine."""
    size = path.stat().st_size
    if size == 0:
        return "is an empty file, not a grpoctl registry"
    with open(path, "rb") as f:
        header = f.read(100)
    if not header.startswith(SQLITE_MAGIC):
        return "is not a SQLite database (nor a grpoctl registry)"
    if len(header) < 100:
        return "is truncated (shorter than a SQLite header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    counter_matches = header[24:28] == header[92:96]  # else SQLite ignores the page count
    wal_in_use = path.with_name(path.name + "-wal").exists()
    # With a live -wal file, the main file may be mid-checkpoint: let SQLite judge it then.
    if counter_matches and not wal_in_use and pages and size < pages * page_size:
        return f"is truncated ({size} bytes of {pages * page_size})"
    return None


def check_sqlite_location(path: Path, write: bool, must_exist: bool) -> None:
    shown = str(path)
    source = compressed.source_of(path)
    if source is not None and write:
        raise UserError(
            f"registry {source} is compressed, and this command writes to it (commands that only read "
            f"work; decompress it first: xz -dk {source})"
        )
    if path.is_dir():
        raise UserError(f"registry {shown} is a directory, not a file (pass --db DIR/registry.db)")
    if not path.exists():
        if must_exist:
            raise NoRegistry(f"no registry at {shown} (run `grpoctl train` first or pass --db)")
        parent = path.absolute().parent
        if not parent.is_dir():
            raise UserError(f"cannot create registry {shown}: directory {parent} does not exist")
        if write and not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"cannot create registry {shown}: directory {parent} is read-only")
        return
    if not os.access(path, os.R_OK):
        raise UserError(f"cannot read registry {shown}: permission denied")
    problem = _sqlite_header_problem(path)
    if problem:
        raise UserError(f"registry {shown} {problem}")
    if write:
        if not os.access(path, os.W_OK):
            raise UserError(
                f"registry {shown} is read-only, and this command writes to it (commands that only read work)"
            )
        if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
            raise UserError(
                f"registry {shown} is in a read-only directory, and this command writes to it "
                "(SQLite needs to create its -wal file there; commands that only read work)"
            )


# --------------------------------------------------------------------------- errors


# What a driver's message becomes: (words, any of which in the message, lowercased; the
# line, formatted with where/server/user/database/message). The first match wins.
_SQLITE_LINES = (
    (("file is not a database", "malformed"), "{where} is corrupt or not a SQLite database ({message})"),
    (("readonly", "read-only"), "{where} is read-only, and this command writes to it (commands that only read work)"),
    (("unable to open",), "cannot open {where} ({message})"),
    (("locked",), "{where} stayed locked by another process for 30 s ({message})"),
)
_ROUTE = "cannot connect to PostgreSQL at {server}: no route to it from this machine ({message})"
_REFUSED = ("connection refused",)
_NO_ROUTE = ("no route to host", "network is unreachable")
_POSTGRES_LINES = (
    (_REFUSED, "cannot connect to PostgreSQL at {server}: connection refused (is the server running?)"),
    (_NO_ROUTE, _ROUTE),
    (
        ("password authentication failed",),
        "PostgreSQL at {server} refused user '{user}': password authentication failed "
        "(check the password in the URL, $PGPASSWORD or ~/.pgpass)",
    ),
    (
        ("no password supplied", "password is required"),
        "PostgreSQL at {server} wants a password for user '{user}' (put it in the URL, $PGPASSWORD or ~/.pgpass)",
    ),
)
_POSTGRES_LATE_LINES = (
    (("timeout", "timed out"), "cannot connect to PostgreSQL at {server}: timed out"),
    (("permission denied",), "user '{user}' may not do this in database '{database}' at {server} ({message})"),
)


def _first_line(lower: str, lines: tuple, **fields: str) -> str | None:
    for words, line in lines:
        if any(w in lower for w in words):
            return line.format(**fields)
    return None


def _driver_message(exc: BaseException, url: URL) -> str:
    """What the driver said, on one line, without the password."""
    message = " ".join(str(getattr(exc, "orig", None) or exc).split())
    if url.password:
        message = message.replace(str(url.password), "***")
    return redact_text(message)


def describe_error(exc: BaseException, url: URL) -> str:
    """One line for a database error, with what the user should check; never the password."""
    message = _driver_message(exc, url)
    lower = message.lower()
    if url.get_backend_name() == "sqlite":
        where = f"registry {sqlite_path(url) or public_url(url)}"
        return _first_line(lower, _SQLITE_LINES, where=where, message=message) or f"{where}: {message}"
    fields = dict(
        server=f"{url.host or 'localhost'}:{url.port or 5432}",
        user=url.username or os.environ.get("PGUSER") or "(default user)",
        database=url.database or "(default database)",
        message=message,
    )
    if line := _first_line(lower, _POSTGRES_LINES, **fields):
        return line
    if "connection to server" in lower and "failed: permission denied" in lower:  # a route that prohibits
        return _ROUTE.format(**fields)
    if "does not exist" in lower and "database" in lower:
        return "PostgreSQL at {server} has no database '{database}' (create it, e.g. `createdb {database}`)".format(
            **fields
        )
    if "role" in lower and "does not exist" in lower:
        return "PostgreSQL at {server} has no user '{user}'".format(**fields)
    late = _first_line(lower, _POSTGRES_LATE_LINES, **fields)
    return late or "PostgreSQL at {server}, database '{database}': {message}".format(**fields)


class RegistryNotAnswering(UserError):
    """A PostgreSQL server that did not answer: refused, out of reach, timed out, starting
    up or shutting down (a restart, an outage). The same one line, with exit 75
    (EX_TEMPFAIL): a sweep member whose trainer met it at its start is tried again once the
    registry is back (sweep/member.py), rather than counted as a run that did not start."""

    exit_code = TEMPFAIL_EXIT


# What a driver says when the server did not answer, as against refusing what was asked.
_NOT_ANSWERING = (
    *_REFUSED,
    *_NO_ROUTE,
    "timeout expired",
    "timed out",
    "the database system is starting up",
    "the database system is shutting down",
    "terminating connection due to administrator command",
    "server closed the connection unexpectedly",
)


def registry_error(exc: SQLAlchemyError, url: URL) -> UserError:
    """The one-line error for a failure to reach or use the registry at `url`:
    RegistryNotAnswering where a PostgreSQL server did not answer, else a UserError."""
    line = describe_error(exc, url)
    if url.get_backend_name() == "postgresql" and isinstance(exc, (OperationalError, InterfaceError)):
        said = _driver_message(exc, url).lower()
        if any(words in said for words in _NOT_ANSWERING):
            return RegistryNotAnswering(line)
    return UserError(line)


# The registries this process opened, newest last: a failure met later (a corrupt page
# deep in the file, a server that went away mid-command) is reported against it.
_opened: list[URL] = []


def as_user_error(exc: BaseException) -> UserError | None:
    """A registry failure met after opening, as one line for the CLI; None for anything
    else (a constraint violation or bad SQL is a bug and keeps its traceback)."""
    from sqlalchemy.exc import DataError, IntegrityError, ProgrammingError

    if not isinstance(exc, DBAPIError) or isinstance(exc, (IntegrityError, ProgrammingError, DataError)):
        return None
    if not _opened:
        return UserError(f"registry: {redact_text(' '.join(str(exc.orig).split()))}")
    return UserError(describe_error(exc, _opened[-1]))


# --------------------------------------------------------------------------- open


def printable_location(url: URL) -> str:
    """Where the registry is, fit to print: the SQLite path (a compressed registry's own,
    not its cached copy's), or the URL without its password."""
    path = sqlite_path(url)
    if path is None:
        return public_url(url)
    return str(compressed.source_of(path) or path)


def _db_hint(url: URL) -> str:
    return (
        ""
        if url.get_backend_name() == "sqlite" and str(sqlite_path(url)) == "registry.db"
        else f" --db {printable_location(url)}"
    )


def _state(engine: Engine, url: URL) -> str:
    try:
        with engine.connect() as conn:
            return schema.revision_of(conn)
    except SQLAlchemyError as exc:
        raise registry_error(exc, url) from None


def _check_can_write(engine: Engine, url: URL) -> None:
    if url.get_backend_name() != "postgresql":
        return
    with engine.connect() as conn:
        allowed = conn.execute(text("SELECT has_table_privilege('run', 'INSERT, UPDATE, DELETE')")).scalar()
    if not allowed:
        user = url.username or "(default user)"
        raise UserError(
            f"user '{user}' may only read the registry {printable_location(url)}, and this command writes to it"
        )


def inspect_schema(url: URL, path: Path | None) -> str:
    """The registry's schema state, seen through a read-only connection for a SQLite file,
    so that a file we end up refusing is not touched (not even by the WAL pragma)."""
    engine = make_engine(url, read_only=True, probe=True)
    try:
        state = _state(engine, url)
        if state != schema.HEAD:
            _refusal(state, engine, url)
        return state
    finally:
        engine.dispose()


def _refusal(state: str, engine: Engine, url: URL) -> None:
    """Raise for states no command may touch: foreign, newer, or a SQLite file with no tables."""
    where = printable_location(url)
    if state == schema.FOREIGN:
        with engine.connect() as conn:
            why = schema.describe_foreign(conn)
        kind = "SQLite file" if url.get_backend_name() == "sqlite" else "database"
        raise UserError(f"{kind} {where} is not a grpoctl registry: {why} (grpoctl leaves it alone)")
    if state == schema.EMPTY and sqlite_path(url) is not None:
        # grpoctl creates its files complete (schema.create_sqlite): an empty one is not ours.
        raise UserError(
            f"SQLite file {where} is not a grpoctl registry: it has no tables (grpoctl "
            "leaves it alone; remove it or pass another --db)"
        )
    if state != schema.EMPTY and state not in schema.REVISIONS:
        raise UserError(schema.newer_message(where, state))


def _fixable(state: str, url: URL, write: bool, upgrade: bool) -> None:
    """Raise unless this open may bring `state` (empty or older) to HEAD itself."""
    if state == schema.HEAD:
        return
    where = printable_location(url)
    if state == schema.EMPTY:
        if not write:
            raise NoRegistry(
                f"database {where} has no grpoctl registry yet (a command that writes, "
                "e.g. `grpoctl db upgrade`, creates it)"
            )
        return
    # Older: SQLite upgrades on open, after a backup, whenever its file can be written (a
    # reader too: the user should not have to learn a command to keep reading their own
    # file); PostgreSQL, shared by many, only by `db upgrade` under its lock.
    path = sqlite_path(url)
    if path is not None and (write or _writable_file(path)):
        return
    if not (write and upgrade):
        raise UserError(schema.older_message(where, state, _db_hint(url), url.get_backend_name()))


def _writable_file(path: Path) -> bool:
    """Whether this process may rewrite the SQLite file (and put its backup beside it)."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def check_registry(url: URL, write: bool, must_exist: bool = False) -> None:
    """Everything `open_registry` checks, creating and changing nothing."""
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_location(path, write, must_exist)
        if not path.exists():
            return
    state = inspect_schema(url, path)
    _fixable(state, url, write, upgrade=False)
    if write and state == schema.HEAD:
        engine = make_engine(url, read_only=True)
        try:
            _check_can_write(engine, url)
        except SQLAlchemyError as exc:
            raise registry_error(exc, url) from None
        finally:
            engine.dispose()


def open_registry(
    url: URL,
    write: bool,
    must_exist: bool = False,
    paths_root: str | None = None,
    upgrade: bool = False,
    report: dict | None = None,
    server: bool = False,
) -> Engine:
    """An engine on a registry at HEAD: checked, created or upgraded as described above.

    `upgrade=True` (`grpoctl db upgrade`) also upgrades PostgreSQL. `report`, if given,
    receives the revision found ("from") and the SQLite backup's path ("backup").
    `server=True`: the engine of a long-lived reader (`grpoctl ui`; engine.make_engine).
    """
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_location(path, write, must_exist)
        if not path.exists():
            if not write:
                raise NoRegistry(f"no registry at {path} (run `grpoctl train` first or pass --db)")
            try:
                created = schema.create_sqlite(path, lambda p: make_engine(url.set(database=str(p))))
            except SQLAlchemyError as exc:
                raise registry_error(exc, url) from None
            if report is not None:
                report["created"] = created
    state = inspect_schema(url, path) if path is not None else None
    engine = make_engine(url, read_only=not write, server=server)
    try:
        if state is None:
            state = _state(engine, url)
            if state != schema.HEAD:
                _refusal(state, engine, url)
        _fixable(state, url, write, upgrade)
        if state != schema.HEAD:
            # A reader's engine cannot write: an old SQLite file is upgraded through a writer.
            migrator = engine if write else make_engine(url, read_only=False)
            try:
                found, backup = _migrate(migrator, url, paths_root)
            finally:
                if migrator is not engine:
                    migrator.dispose()
            if report is not None:
                report["backup"] = backup
            elif found != schema.HEAD and not (path is not None and compressed.source_of(path)):
                # upgraded by opening it, not by `db upgrade`: say so (a compressed registry's
                # cached copy is no one's file: its upgrade leaves the user's file as it was)
                log.warning(
                    f"note: upgraded registry {printable_location(url)} from schema revision {found} to "
                    f"{schema.HEAD} (the registry before: {backup})"
                )
            state = found
        if write and path is not None:
            # A stripped snapshot decompressed by hand (compressed.py) lacks the unique
            # indexes that the writes' INSERT ... ON CONFLICT name: build them once.
            restored = compressed.restore_indexes(path)
            if restored:
                log.warning(f"note: registry {path} had left out {len(restored)} indexes; built them again")
        if report is not None:
            report["from"] = state
        if write:
            _check_can_write(engine, url)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise registry_error(exc, url) from None
    except BaseException:
        engine.dispose()
        raise
    _opened.append(url)
    return engine


def _migrate(engine: Engine, url: URL, paths_root: str | None) -> tuple[str, str | None]:
    """Bring the registry to HEAD under the backend's lock. Returns the revision found
    under the lock (HEAD if another process upgraded first) and the SQLite backup's path."""
    path = sqlite_path(url)
    backup = None
    with writer_engine(engine).connect() as conn, conn.begin():
        if url.get_backend_name() == "postgresql":
            schema.pg_lock(conn)
        state = schema.revision_of(conn)  # again, under the lock: another process may have done it
        if state == schema.HEAD:
            return state, None
        if state not in schema.REVISIONS and state != schema.EMPTY:
            raise UserError(schema.newer_message(printable_location(url), state))
        # A compressed registry's cached copy needs none: the compressed file is the registry before.
        if path is not None and state != schema.EMPTY and compressed.source_of(path) is None:
            backup = schema.backup_sqlite(path, state)
        root = paths_root or (str(path.absolute().parent) if path is not None else None)
        schema.run_migrations(conn, state, root)
    return state, (str(backup) if backup else None)
