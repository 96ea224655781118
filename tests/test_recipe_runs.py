"""CISPO, RLOO, batch std and a loss plugin in lab runs (issue 40's "done when"): each
keeps `--resume` exact, each acts as its formula says on step 1, a plugin equal to the
clipped loss records the built-in's rows, and a plugin that raises stops the run with
one line and exit 1, recording nothing of its step.

Every run here is 2 lab steps (conftest.lab_overrides) without std normalization, so
step 1's rollouts and rewards are the same in all of them (the loss and the estimator act
after sampling), and on-policy at step 1 every loss's gradient is -A grad log p: the raw
gradient norm scales with the advantages. In the fast tier: every run is in-process on
100 of the lab's problems, about 0.5 s each once torch is warm (4 s for the module).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli import invoke
from conftest import REPO, lab_overrides
from run_rows import assert_same_rows, rows

from grpoctl import metrics

CLIPPED = f"{REPO / 'examples' / 'losses' / 'clipped.py'}:clipped"
GROUP = 4  # lab_overrides' group size


def _train(tmp_path: Path, name: str, env: dict | None = None, **extra) -> int:
    # 100 problems: the lab draws 4,000 by default, a third of a 2-step run's time
    extra = {"runtime.threads": 1, "loss.use_std_normalization": "false", "data.train_size": 100, **extra}
    db = f"--db={tmp_path / 'registry.db'}"
    out = invoke("train", "lab", *lab_overrides("lab", tmp_path, **extra), f"name={name}", db, cwd=tmp_path, env=env)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out


def _step_metrics(db: Path, name: str, step: int) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        query = (
            "SELECT metric.name, value FROM metric JOIN run ON run.id = metric.run_id "
            "WHERE run.name = ? AND step = ? AND opt_step IS NULL"
        )
        return dict(conn.execute(query, (name, step)).fetchall())


@pytest.fixture(scope="module")
def builtin(tmp_path_factory) -> Path:
    """The clipped loss with the group mean: the run every other one here is measured against."""
    tmp_path = tmp_path_factory.mktemp("recipe-runs")
    out = _train(tmp_path, "builtin")
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path


@pytest.mark.parametrize(
    ("name", "recipe"),
    [
        ("rloo", {"loss.advantage_estimator": "rloo"}),
        ("cispo-batch-std", {"loss.loss_type": "cispo", "loss.advantage_estimator": "batch_std", "std": "true"}),
    ],
)
def test_the_new_recipes_resume_exactly_and_act_as_their_formulas_say(builtin, name, recipe):
    tmp_path = builtin
    straight = _train(tmp_path, name, **recipe)
    assert straight.returncode == 0, straight.stderr[-3000:]
    # SIGINT as step 1 starts: the step finishes, checkpoints, and the run is interrupted.
    stopped = _train(tmp_path, f"{name}-stopped", env={"GRPOCTL_FAULT": "step-start@1:INT"}, **recipe)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    resumed = invoke("train", "--resume", f"{name}-stopped", f"--db={tmp_path / 'registry.db'}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    db = tmp_path / "registry.db"
    assert_same_rows(rows(db, f"{name}-stopped"), rows(db, name))

    ours, base = _step_metrics(db, name, 1), _step_metrics(db, "builtin", 1)
    assert ours[metrics.REWARD] == base[metrics.REWARD]  # the same rollouts
    if name == "rloo":  # G/(G-1) x the group-mean advantage
        scale = GROUP / (GROUP - 1)
    else:  # the group-mean advantage / the rollout batch's std (train/reward_std, + advantage_eps)
        scale = 1 / (base[metrics.REWARD_STD] + 1e-6)
        assert metrics.CLIP_FRACTION in ours  # cispo's capped share
    assert ours[metrics.GRAD_NORM] == pytest.approx(scale * base[metrics.GRAD_NORM], rel=1e-4)


def test_a_plugin_equal_to_the_clipped_loss_records_the_built_ins_rows(builtin):
    out = _train(builtin, "plugin", **{"loss.loss_type": CLIPPED})
    assert out.returncode == 0, out.stderr[-3000:]
    db = builtin / "registry.db"
    got, want = rows(db, "plugin"), rows(db, "builtin")
    assert got["metrics"] == want["metrics"]  # exactly: the same floats, every row
    assert got["evals"] == want["evals"] and want["evals"]
    assert got["samples"] == want["samples"]


RAISES_AT_STEP_2 = """
calls = 0

def loss(inputs):
    global calls
    calls += 1  # one microbatch per lab step: the second call is step 2's
    if calls == 2:
        raise ArithmeticError("step two is too much")
    return -inputs.advantages * inputs.policy_log_probs
"""


def test_a_raising_plugin_stops_the_run_in_one_line_with_nothing_of_its_step(tmp_path):
    (tmp_path / "flaky.py").write_text(RAISES_AT_STEP_2)
    out = _train(tmp_path, "flaky", **{"loss.loss_type": "flaky.py:loss"})
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == "error: loss plugin flaky.py:loss raised ArithmeticError: step two is too much", out.stderr
    with sqlite3.connect(tmp_path / "registry.db") as conn:
        status, error = conn.execute("SELECT status, error FROM run WHERE name = 'flaky'").fetchone()
        steps = sorted({s for (s,) in conn.execute("SELECT DISTINCT step FROM metric")})
        samples = sorted({s for (s,) in conn.execute("SELECT DISTINCT step FROM sample")})
    assert status == "failed" and "step two is too much" in error
    assert max(steps) == 1 and max(samples) <= 1  # step 1 recorded, nothing of step 2
