"""Short content hashes the registry stores, so a result can be traced to the
exact data it was computed on (and two runs checked to share an eval subset)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from grpoctl.data.examples import DataError, Example

HASH_CHARS = 12  # 48 bits: plenty to tell datasets apart, short enough for a table


def subset_hash(examples: Iterable[Example]) -> str:
    """Hash of the sorted example ids: the same set of examples gives the same
    hash whatever its order."""
    ids = sorted(example.id for example in examples)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:HASH_CHARS]


def file_hash(path: str | Path) -> str:
    """Hash of a file's bytes, read in chunks so a large dataset is fine."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a file") from None
    return digest.hexdigest()[:HASH_CHARS]
