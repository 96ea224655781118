"""Rebuilding a model shipped with the package (grpoctl/tiny/shipped/), and the command
line that does it (`python -m grpoctl.warmstart.lab --ship`, `... .tiny --ship`)."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

from grpoctl.tiny.model import SHIPPED


def rebuild_shipped(prefix: str, key: str, build: Callable[[Path], object]) -> Path:
    """Build `SHIPPED/prefix-key` afresh with `build(folder)`, removing every older build of
    `prefix`. It is built beside and renamed into place, so a build that stops half-way
    never leaves a folder that looks shipped."""
    root = SHIPPED / f"{prefix}-{key}"
    for old in SHIPPED.glob(f"{prefix}-*"):
        shutil.rmtree(old)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    tmp.rename(root)
    return root


def ship_command(description: str, ship: Callable[[], Path]) -> None:
    """The `--ship` command line: one thread (the build's figures are CPU-seconds), then
    the shipped folder's path."""
    import torch

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ship", action="store_true", required=True)
    parser.parse_args()
    torch.set_num_threads(1)
    print(ship())
