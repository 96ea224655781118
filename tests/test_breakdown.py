"""Breakdowns by level, subject and eval.group_by fields, on MATH500 and the MATH release's spelling."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import SHARED_DATA

from grpoctl.analysis.breakdown import breakdown
from grpoctl.data import Example
from grpoctl.data.files import load_math_jsonl
from grpoctl.data.records import parse_level

MATH500 = SHARED_DATA / "math500_test.jsonl"


@pytest.mark.skipif(not MATH500.exists(), reason="needs ../shared/data/math500_test.jsonl")
def test_math500_breaks_down_by_its_level_and_subject():
    records = [json.loads(line) for line in MATH500.read_text().splitlines()]
    examples = load_math_jsonl(MATH500)
    assert len(examples) == 500
    # A made-up verdict per problem: right when its unique_id's length is even.
    right = [{"accuracy": float(len(ex.id) % 2 == 0)} for ex in examples]
    table = breakdown(examples, right)
    levels = Counter(str(r["level"]) for r in records)
    assert list(table["level"]) == ["1", "2", "3", "4", "5"]
    assert {level: row["n"] for level, row in table["level"].items()} == dict(levels)
    subjects = Counter(r["subject"] for r in records)
    assert {s: row["n"] for s, row in table["subject"].items()} == dict(subjects)
    for level, row in table["level"].items():
        want = [len(r["unique_id"]) % 2 == 0 for r in records if str(r["level"]) == level]
        assert row["accuracy"] == pytest.approx(sum(want) / len(want))


def test_the_math_release_spelling_and_group_by_fields(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [
        {"problem": "p1", "solution": "so \\boxed{1}", "level": "Level 5", "type": "Geometry", "source": "amc"},
        {"problem": "p2", "solution": "so \\boxed{2}", "level": "Level ?", "type": "Geometry", "source": "aime"},
        {"problem": "p3", "solution": "so \\boxed{3}", "level": "Level 1", "type": "Algebra", "source": "amc"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = load_math_jsonl(path, answer_key="solution")
    assert [(e.level, e.subject, e.answer) for e in examples] == [
        (5, "Geometry", "1"),
        (None, "Geometry", "2"),
        (1, "Algebra", "3"),
    ]
    table = breakdown(examples, [{"accuracy": 1.0}, {"accuracy": 0.0}, {"accuracy": 0.0}], group_by=["source"])
    assert table["level"] == {"1": {"n": 1, "accuracy": 0.0}, "5": {"n": 1, "accuracy": 1.0}}  # "Level ?" has none
    assert table["subject"]["Geometry"] == {"n": 2, "accuracy": 0.5}
    assert table["source"] == {"aime": {"n": 1, "accuracy": 0.0}, "amc": {"n": 2, "accuracy": 0.5}}


def test_levels_in_both_spellings_and_none():
    assert [parse_level(v) for v in (3, "Level 3", "level 10", "3", "Level ?", None, True, "hard")] == [
        3,
        3,
        10,
        3,
        None,
        None,
        None,
        None,
    ]


def test_no_field_no_breakdown_and_numeric_order():
    plain = [Example("a", "q", "1"), Example("b", "q", "2")]
    assert breakdown(plain, [{"accuracy": 1.0}, {"accuracy": 0.0}]) == {}
    levels = [Example(str(i), "q", "1", level=i) for i in (10, 2, 9)]
    assert list(breakdown(levels, [{"accuracy": 1.0}] * 3)["level"]) == ["2", "9", "10"]
    with pytest.raises(ValueError):
        breakdown(plain, [{"accuracy": 1.0}])
