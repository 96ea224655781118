"""Registries committed compressed (`docs/results/*.db.xz`), read through a cache.

A results registry is large (the lab's is 72 MB) and compresses about ninefold with xz,
so the repository keeps only the `.db.xz`. Any command that reads a registry accepts
that file as its `--db`: it is decompressed once, into a cache keyed by the compressed
file's content, and the copy is opened. A command that writes is refused: its writes
would land in the cache and be lost (`xz -dk FILE.db.xz` gives a registry to write to).

The cache is `$GRPOCTL_CACHE_DIR`, else `$XDG_CACHE_HOME/grpoctl`, else
`~/.cache/grpoctl`, under `registries/`, one copy per compressed file's content and
schema revision. Two processes that decompress the same file at
once each write a temporary file and rename it into place, so neither reads a half.

A committed registry may leave out its indexes (`strip_indexes`, which
scripts/snapshot_lab_registry.sh runs before compressing): they are rebuilt from the
data, and hold about half of a registry's compressed size. The cached copy gets every
index the tables declare (models.py) back before it is opened, so a stripped snapshot and
a whole one read alike. A stripped snapshot decompressed by hand (`xz -dk`) gets them
back when a command first opens it to write (registry/open.py), since the writes need the
unique ones. Strip only a registry at this grpoctl's schema revision (HEAD), as the
snapshot script's grpoctl leaves it: a revision that changes an index must rebuild the
stripped ones first.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

from sqlalchemy import Connection, Engine, Index, create_engine, inspect
from sqlmodel import SQLModel

from grpoctl import metrics
from grpoctl.errors import UserError
from grpoctl.registry import (
    models,  # noqa: F401  (declares the tables and indexes on SQLModel.metadata)
    schema,
)

SUFFIX = ".xz"
CHUNK = 1 << 20
# cache path -> the compressed file it came from, for this process's messages
_sources: dict[Path, Path] = {}


def is_compressed(path: str | Path) -> bool:
    return str(path).endswith(SUFFIX)


def cache_dir() -> Path:
    """Where decompressed registries are kept (see the module's docstring)."""
    explicit = os.environ.get("GRPOCTL_CACHE_DIR")
    if explicit:
        return Path(explicit) / "registries"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "grpoctl" / "registries"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            sha.update(block)
    return sha.hexdigest()


def decompressed(path: str | Path) -> Path:
    """The decompressed copy of `path` (a `.db.xz`), made on first use; its cache path."""
    source = Path(path)
    if not source.is_file():
        raise UserError(f"no registry at {source}")
    name = source.name[: -len(SUFFIX)]
    stem = name[: -len(".db")] if name.endswith(".db") else name
    # One copy per schema revision too: opening a copy migrates it to this grpoctl's schema,
    # and another version sharing the cache must not meet a copy it calls "newer".
    target = cache_dir() / f"{stem}-{_digest(source)[:16]}-r{schema.HEAD}.db"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{stem}-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, lzma.open(source) as compressed:
                shutil.copyfileobj(compressed, out, CHUNK)
            restore_indexes(Path(partial))
            os.replace(partial, target)
        except lzma.LZMAError as exc:
            raise UserError(f"registry {source} is not a readable xz file ({exc})") from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    _sources[target.resolve()] = source
    return target


def strip_indexes(path: str | Path) -> list[str]:
    """Drop every index the tables declare (models.py) from the SQLite registry at `path`,
    to compress it: `decompressed` builds them again. Returns the names dropped."""
    engine = _sqlite(path)
    try:
        with engine.begin() as conn:
            present = _present_indexes(conn)
            dropped = sorted(name for name in _declared_indexes() if name in present)
            for name in dropped:
                conn.exec_driver_sql(f'DROP INDEX "{name}"')
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM")
    finally:
        engine.dispose()
    return dropped


def drop_phase_memory(path: str | Path) -> int:
    """Delete the per-phase memory rows (metrics.PHASE_MEMORY) from the SQLite
    registry at `path`, for a lean snapshot (scripts/snapshot_lab_registry.sh LEAN=1);
    mem/peak, each step's highest, stays. Returns the rows deleted."""
    engine = _sqlite(path)
    try:
        with engine.begin() as conn:
            marks = ", ".join("?" * len(metrics.PHASE_MEMORY))
            deleted = conn.exec_driver_sql(f"DELETE FROM metric WHERE name IN ({marks})", metrics.PHASE_MEMORY).rowcount
    finally:
        engine.dispose()
    return deleted


def restore_indexes(path: str | Path) -> list[str]:
    """Create the declared indexes a stripped snapshot left out (none on a whole one), and
    return their names. Only at this grpoctl's schema revision, whose indexes models.py
    declares: a snapshot of an older revision is left to its migrations."""
    engine = _sqlite(path)
    try:
        with engine.begin() as conn:
            if schema.revision_of(conn) != schema.HEAD:
                return []
            present = _present_indexes(conn)
            if present >= _declared_indexes().keys():  # a whole registry: one query, nothing to do
                return []
            tables = set(inspect(conn).get_table_names())
            missing = [
                index
                for name, index in _declared_indexes().items()
                if name not in present and index.table is not None and index.table.name in tables
            ]
            for index in missing:
                index.create(conn)
    finally:
        engine.dispose()
    return [str(index.name) for index in missing]


def _declared_indexes() -> dict[str, Index]:
    """The indexes of the tables models.py declares."""
    return {str(index.name): index for table in SQLModel.metadata.sorted_tables for index in table.indexes}


def _present_indexes(conn: Connection) -> set[str]:
    # Read from sqlite_master, not by reflection, which skips expression indexes (ux_metric_step_key).
    return {name for (name,) in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'index'")}


def _sqlite(path: str | Path) -> Engine:
    return create_engine(f"sqlite:///{path}")


def source_of(path: str | Path) -> Path | None:
    """The compressed registry that `path` is this process's cached copy of, else None."""
    return _sources.get(Path(path).resolve())
