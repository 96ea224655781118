"""Reward plugins and weighted components (issue 23, part 4): what a spec names, how a
plugin's value is read, the run identity, and a run end to end with a plugin that raises
and one that hangs. Bad specs refused before anything is written: tests/test_bad_inputs.py."""

from __future__ import annotations

import math
import sqlite3
import textwrap
from pathlib import Path

import pytest
from cli import invoke
from conftest import REPO, lab_overrides

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.errors import UserError
from grpoctl.reward_specs import Component, absolute_spec, components_of, plugin_identity
from grpoctl.rewards.plugins import component_values
from grpoctl.run_identity import config_hash, hashed_items

LAB_HASH = "b931743862afb61a"  # tests/test_run_identity.py pins it
BREVITY = "examples/rewards/brevity.py:brevity"


def test_a_plugin_value_is_a_number_or_a_dict_of_numbers():
    assert component_values(0.5) == {"reward": 0.5}
    assert component_values(True) == {"reward": 1.0}
    assert component_values({"a": 1, "b": 0.25}) == {"a": 1.0, "b": 0.25, "reward": 1.25}
    assert component_values({"a": 1, "reward": 0.5}) == {"a": 1.0, "reward": 0.5}  # an explicit total wins
    for bad in (None, "1.0", [1.0], {}, {"a": "x"}, math.nan, {"a": math.inf}):
        with pytest.raises((TypeError, ValueError)):
            component_values(bad)


def test_components_default_to_prompt_reward_alone():
    assert components_of("r1_zero", []) == [Component(None, "r1_zero", 1.0)]
    assert components_of(
        "r1_zero", [{"name": "a", "spec": "r1_zero"}, {"name": "b", "spec": "m:f", "weight": 0.1}]
    ) == [
        Component("a", "r1_zero", 1.0),
        Component("b", "m:f", 0.1),
    ]


def test_built_in_rewards_change_no_hash():
    assert config_hash(load_config("lab", [])) == LAB_HASH
    assert config_hash(load_config("lab", ["reward.components=[]", "reward.timeout_s=5.0"])) == LAB_HASH
    assert "reward.plugin_sha256" not in hashed_items(load_config("lab", []))


def test_a_plugin_s_spec_and_file_bytes_are_its_identity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plugin = tmp_path / "short.py"
    plugin.write_text("def short(response, truth, example):\n    return -len(response)\n")
    components = "[{name: answer, spec: r1_zero, weight: 1}, {name: short, spec: short.py:short, weight: 0.1}]"
    cfg = load_config("lab", [f"reward.components={components}"])
    first = config_hash(cfg)
    assert first != LAB_HASH and set(plugin_identity(cfg)) == {"short.py:short"}
    plugin.write_text("def short(response, truth, example):\n    return -2 * len(response)\n")
    assert config_hash(cfg) != first  # edited: a new run, not the old one
    plugin.write_text("def short(response, truth, example):\n    return -len(response)\n")
    assert config_hash(cfg) == first
    weighted = load_config("lab", [f"reward.components={components.replace('0.1', '0.2')}"])
    assert config_hash(weighted) != first
    # However a weight is written, the same components are the same run.
    for same in ("weight: 1.0", "weight: 1.00"):
        assert config_hash(load_config("lab", [f"reward.components={components.replace('weight: 1', same)}"])) == first
    implicit = components.replace(", weight: 1}", "}")
    assert "weight: 1}" not in implicit and config_hash(load_config("lab", [f"reward.components={implicit}"])) == first
    alone = load_config("lab", ["prompt.reward=short.py:short"])
    assert config_hash(alone) not in (first, LAB_HASH)


def test_a_sweep_makes_a_plugin_path_absolute(tmp_path, monkeypatch):
    from grpoctl.sweep.spec import absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.py").write_text("def f(response, truth, example):\n    return 0.0\n")
    cfg = load_config("lab", ["reward.components=[{name: a, spec: r1_zero}, {name: b, spec: r.py:f, weight: 0.5}]"])
    absolute_paths(cfg)
    assert [c.spec for c in cfg.reward.components] == ["r1_zero", f"{tmp_path / 'r.py'}:f"]
    assert absolute_spec("json:dumps") == "json:dumps"  # a module stays a module name
    alone = load_config("lab", ["prompt.reward=r.py:f"])
    absolute_paths(alone)
    assert alone.prompt.reward == f"{tmp_path / 'r.py'}:f"


def test_a_bad_spec_is_one_line():
    with pytest.raises(UserError, match=r"^prompt.reward=json:no_such_function: module json has no function"):
        load_config("lab", ["prompt.reward=json:no_such_function"])
    with pytest.raises(UserError, match=r"is not one of: r1_zero, question_only \(or a plugin"):
        load_config("lab", ["prompt.reward=bogus"])


# --------------------------------------------------------------------------- end to end

PLUGINS = textwrap.dedent(
    """
    import os
    import time

    def shape(response, truth, example):
        # named parts: each is recorded, their sum is the component's reward
        assert example["answer"] == truth and example["question"]
        return {"short": -len(response) / 100, "level": float(example["level"] or 0) / 10}

    def boom(response, truth, example):
        raise RuntimeError("a bug in the user's reward")

    def hang_once(response, truth, example):
        flag = os.path.join(os.path.dirname(__file__), "hung")
        if not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(600)  # waits without computing: the wall-clock backstop stops it
        return 1.0
    """
)


def _series(db: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    with sqlite3.connect(db) as conn:
        for name, step, value in conn.execute("select name, step, value from metric where opt_step is null"):
            out.setdefault(name, {})[step] = value
    return out


@pytest.mark.slow
def test_a_run_with_plugins_that_raise_and_hang_finishes_and_counts_them(tmp_path):
    (tmp_path / "plugins.py").write_text(PLUGINS)
    components = (
        "[{name: answer, spec: r1_zero, weight: 1}, {name: shape, spec: plugins.py:shape, weight: 0.1},"
        " {name: boom, spec: plugins.py:boom, weight: 0.5}, {name: hang, spec: plugins.py:hang_once, weight: 0.2}]"
    )
    db = tmp_path / "r.db"
    out = invoke(
        "train",
        "lab",
        *lab_overrides("lab", tmp_path, **{"reward.components": components, "reward.timeout_s": 0.5}),
        "--db",
        str(db),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    series = _series(db)
    n = 16  # lab_overrides' rollout_batch_size
    for step in (1, 2):
        parts = {name: series[metrics.reward_component(name)][step] for name in ("answer", "shape", "boom", "hang")}
        assert parts["boom"] == 0.0  # every call raised: scored 0
        shape = (
            series[metrics.reward_component("shape.short")][step]
            + series[metrics.reward_component("shape.level")][step]
        )
        assert parts["shape"] == pytest.approx(shape)
        assert parts["answer"] == pytest.approx(series[metrics.ANSWER_REWARD][step])
        weighted = parts["answer"] + 0.1 * parts["shape"] + 0.5 * parts["boom"] + 0.2 * parts["hang"]
        assert series[metrics.REWARD][step] == pytest.approx(weighted, abs=1e-6)
        assert series[metrics.GRADING_ERRORS][step] >= n  # boom's, one per rollout
    # The one hung call (step 1's first) scored 0 and was counted as a timeout; the rest scored 1.
    assert series[metrics.reward_component("hang")] == {1: pytest.approx((n - 1) / n), 2: 1.0}
    assert sum(series[metrics.GRADING_TIMEOUTS].values()) == 1
    with sqlite3.connect(db) as conn:
        (status,) = conn.execute("select status from run").fetchone()
    assert status == "finished"


@pytest.mark.slow
def test_a_plugin_alone_as_prompt_reward_records_its_parts(tmp_path):
    db = tmp_path / "r.db"
    spec = f"{REPO / 'examples' / 'rewards' / 'brevity.py'}:shape"
    extra = {"prompt.reward": spec, "loop.n_grpo_steps": 1, "eval.every": 0, "eval.at_start": "false"}
    out = invoke("train", "lab", *lab_overrides("lab", tmp_path, **extra), "--db", str(db), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    series = _series(db)
    brevity, working = series[metrics.reward_component("brevity")][1], series[metrics.reward_component("working")][1]
    assert 0 < brevity <= 1 and working <= 0
    assert series[metrics.REWARD][1] == pytest.approx(brevity + working)
    assert metrics.ANSWER_REWARD in series  # still the built-in grade, for the curves and health flags


# --------------------------------------------------------------------------- report


def test_the_report_plots_each_component_s_curve(tmp_path, plotted_labels):
    from test_compare_report import make_run

    from grpoctl.registry import Registry
    from grpoctl.views.report_view import write_report

    labels = plotted_labels
    with Registry(str(tmp_path / "registry.db")) as registry:
        make_run(registry, "plain", [], variant="plain", steps=4)
        _, run = make_run(registry, "plugin", ["lr=1e-4"], variant="plugin", steps=4)
        for step in range(4):
            registry.log_step(
                run.id,
                step + 100,
                {metrics.reward_component("answer"): 0.1 * step, metrics.reward_component("brevity"): 0.5},
            )
        labels.clear()
        text = write_report(registry, "abl", tmp_path / "rep").read_text()
        assert "![reward components (each before its weight)](reward_components.png)" in text
        assert (tmp_path / "rep" / "reward_components.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert labels[-2:] == ["plugin: answer", "plugin: brevity"]  # the runs without components draw none


@pytest.mark.slow
def test_the_time_limit_holds_off_the_main_thread(tmp_path):
    """reward.timeout_s is enforced in the plugin's worker process, so a scorer called from
    another thread (where no signal can interrupt anything) still stops a spinning plugin."""
    import threading

    from grpoctl.rewards import grading_stats
    from grpoctl.rewards.plugins import RewardScorer

    (tmp_path / "spin.py").write_text(
        "def spin(response, truth, example):\n    while response == 'spin':\n        pass\n    return 0.5\n"
    )
    components = [Component("answer", "r1_zero", 1.0), Component("spin", f"{tmp_path / 'spin.py'}:spin", 1.0)]
    scorer = RewardScorer(components, timeout_s=0.3, grader_reward="r1_zero")
    got: list = []
    before = grading_stats()
    try:
        worker = threading.Thread(target=lambda: got.append(scorer.score(["spin", "ok"], ["1", "1"], [{}, {}])))
        worker.start()
        worker.join(timeout=120)
    finally:
        scorer.close()
    assert not worker.is_alive() and got
    assert [s["components"]["spin"] for s in got[0]] == [0.0, 0.5]
    assert grading_stats()["timeouts"] - before["timeouts"] == 1
