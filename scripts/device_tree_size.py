"""The bytes that would travel to a remote GPU machine which copies the working tree, against its limit.

Some lent GPU machines (no network, a few minutes at a time) receive the checkout as it
is: its tracked files and the untracked files git does not ignore, plus a few ignored
folders named to travel with them, such as the wheel folder that
scripts/prepare_device_wheels.py fills. The copy is refused above a size limit (64 MiB
by default), so this counts the same files, as they are on disk now, before a run is
attempted. Exit status 1 when the total is over the limit.

    python scripts/device_tree_size.py                        # the checkout and .device-wheels/
    python scripts/device_tree_size.py --carry .device-wheels --carry build/x --limit-mib 64
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20
DEFAULT_LIMIT_MIB = 64
DEFAULT_WHEELS = ".device-wheels"  # scripts/prepare_device_wheels.py writes here; .gitignore ignores it


@dataclass
class Part:
    """One kind of file that travels: how many, their bytes, and the largest few."""

    name: str
    files: int = 0
    bytes: int = 0
    largest: list[tuple[int, str]] = field(default_factory=list)

    def add(self, path: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        self.largest = sorted([*self.largest, (size, path)], reverse=True)[:3]


def git_paths(repo: Path, *args: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *args], capture_output=True, check=True)
    return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def size_on_disk(path: Path) -> int | None:
    """A file's size as it would be copied (a symbolic link as the link itself); None if gone."""
    try:
        return path.lstat().st_size
    except FileNotFoundError:
        return None


def measure(repo: Path, carried: list[str]) -> list[Part]:
    """Tracked files, untracked files that git does not ignore, and each carried folder (or file)."""
    seen: set[str] = set()
    parts = []
    for name, args in (("tracked", ("--cached",)), ("untracked, not ignored", ("--others", "--exclude-standard"))):
        part = Part(name)
        for rel in git_paths(repo, *args):
            size = size_on_disk(repo / rel)
            if size is not None and rel not in seen:  # a tracked file deleted from the tree does not travel
                seen.add(rel)
                part.add(rel, size)
        parts.append(part)
    for carry in carried:
        part = Part(f"carried {carry}")
        root = repo / carry
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if not p.is_dir())
        for path in files:
            rel = path.relative_to(repo).as_posix()
            size = size_on_disk(path)
            if size is not None and rel not in seen:
                seen.add(rel)
                part.add(rel, size)
        parts.append(part)
    return parts


def report(parts: list[Part], limit: int) -> str:
    total = sum(p.bytes for p in parts)
    lines = []
    for p in parts:
        lines.append(f"{p.name:<32}{p.files:>7} files {p.bytes / MiB:>9.2f} MiB")
        lines += [f"    {size / MiB:>8.2f} MiB  {path}" for size, path in p.largest]
    verdict = "fits" if total <= limit else "OVER the limit"
    lines.append(f"{'total':<32}{'':>13} {total / MiB:>9.2f} MiB of {limit / MiB:.0f} MiB: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument(
        "--carry",
        action="append",
        default=None,
        help=f"an ignored folder or file that travels too, relative to the repo (repeatable; default {DEFAULT_WHEELS})",
    )
    parser.add_argument("--limit-mib", type=float, default=DEFAULT_LIMIT_MIB)
    args = parser.parse_args(argv)
    carried = args.carry if args.carry is not None else [DEFAULT_WHEELS]
    repo = args.repo.resolve()
    if not (repo / ".git").exists():
        print(f"{repo} is not a git checkout", file=sys.stderr)
        return 2
    for carry in carried:
        if not (repo / carry).exists():
            print(f"note: {carry} does not exist: 0 bytes of it travel", file=sys.stderr)
    limit = int(args.limit_mib * MiB)
    parts = measure(repo, [c for c in carried if (repo / c).exists()])
    print(report(parts, limit))
    return 0 if sum(p.bytes for p in parts) <= limit else 1


if __name__ == "__main__":
    os.environ.setdefault("GIT_OPTIONAL_LOCKS", "0")  # counting must not take the index lock another git holds
    sys.exit(main())
