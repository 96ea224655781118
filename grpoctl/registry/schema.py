"""Which schema a registry has, and how it gets the one this code needs (Alembic migrations).

The migrations live in `migrations/versions/` (package data, so a wheel carries them).
The first, 0001, is the schema grpoctl created before it had migrations; a registry of
that time has no `alembic_version` table but has its eight tables, and is recognised as
0001. What happens on open (store.py calls `prepare`):

- at HEAD: nothing (one SELECT; Alembic is not even imported).
- no tables at all: a brand-new registry; a command that writes creates it by running
  every migration (SQLite: in a temporary file linked into place when complete, so no
  one ever sees half a registry; PostgreSQL: under an advisory lock, in one transaction,
  so several first commands at once wait for one another instead of colliding).
- older: SQLite is copied to `registry.db.bak-<revision>` and upgraded, by any command
  that can write the file (one that only reads too, saying so in a note: the file is the
  user's own); a SQLite file it cannot write is refused in one line naming `grpoctl db
  upgrade`. PostgreSQL is refused in that line by every command but `grpoctl db upgrade`,
  which upgrades under the advisory lock: commands that read it never run DDL.
- newer than this code, or not a grpoctl registry: refused in one line, untouched.

There is no downgrade: migrations go forward only (docs/registry.md says so).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Connection, Engine, inspect, text

HEAD = "0010"
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010")  # oldest first
# The tables of revision 0001, and the columns of its `run` table: what an unstamped
# registry must have to be taken for one.
BASE_TABLES = {"run", "metric", "checkpoint", "evalresult", "sample", "tag", "sweep", "sweepmember"}
BASE_RUN_COLUMNS = {
    "id",
    "name",
    "group",
    "variant",
    "status",
    "config",
    "config_diff",
    "config_hash",
    "seed",
    "host",
    "device",
    "version",
    "git_commit",
    "output_dir",
    "parent",
    "total_steps",
    "last_step",
    "created_at",
    "finished_at",
    "heartbeat_at",
    "pid",
    "error",
}
# pg_advisory_xact_lock key for creating or upgrading a registry ("grpoctl" in ASCII).
MIGRATION_LOCK_KEY = 0x677270_6F63746C
EMPTY, FOREIGN = "empty", "foreign"


def migrations_dir() -> Path:
    return Path(str(files("grpoctl.registry") / "migrations"))


def revision_of(conn: Connection) -> str:
    """HEAD or an older revision, EMPTY (no tables), FOREIGN, or an unknown (newer) revision."""
    tables = set(inspect(conn).get_table_names())
    if "alembic_version" in tables and "run" in tables:
        versions = list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
        return versions[0] if len(versions) == 1 else FOREIGN
    if not tables:
        return EMPTY
    if BASE_TABLES <= tables:
        columns = {c["name"] for c in inspect(conn).get_columns("run")}
        if columns == BASE_RUN_COLUMNS:
            return "0001"
    return FOREIGN


def describe_foreign(conn: Connection) -> str:
    tables = sorted(inspect(conn).get_table_names())
    if BASE_TABLES <= set(tables) and "alembic_version" not in tables:
        # grpoctl's tables, but not as any grpoctl made them (say, a column dropped by hand)
        columns = {c["name"] for c in inspect(conn).get_columns("run")}
        missing = ", ".join(sorted(BASE_RUN_COLUMNS - columns)) or "none"
        extra = ", ".join(sorted(columns - BASE_RUN_COLUMNS)) or "none"
        return (
            f"it has grpoctl's tables in a layout no grpoctl made (table run: missing columns {missing}; "
            f"unknown columns {extra})"
        )
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    return f"its tables ({shown}) are not a grpoctl registry's" if tables else "it has no grpoctl tables"


def _alembic_config(conn: Connection, paths_root: str | None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["connection"] = conn
    config.attributes["paths_root"] = paths_root
    return config


def run_migrations(conn: Connection, current: str, paths_root: str | None) -> None:
    """Upgrade the database on `conn` (inside its open transaction) from `current` to HEAD."""
    from alembic import command

    config = _alembic_config(conn, paths_root)
    if current == "0001" and "alembic_version" not in inspect(conn).get_table_names():
        command.stamp(config, "0001")  # a registry from before migrations: it is 0001
    command.upgrade(config, "head")


def pg_lock(conn: Connection) -> None:
    """Serialize creating and upgrading: held until the transaction ends."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


def backup_sqlite(path: Path, revision: str) -> Path:
    """A consistent copy of the registry as it is now, before an upgrade changes it.

    SQLite's backup API, not a file copy: with WAL, recent commits live in the -wal file.
    The caller holds the write lock, so nothing changes while it copies.
    """
    target = path.with_name(f"{path.name}.bak-{revision}")
    if target.exists():
        target = path.with_name(f"{path.name}.bak-{revision}-{uuid.uuid4().hex[:6]}")
    source = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    return target


def create_sqlite(path: Path, make_engine) -> bool:
    """A new, complete registry at `path`, or nothing if another process made one first
    (returns whether this call created it).

    Built under a temporary name in the same directory and hard-linked into place: the
    link fails if `path` appeared meanwhile, so a race between first commands leaves the
    winner's file and no half-built one.
    """
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    engine: Engine = make_engine(tmp)
    try:
        with engine.connect() as conn, conn.begin():
            run_migrations(conn, EMPTY, paths_root=None)
        engine.dispose()  # the last close checkpoints the WAL into the file
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False  # someone else created it first: theirs is as good as ours
        except OSError:  # a filesystem without hard links
            if path.exists():
                return False
            os.replace(tmp, path)
        return True
    finally:
        engine.dispose()
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


def older_message(where: str, revision: str, hint_db: str, backend: str) -> str:
    backup = f"it keeps a copy in {where}.bak-{revision}" if backend == "sqlite" else "pg_dump it first"
    return (
        f"registry {where} has schema revision {revision}, older than this grpoctl's ({HEAD}): "
        f"run `grpoctl db upgrade{hint_db}` ({backup}; there is no downgrade)"
    )


def newer_message(where: str, revision: str) -> str:
    return (
        f"registry {where} has schema revision {revision}, newer than this grpoctl knows ({HEAD}): "
        "upgrade grpoctl to use it"
    )
