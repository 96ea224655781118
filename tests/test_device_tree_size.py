"""scripts/device_tree_size.py counts what travels to a lent GPU machine: tracked files,
untracked files git does not ignore, and the carried folders; not what git ignores."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "scripts" / "device_tree_size.py"


def tree_size(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def total_mib(stdout: str) -> float:
    line = next(row for row in stdout.splitlines() if row.startswith("total"))
    return float(line.split()[1])


def test_counts_tracked_untracked_and_carried_files_but_not_ignored_ones(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("ignored/\n.device-wheels/\n")  # 27 bytes
    (tmp_path / "tracked.bin").write_bytes(b"t" * 300_000)
    git(tmp_path, "add", ".gitignore", "tracked.bin")
    (tmp_path / "untracked.txt").write_bytes(b"u" * 200_000)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big.bin").write_bytes(b"i" * 5_000_000)
    (tmp_path / ".device-wheels").mkdir()
    (tmp_path / ".device-wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"w" * 100_000)
    (tmp_path / "tracked.bin").unlink()  # deleted from the tree: it no longer travels
    (tmp_path / "tracked2.bin").write_bytes(b"t" * 400_000)
    git(tmp_path, "add", "tracked2.bin")

    out = tree_size("--repo", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    expected = 27 + 400_000 + 200_000 + 100_000
    assert abs(total_mib(out.stdout) - expected / (1 << 20)) < 0.006
    assert "ignored/big.bin" not in out.stdout and "tracked.bin" not in out.stdout.replace("tracked2.bin", "")
    assert "carried .device-wheels" in out.stdout and "untracked.txt" in out.stdout

    # Over the limit: exit status 1; the ignored folder counts once it is carried.
    out = tree_size("--repo", str(tmp_path), "--limit-mib", "0.5")
    assert out.returncode == 1 and "OVER the limit" in out.stdout
    out = tree_size("--repo", str(tmp_path), "--carry", ".device-wheels", "--carry", "ignored")
    assert abs(total_mib(out.stdout) - (expected + 5_000_000) / (1 << 20)) < 0.006


def test_this_checkout_with_its_wheel_folder_fits_the_limit():
    out = tree_size()
    assert out.returncode == 0, out.stdout + out.stderr
