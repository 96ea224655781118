"""A compressed registry (`.db.xz`, as docs/results/ commits them) reads like any other.

It is decompressed once, into a cache keyed by its content; commands that read take it
as `--db`, commands that write are refused in one line, and its messages name the
compressed file, not the cache.
"""

from __future__ import annotations

import lzma
import shutil

import pytest

from grpoctl.errors import UserError
from grpoctl.registry import Registry
from grpoctl.registry import compressed as C
from tests.cli import invoke


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOCTL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "registries"


@pytest.fixture
def packed(tmp_path):
    """A registry with one run, compressed as the repository keeps them."""
    db = tmp_path / "made" / "reg.db"
    db.parent.mkdir()
    with Registry(str(db)) as registry:
        registry.create_run(name="packed-run", config={}, config_diff={}, config_hash="h" * 16, seed=0, total_steps=1)
    out = tmp_path / "reg.db.xz"
    with open(db, "rb") as raw, lzma.open(out, "wb") as xz:
        shutil.copyfileobj(raw, xz)
    return out


def test_readers_take_the_compressed_file_once_through_the_cache(packed, cache):
    out = invoke("runs", "list", "--db", str(packed))
    assert out.returncode == 0, out.stderr
    assert "packed-run" in out.stdout
    (copy,) = cache.glob("reg-*.db")
    made = copy.stat().st_mtime_ns
    assert invoke("runs", "show", "packed-run", "--db", str(packed)).returncode == 0
    assert copy.stat().st_mtime_ns == made and list(cache.glob("reg-*.db")) == [copy]  # not decompressed again
    assert C.source_of(copy) == packed


def test_a_changed_file_gets_its_own_copy(packed, cache, tmp_path):
    first = C.decompressed(packed)
    other = tmp_path / "other.db"
    with Registry(str(other)) as registry:
        registry.create_run(name="another-run", config={}, config_diff={}, config_hash="g" * 16, seed=1, total_steps=1)
    with open(other, "rb") as raw, lzma.open(packed, "wb") as xz:
        shutil.copyfileobj(raw, xz)
    second = C.decompressed(packed)
    assert second != first
    with Registry(str(packed), readonly=True) as registry:
        assert [r.name for r in registry.list_runs()] == ["another-run"]


def test_a_command_that_writes_is_refused_in_one_line(packed, cache):
    with pytest.raises(UserError, match=r"reg\.db\.xz is compressed, and this command writes to it.*xz -dk"):
        Registry(str(packed))
    out = invoke("runs", "tag", "packed-run", "x", "--db", str(packed))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "is compressed" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("content", [None, b"not xz at all"])
def test_a_missing_or_broken_file_is_one_line(tmp_path, cache, content):
    path = tmp_path / "gone.db.xz"
    if content is not None:
        path.write_bytes(content)
    out = invoke("runs", "list", "--db", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert str(path) in out.stderr
    assert not list(cache.glob("*")) if cache.exists() else True  # no half-written copy left


def test_the_registry_names_the_compressed_file_not_its_cache(packed, cache):
    with Registry(str(packed), readonly=True) as registry:
        assert registry.public_url == f"sqlite:///{packed}"


def test_a_snapshot_without_its_indexes_reads_back_with_them(tmp_path, cache):
    import sqlite3

    db = tmp_path / "whole.db"
    with Registry(str(db)) as registry:
        run = registry.create_run(name="r", config={}, config_diff={}, config_hash="s" * 16, seed=0, total_steps=2)
        registry.log_step(run.id, 1, {"train/reward": 0.5})

    def indexes(path):
        with sqlite3.connect(path) as conn:
            return sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))

    whole = indexes(db)
    stripped = tmp_path / "stripped.db"
    shutil.copy(db, stripped)
    dropped = C.strip_indexes(stripped)
    assert {"ix_metric_run_name_step", "ux_metric_step_key"} <= set(dropped)
    assert not set(dropped) & {name for name, _ in indexes(stripped)}
    packed = tmp_path / "stripped.db.xz"
    with open(stripped, "rb") as raw, lzma.open(packed, "wb") as xz:
        shutil.copyfileobj(raw, xz)
    copy = C.decompressed(packed)
    assert indexes(copy) == whole  # every declared index, as the registry made it
    with Registry(str(packed), readonly=True) as registry:
        assert registry.metric_of_runs([run.id], "train/reward") == {run.id: [(1, 0.5)]}


def test_a_stripped_registry_decompressed_by_hand_gets_its_indexes_when_written(tmp_path, caplog):
    """`xz -dk` of a stripped snapshot gives a file without the unique indexes that the writes'
    INSERT ... ON CONFLICT names ("ON CONFLICT clause does not match any PRIMARY KEY or UNIQUE
    constraint"); the first writer builds them, and a reader leaves the file alone."""
    import sqlite3

    def indexes(path):
        with sqlite3.connect(path) as conn:
            return sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))

    db = tmp_path / "studies.db"
    with Registry(str(db)) as registry:
        registry.create_run(name="first", config={}, config_diff={}, config_hash="a" * 16, seed=0, total_steps=1)
    whole = indexes(db)
    assert C.strip_indexes(db)
    stripped = indexes(db)
    assert stripped != whole
    with Registry(str(db), readonly=True) as registry:
        assert [run.name for run in registry.list_runs()] == ["first"]
    assert indexes(db) == stripped  # reading does not write
    with Registry(str(db)) as registry:
        run = registry.create_run(name="second", config={}, config_diff={}, config_hash="b" * 16, seed=0, total_steps=1)
        assert run.name == "second"
    assert indexes(db) == whole
    assert "had left out" in caplog.text
    assert C.restore_indexes(db) == []  # a whole registry: nothing to do


def test_a_lean_snapshot_leaves_out_only_the_per_phase_memory_rows(tmp_path):
    db = tmp_path / "lean.db"
    with Registry(str(db)) as registry:
        run = registry.create_run(name="r", config={}, config_diff={}, config_hash="l" * 16, seed=0, total_steps=1)
        registry.log_step(
            run.id,
            1,
            {"train/reward": 0.5, "mem/peak": 700.0, "mem/peak_after_rollout": 690.0, "mem/reserved_after_train": 1.0},
        )
    assert C.drop_phase_memory(db) == 2
    with Registry(str(db), readonly=True) as registry:
        assert registry.last_metrics([run.id]) == {run.id: {"train/reward": 0.5, "mem/peak": 700.0}}
