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
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

from grpoctl.errors import UserError
from grpoctl.registry import schema

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
            os.replace(partial, target)
        except lzma.LZMAError as exc:
            raise UserError(f"registry {source} is not a readable xz file ({exc})") from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    _sources[target.resolve()] = source
    return target


def source_of(path: str | Path) -> Path | None:
    """The compressed registry that `path` is this process's cached copy of, else None."""
    return _sources.get(Path(path).resolve())
