"""The GRPO step, pinned: per-step metrics and sampled completions of two short runs,
recorded from the code as it was before the step was refactored and made faster.

Refactoring the step and speeding it up must not change what it computes. Each case is
a real `grpoctl train` (seed 0, one thread; a child of the tests' fork server,
tests/trainer_zygote.py, which shares only the imports) on a tiny random model with a reward it can
earn (tests/digit_reward_train.py), so every step has real gradients: one on-policy run
and one off-policy run (2 epochs, 4 optimizer steps per GRPO step). The test compares
every recorded train/* and eval/* figure and the stored completions with
tests/golden/*.json.

The model's weights are drawn here from torch's generator in a fixed order, not by
transformers' initialisers, so a transformers upgrade cannot move the golden numbers.

To re-record (only when a change is *meant* to alter the step, and say so in the commit):

    GRPOCTL_WRITE_GOLDEN=1 python -m pytest tests/test_golden_step.py
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
import trainer_zygote
from conftest import REPO, fast_overrides

GOLDEN = REPO / "tests" / "golden"
DIGIT_TRAIN = [sys.executable, str(REPO / "tests" / "digit_reward_train.py")]
WRITE = os.environ.get("GRPOCTL_WRITE_GOLDEN") == "1"

CASES = {
    "on_policy": {"loop.n_grpo_steps": 4, "eval.every": 2, "checkpoint.every": 0},
    "off_policy": {
        "loop.n_grpo_steps": 3,
        "eval.every": 3,
        "checkpoint.every": 0,
        "loop.epochs_per_rollout_batch": 2,
        "loop.train_batch_size": 8,
        "loop.gradient_accumulation_steps": 2,
    },
}


def golden_model_dir(path: Path) -> Path:
    """The tiny Qwen2 directory with weights drawn by torch's own generator, name by name."""
    import torch

    from grpoctl.tiny.model import create_tiny_model_dir

    model_dir = create_tiny_model_dir(path, seed=0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1234)
    state = {}
    for name, tensor in sorted(model.state_dict().items()):
        if name == "lm_head.weight":  # tied to the embedding
            continue
        if name.endswith("norm.weight"):
            state[name] = torch.ones_like(tensor)
        elif name.endswith(".bias"):
            state[name] = torch.zeros_like(tensor)
        else:
            state[name] = torch.randn(tensor.shape, generator=generator) * 0.05
    model.load_state_dict(state, strict=False)
    model.save_pretrained(model_dir, safe_serialization=True)
    return model_dir


def recorded(db: Path, name: str) -> dict:
    """{"metrics": {"step/opt_step/name": value}, "samples": [[step, kind, response], ...]}."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT m.step, m.opt_step, m.name, m.value FROM metric m JOIN run r ON r.id = m.run_id "
            "WHERE r.name = ? ORDER BY m.step, m.opt_step, m.name",
            (name,),
        ).fetchall()
        samples = conn.execute(
            "SELECT s.step, s.kind, s.response FROM sample s JOIN run r ON r.id = s.run_id "
            "WHERE r.name = ? ORDER BY s.step, s.kind, s.id",
            (name,),
        ).fetchall()
    metrics = {
        f"{step}/{'-' if opt is None else opt}/{metric}": value
        for step, opt, metric, value in rows
        if metric.startswith(("train/", "eval/")) and metric != "train/grading_timeouts"
    }
    return {"metrics": metrics, "samples": [list(s) for s in samples]}


@pytest.fixture(scope="module")
def golden_model(tmp_path_factory) -> Path:
    return golden_model_dir(tmp_path_factory.mktemp("golden-model") / "model")


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_matches_the_recorded_golden_run(golden_model, tmp_path, case):
    overrides = fast_overrides(golden_model, tmp_path, **CASES[case])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = trainer_zygote.run(
        DIGIT_TRAIN + ["train", "addition", *overrides, f"name={case}"], tmp_path, env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = recorded(tmp_path / "registry.db", case)
    path = GOLDEN / f"{case}.json"
    if WRITE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {path}")
    want = json.loads(path.read_text())
    assert got["samples"] == want["samples"], "the sampled completions changed"
    missing = sorted(set(want["metrics"]) - set(got["metrics"]))
    assert not missing, f"no longer recorded: {missing[:10]}"
    for key, value in want["metrics"].items():
        if value is None:  # NaN is stored as NULL
            assert got["metrics"][key] is None, key
        else:
            assert got["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
