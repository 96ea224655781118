"""The curriculum by level (issue 40, grpoctl/data/curriculum.py): the weights as its
docstring states them, draws that are a pure function of the seed and the state, pass
rates that move weight off solved levels, and a lab run that resumes exactly, the
sampler's state included."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
import torch
from cli import invoke
from conftest import lab_overrides
from run_rows import assert_same_rows, rows

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.data import Example
from grpoctl.data.curriculum import LevelCurriculum, level_weights, mixed_group_share
from grpoctl.data.run_data import load_run_data
from grpoctl.errors import UserError
from grpoctl.run_identity import config_hash
from grpoctl.train.checkpoint import STATE_FILE


def _problems(per_level: int = 20, levels=(1, 2, 3)) -> list[Example]:
    return [Example(f"L{lv}:{i}", f"q{lv}-{i}", "0", level=lv) for lv in levels for i in range(per_level)]


def _curriculum(seed: int = 0, **kw) -> LevelCurriculum:
    args = dict(group_size=4, decay=0.5, uniform_share=0.2) | kw
    return LevelCurriculum(_problems(), seed, **args)


def test_the_weights_are_the_expected_share_of_mixed_groups_plus_an_even_share():
    assert mixed_group_share(0.5, 4) == pytest.approx(1 - 2 / 16)
    assert mixed_group_share(1.0, 4) == 0.0 and mixed_group_share(0.0, 4) == 0.0
    # level 1 solved, level 2 at 1/2, level 3 not seen yet (counted as fully mixed)
    weights = level_weights({1: 1.0, 2: 0.5, 3: None}, group_size=4, uniform_share=0.2)
    signal = {1: 0.0, 2: 0.875, 3: 1.0}
    for level, s in signal.items():
        assert weights[level] == pytest.approx(0.2 / 3 + 0.8 * s / 1.875)
    assert sum(weights.values()) == pytest.approx(1.0)
    # no signal anywhere: even
    assert level_weights({1: 1.0, 2: 0.0}, 4, 0.2) == {1: 0.5, 2: 0.5}


def test_draws_are_a_pure_function_of_the_seed_and_the_state():
    a, b, other = _curriculum(seed=3), _curriculum(seed=3), _curriculum(seed=4)
    first = [ex.id for ex in a.next_batch(12)]
    assert first == [ex.id for ex in b.next_batch(12)]
    assert first != [ex.id for ex in other.next_batch(12)]
    assert a.position == 12 and len(set(first)) == 12  # no problem twice within a level's epoch

    a.observe(a.next_batch(4), [1.0] * 16)
    a.commit()
    saved = a.state()
    a.observe(a.next_batch(4), [0.0, 1.0] * 8)  # a step abandoned before it was recorded
    a.restore(saved)
    fresh = _curriculum(seed=3)
    fresh.restore(saved)
    assert a.weights() == fresh.weights() and a.position == fresh.position == 16
    assert [ex.id for ex in a.next_batch(8)] == [ex.id for ex in fresh.next_batch(8)]
    assert a.step_outcomes() == {}  # restore dropped the abandoned step's outcomes


def test_weight_moves_off_a_solved_level_towards_mixed_ones_and_draws_follow_it():
    c = _curriculum(decay=0.5)
    start = c.weights()
    assert start == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 1 / 3})
    level = {ex.level: ex for ex in _problems(1)}
    # level 1 solved by every rollout, level 2 half the time, level 3 never
    c.observe([level[1], level[2], level[3]], [1.0] * 4 + [1.0, 0.0] * 2 + [0.0] * 4)
    assert c.step_outcomes() == {1: (1.0, 1), 2: (0.5, 1), 3: (0.0, 1)}
    assert c.weights() == start  # outcomes act only once the step is committed
    c.commit()
    w = c.weights()
    assert w[2] > 0.8 and w[1] == w[3] == pytest.approx(0.2 / 3)
    drawn = Counter(ex.level for _ in range(200) for ex in c.next_batch(8))
    assert drawn[2] / 1600 == pytest.approx(w[2], abs=0.03)
    # the running mean: p <- decay * p + (1 - decay) * m
    c.observe([level[1]], [0.0] * 4)
    c.commit()
    assert c.pass_rates[1] == pytest.approx(0.5) and c.pass_rates[2] == pytest.approx(0.5)


def test_problems_without_a_level_are_refused():
    with pytest.raises(ValueError, match="has no level"):
        LevelCurriculum([Example("x", "q", "1")], 0, 4, 0.5, 0.2)
    cfg = load_config("addition", ["data.curriculum.enabled=true"])
    with pytest.raises(UserError, match="data.curriculum.enabled needs a level on every training problem"):
        load_run_data(cfg)


def test_the_curriculum_is_in_the_fingerprint_and_off_is_hash_neutral():
    plain, on = load_config("lab", []), load_config("lab", ["data.curriculum.enabled=true"])
    assert config_hash(load_config("lab", ["data.curriculum.decay=0.8"])) == config_hash(plain)
    assert config_hash(on) != config_hash(plain)
    assert "curriculum" not in load_run_data(plain).fingerprint()["train"]
    record = load_run_data(on).fingerprint()["train"]["curriculum"]
    assert record["by"] == "level" and record["uniform_share"] == 0.2
    assert set(record["problems_per_level"]) == {"1", "2", "3", "4", "5"}


def test_a_level_series_is_in_the_table_on_first_sight():
    """A reader (compare, the dashboard) may meet a level no writer in its process named."""
    info = metrics.describe(metrics.LEVEL_PREFIX + "7/accuracy")
    assert info is not None and info.higher_is_better and "level 7" in info.description
    assert metrics.describe(metrics.LEVEL_PREFIX + "7/mood") is None


def _level_series(db: Path, name: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    with sqlite3.connect(db) as conn:
        query = (
            "SELECT m.name, m.step, m.value FROM metric m JOIN run r ON r.id = m.run_id "
            "WHERE r.name = ? AND m.name LIKE ? AND m.opt_step IS NULL"
        )
        for metric, step, value in conn.execute(query, (name, metrics.LEVEL_PREFIX + "%")):
            out.setdefault(metric, {})[step] = value
    return out


def test_a_resumed_curriculum_run_on_the_lab_equals_an_uninterrupted_one(tmp_path):
    """Two steps on the lab; the stopped run abandons step 2 after its rollouts were graded
    (so the sampler had noted them), checkpoints step 1, and resumes from it."""
    extra = {
        "runtime.threads": 1,
        "data.curriculum.enabled": "true",
        "data.train_size": 100,  # the lab draws 4,000 problems by default: a third of a run's time here
        "rollout.rollout_batch_size": 8,  # 2 problems a step
        "loop.train_batch_size": 8,
        "eval.at_start": "false",
        "eval.subset": 4,
    }
    db = tmp_path / "registry.db"
    args = [*lab_overrides("lab", tmp_path, **extra), f"--db={db}"]
    straight = invoke("train", "lab", *args, "name=straight", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]
    stopped = invoke(
        "train",
        "lab",
        *args,
        "name=stopped",
        "runtime.on_signal=checkpoint_now",
        cwd=tmp_path,
        env={"GRPOCTL_FAULT": "step-rollouts@2:INT"},
    )
    assert stopped.returncode == 1, stopped.stderr[-2000:]
    saved = torch.load(tmp_path / "ckpt" / "stopped" / "step-1" / STATE_FILE, weights_only=False)
    assert saved["step"] == 1 and saved["curriculum"]["batches"] == 1
    assert sum(saved["curriculum"]["positions"].values()) == saved["data_position"] == 2
    resumed = invoke("train", "--resume", "stopped", f"--db={db}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    assert_same_rows(rows(db, "stopped"), rows(db, "straight"))
    series = _level_series(db, "straight")
    weights = {level: series[metrics.level_series(level, "weight")] for level in (1, 2, 3, 4, 5)}
    assert all(w[1] == pytest.approx(0.2) for w in weights.values())  # nothing seen yet: even
    assert len({round(w[2], 9) for w in weights.values()}) > 1  # step 1's outcomes moved step 2's weights
    assert sum(v for name, s in series.items() if name.endswith("/prompts") for v in s.values()) == 4
    assert any(name.endswith("/accuracy") for name in series)
    shown = invoke("runs", "show", "straight", f"--db={db}", cwd=tmp_path)
    assert "drawn by a level curriculum" in shown.stdout, shown.stdout[-2000:]


def test_the_report_plots_the_level_weights_and_accuracy(tmp_path, plotted_labels):
    from test_compare_report import make_run

    from grpoctl.registry import Registry
    from grpoctl.views.report_view import write_report

    labels = plotted_labels
    with Registry(str(tmp_path / "registry.db")) as registry:
        make_run(registry, "uniform", [], variant="uniform", steps=4)
        _, run = make_run(registry, "levels", ["lr=1e-4"], variant="curriculum", steps=4)
        for step in range(1, 5):
            figures = {metrics.level_series(level, "weight"): 0.1 * level * step for level in (1, 2)}
            registry.log_step(run.id, step + 100, figures | {metrics.level_series(2, "accuracy"): 0.5})
        labels.clear()
        text = write_report(registry, "abl", tmp_path / "rep").read_text()
    assert "![the curriculum's weight of each level](level_weights.png)" in text
    assert "![sampled accuracy of each level the curriculum drew](level_accuracy.png)" in text
    assert (tmp_path / "rep" / "level_weights.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert labels[-3:] == ["curriculum: level 1", "curriculum: level 2", "curriculum: level 2"]
