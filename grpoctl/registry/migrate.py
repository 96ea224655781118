"""What `grpoctl db status` and `grpoctl db upgrade` do (the CLI in cli/db.py only prints)."""

from __future__ import annotations

import os

from grpoctl.errors import UserError
from grpoctl.registry import schema
from grpoctl.registry.engine import make_engine, resolve_url, sqlite_path
from grpoctl.registry.open import (
    check_sqlite_location,
    describe_error,
    inspect_schema,
    open_registry,
    printable_location,
)


def describe_status(db: str | None) -> str:
    """One paragraph: the registry's revision, this code's, and what to do about it."""
    url = resolve_url(db)
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_location(path, write=False, must_exist=True)
    state = inspect_schema(url, path)
    where = printable_location(url)
    if state == schema.HEAD:
        return f"registry {where}: schema revision {state}, up to date with this grpoctl"
    if state == schema.EMPTY:
        return f"database {where} has no grpoctl registry yet: `grpoctl db upgrade` creates one (at {schema.HEAD})"
    unstamped = " (made before grpoctl had migrations)" if state == "0001" and _unstamped(url, path) else ""
    steps = ", ".join(schema.REVISIONS[schema.REVISIONS.index(state) + 1 :])
    return (
        f"registry {where}: schema revision {state}{unstamped}, this grpoctl's is {schema.HEAD}; "
        f"`grpoctl db upgrade` applies {steps}"
    )


def _unstamped(url, path) -> bool:
    from sqlalchemy import inspect

    engine = make_engine(url, read_only=True)
    try:
        with engine.connect() as conn:
            return "alembic_version" not in inspect(conn).get_table_names()
    finally:
        engine.dispose()


def upgrade_registry(db: str | None, paths_root: str | None = None) -> str:
    """Create or upgrade the registry at `db`; says what it did.

    Relative checkpoint paths of an old registry are taken as relative to `paths_root`:
    by default the SQLite file's directory, or for a server the directory this runs in.
    """
    url = resolve_url(db)
    if paths_root is None and sqlite_path(url) is None:
        paths_root = os.getcwd()
    report: dict = {}
    try:
        engine = open_registry(url, write=True, paths_root=paths_root, upgrade=True, report=report)
    except UserError:
        raise
    except Exception as exc:  # a migration's own failure: name it, keep it one line
        raise UserError(describe_error(exc, url)) from None
    engine.dispose()
    where = printable_location(url)
    found = report.get("from")
    if report.get("created"):
        found = schema.EMPTY
    if found == schema.HEAD:
        return f"registry {where} is already at schema revision {schema.HEAD}"
    if found == schema.EMPTY or found is None:
        return f"created registry {where} at schema revision {schema.HEAD}"
    backup = f" (the registry before: {report['backup']})" if report.get("backup") else ""
    return f"upgraded registry {where} from schema revision {found} to {schema.HEAD}{backup}"
