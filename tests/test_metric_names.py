"""One table of metric names (grpoctl/metrics.py): every writer and reader imports from it.

A name spelled out anywhere else in grpoctl/ is a reader that can drift from its writer
(or the reverse), so the scan below fails on any string literal that starts like a
metric name outside the table's module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from grpoctl import metrics

PACKAGE = Path(__file__).resolve().parents[1] / "grpoctl"
LOOKS_LIKE_A_METRIC = re.compile(r"^(train|eval|time|mem)/")


def literals_outside_the_table(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LOOKS_LIKE_A_METRIC.match(node.value):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_no_metric_name_is_spelled_out_outside_the_table():
    assert literals_outside_the_table() == []


def test_the_scan_finds_a_spelled_out_name(tmp_path):
    # The scan itself must bite: a module with an f-string metric name is found.
    fake = tmp_path / "grpoctl"
    (fake / "train").mkdir(parents=True)
    (fake / "metrics.py").write_text('REWARD = "train/reward"\n')
    (fake / "train" / "x.py").write_text('def f(k):\n    return {f"train/{k}": 1, "eval/accuracy": 2}\n')
    found = literals_outside_the_table(fake)
    assert sorted(line.split(": ", 1)[1] for line in found) == ["'eval/accuracy'", "'train/'"]


def test_every_entry_says_what_it_is():
    assert len(metrics.TABLE) > 40
    for name, info in metrics.TABLE.items():
        assert info.name == name and LOOKS_LIKE_A_METRIC.match(name), name
        assert info.description and info.unit, name
        assert info.higher_is_better in (True, False, None), name


def test_templated_names_come_from_functions_and_are_in_the_table():
    assert metrics.phase_time("rollout") == "time/rollout"
    assert metrics.mem_peak_after("train") == "mem/peak_after_train"
    for phase in metrics.PHASES:
        for name in (
            metrics.phase_time(phase),
            metrics.mem_peak_after(phase),
            metrics.mem_reserved_after(phase),
            metrics.mem_device_free_after(phase),
        ):
            assert metrics.describe(name) is not None, name


def test_directions_follow_the_table_then_the_family():
    assert not metrics.lower_is_better(metrics.EVAL_ACCURACY)
    assert metrics.lower_is_better(metrics.GRAD_NORM) and metrics.lower_is_better(metrics.STEP_TIME)
    assert metrics.lower_is_better("time/some_future_phase") and not metrics.lower_is_better("train/unknown")


def test_the_phases_timed_by_a_step_are_the_tables():
    # train/step.py's phases are the table's: a phase the table does not know has no description.
    source = (PACKAGE / "train" / "step.py").read_text()
    timed = set(re.findall(r'phases\("([a-z_]+)"\)', source))
    assert timed and timed <= set(metrics.PHASES)
