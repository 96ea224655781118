"""What "the rows of an uninterrupted run" means in the fault and resume tests: a run's
metric rows (timings and memory left out: they differ run to run), stored completions and
evals in a canonical order, and the comparison of two such sets.

A registry that only another network namespace reaches (tests/cluster.py) is read there:

    python tests/run_rows.py URL NAME       # prints url_rows(URL, NAME) as JSON ($PGPASSWORD)

and the JSON turned back into rows with `from_json`.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

METRICS = (
    "SELECT step, opt_step, name, value FROM metric WHERE run_id = {id} AND name NOT LIKE 'time/%' "
    "AND name NOT LIKE 'mem/%' ORDER BY step, coalesce(opt_step, -1), name"
)
SAMPLES = (
    "SELECT step, kind, prompt, response, ground_truth, reward FROM sample WHERE run_id = {id} ORDER BY step, kind, id"
)
EVALS = "SELECT step, n, accuracy, format_rate FROM evalresult WHERE run_id = {id} ORDER BY step, id"


def rows(db: Path, name: str) -> dict[str, list[tuple]]:
    """A run's rows in a SQLite registry."""
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("SELECT id FROM run WHERE name = ?", (name,)).fetchone()
        return {
            table: conn.execute(query.format(id="?"), (run_id,)).fetchall()
            for table, query in (("metrics", METRICS), ("samples", SAMPLES), ("evals", EVALS))
        }


def url_rows(url: str, name: str) -> dict[str, list[tuple]]:
    """`rows`, from a registry at any URL or path (PostgreSQL: the password from the URL,
    $PGPASSWORD or ~/.pgpass)."""
    from sqlalchemy import create_engine, text

    from grpoctl.registry.engine import resolve_url

    engine = create_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            run_id = conn.execute(text("SELECT id FROM run WHERE name = :n"), {"n": name}).scalar_one()
            return {
                table: [tuple(r) for r in conn.execute(text(query.format(id=":id")), {"id": run_id})]
                for table, query in (("metrics", METRICS), ("samples", SAMPLES), ("evals", EVALS))
            }
    finally:
        engine.dispose()


def from_json(text: str) -> dict[str, list[tuple]]:
    """Rows printed by `python tests/run_rows.py URL NAME` (JSON keeps floats exact)."""
    return {table: [tuple(r) for r in rows] for table, rows in json.loads(text).items()}


def assert_same_rows(got: dict, want: dict) -> None:
    keys = [(s, o, n) for s, o, n, _ in got["metrics"]]
    assert len(keys) == len(set(keys)), "duplicated metric rows"
    assert keys == [(s, o, n) for s, o, n, _ in want["metrics"]], "metric keys differ (gaps or extra rows)"
    for (s, o, n, a), (_, _, _, b) in zip(got["metrics"], want["metrics"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), (s, o, n)
    for table in ("samples", "evals"):
        assert len(got[table]) == len(want[table]), table
        for a, b in zip(got[table], want[table], strict=True):
            assert a[:-1] == b[:-1] if table == "samples" else a[:2] == b[:2], (table, a, b)
            assert a[-1] == pytest.approx(b[-1], rel=1e-5, abs=1e-6), (table, a, b)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} URL NAME")
    print(json.dumps(url_rows(sys.argv[1], sys.argv[2])))
