"""Issue 37's lab variants (docs/lab-pilots/README.md): their names and keys, their builds on
a small stand-in (2 SFT steps from the shipped base, never a real build), a 2-step GRPO run on
each, and the metrics they are read by (groups by success count, sampled accuracy per level).

The generators themselves are tested with the lab task (tests/test_lab_task.py).
"""

from __future__ import annotations

import json

import pytest
import torch
from cli import invoke
from conftest import REPO, lab_overrides

import grpoctl.cli.train  # noqa: F401  the trainer's imports at collection, as the suite pays them once
from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.data.lab import HARD_LEVELS
from grpoctl.grpo import success_count_shares
from grpoctl.run_identity import config_hash, hashed_items
from grpoctl.tiny import lab_recipe
from grpoctl.tiny.lab_recipe import LAB_BOXED, LAB_DIRECT, LAB_LONG, Phase, lab_names, recipe_key, sft_steps_of
from grpoctl.train.scoring import success_metrics
from grpoctl.warmstart import lab as lw

torch.set_num_threads(1)

VARIANTS = [LAB_LONG, LAB_BOXED, *(f"{LAB_DIRECT}@{n}" for n in lab_recipe.DIRECT_STEPS)]


# --------------------------------------------------------------------------- metrics


def test_groups_are_shared_out_by_how_many_of_them_are_right():
    # groups of 4 with 0, 1, 2, 3 and 4 right answers
    right = torch.tensor([0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1], dtype=torch.bool)
    assert success_count_shares(right, 4) == pytest.approx({"rare": 2 / 5, "near_all": 2 / 5})
    assert success_count_shares(right[:4], 4) == {"rare": 0.0, "near_all": 0.0}
    one_in_32 = torch.zeros(64, dtype=torch.bool)
    one_in_32[5] = one_in_32[40:42] = True  # 1 of 32, then 2 of 32
    assert success_count_shares(one_in_32, 32) == {"rare": 1.0, "near_all": 0.0}


def test_success_metrics_read_the_answer_and_each_level():
    scores = [{"answer_reward": a, "reward": 0.0} for a in (1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0)]
    got = success_metrics(scores, 4, [6, 6, 6, 6, 9, 9, 9, 9])
    assert got == pytest.approx(
        {
            metrics.GROUPS_RARE_SUCCESS: 0.5,
            metrics.GROUPS_NEAR_ALL_RIGHT: 0.5,
            "train/accuracy/L6": 0.25,
            "train/accuracy/L9": 0.75,
        }
    )
    assert metrics.level_accuracy(6) == "train/accuracy/L6" and metrics.TABLE["train/accuracy/L6"].higher_is_better
    assert set(success_metrics(scores, 4, None)) == {metrics.GROUPS_RARE_SUCCESS, metrics.GROUPS_NEAR_ALL_RIGHT}


# --------------------------------------------------------------------------- names and keys


def test_every_variant_is_a_lab_model_with_a_key_of_its_own():
    assert set(VARIANTS) <= set(lab_names())
    keys = {path: recipe_key(path) for path in lab_names()}
    assert len(set(keys.values())) == len(keys)
    assert [sft_steps_of(p) for p in VARIANTS] == [None, None, *lab_recipe.DIRECT_STEPS]
    for bad in ("lab-long@100", "lab-direct@7", "lab-direct", "lab-boxed@1"):
        with pytest.raises(ValueError, match="the lab's models are lab, lab-long, lab-boxed"):
            sft_steps_of(bad)
    # one direct run serves every N, and its key follows its recipe, not the lab's
    assert lab_recipe.build_key(LAB_DIRECT) not in keys.values()


def test_a_variants_key_follows_its_phases_and_leaves_the_labs_alone(monkeypatch):
    before = {path: recipe_key(path) for path in lab_names()}
    monkeypatch.setattr(lab_recipe, "LONG_PHASES", lab_recipe.LONG_PHASES[:1])
    after = {path: recipe_key(path) for path in lab_names()}
    assert [p for p in before if before[p] != after[p]] == [LAB_LONG]
    monkeypatch.undo()
    monkeypatch.setitem(lab_recipe.VARIANT_VERSION, LAB_DIRECT, lab_recipe.VARIANT_VERSION[LAB_DIRECT] + 1)
    after = {path: recipe_key(path) for path in lab_names()}
    assert {p for p in before if before[p] != after[p]} == {p for p in VARIANTS if p.startswith(LAB_DIRECT)}


def test_a_variants_key_enters_a_runs_identity_only_when_it_is_used():
    lab = load_config(REPO / "experiments" / "lab.yaml", [])
    hard = load_config("lab-hard", [])
    assert hashed_items(lab)["model.lab_recipe"] == recipe_key("lab")
    assert hashed_items(hard)["model.lab_recipe"] == recipe_key(LAB_LONG)
    assert hashed_items(hard)["data.source"] == "lab-hard" and hard.rollout.group_size == 32
    for path in VARIANTS:
        assert hashed_items({"model": {"path": path}})["model.lab_recipe"] == recipe_key(path)


# --------------------------------------------------------------------------- stand-in builds and runs


def _two_steps(name: str, mixture: str) -> Phase:
    return Phase(name, mixture, steps=2, lr=1e-4, warmup=1, min_lr_ratio=0.5, batch=4)


@pytest.fixture
def stand_in(monkeypatch):
    """Each variant's recipe shrunk to 2 steps of 4 traces from the shipped base (not a real build)."""
    monkeypatch.setattr(lab_recipe, "LONG_PHASES", (_two_steps("x1", "X1"), _two_steps("x2", "S5Lx")))
    monkeypatch.setattr(lab_recipe, "BOXED_PHASES", (_two_steps("boxed", "boxed"),))
    monkeypatch.setattr(lab_recipe, "DIRECT_STEPS", (1, 2))
    monkeypatch.setattr(lab_recipe, "DIRECT_PHASE", _two_steps("direct", "direct"))


@pytest.mark.parametrize(
    "config, model, levels",
    [("lab-hard", LAB_LONG, HARD_LEVELS), ("lab", LAB_BOXED, None), ("lab", "lab-direct@2", None)],
)
def test_a_variant_builds_from_the_shipped_base_and_trains_two_steps(stand_in, tmp_path, config, model, levels):
    from grpoctl.registry import Registry

    db = tmp_path / "registry.db"
    extra = (
        {"rollout.group_size": 8} if levels is None else {"rollout.group_size": 16, "rollout.rollout_batch_size": 16}
    )
    args = lab_overrides(model, tmp_path, **{"runtime.threads": 1, **extra})
    out = invoke("train", config, *args, f"--db={db}", "name=v", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    family = model.partition("@")[0]
    built = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    key = recipe_key(model) if family == model else lab_recipe.build_key(family)
    assert [p.name for p in built] == [f"{family}-{key}"]  # the shipped base was used, not rebuilt
    meta = json.loads((built[0] / "lab_build.json").read_text())
    assert [p["phase"] for p in meta["phases"]] == (
        [p.name for p in lab_recipe.continued_phases(model)] if family == model else ["direct"]
    )
    with Registry(str(db), must_exist=True, readonly=True) as registry:
        run = registry.get_run("v")
        assert run.status == "finished" and run.last_step == 2
        assert json.loads(run.config)["model"]["path"] == model
        assert run.config_hash == config_hash(json.loads(run.config))
        names = set(registry.metric_names([run.id]))
        evals = registry.evals(run.id)
    assert {metrics.GROUPS_RARE_SUCCESS, metrics.GROUPS_NEAR_ALL_RIGHT} <= names
    per_level = {n for n in names if n.startswith(metrics.LEVEL_ACCURACY_PREFIX)}
    assert per_level and per_level <= {metrics.level_accuracy(lv) for lv in levels or (1, 2, 3, 4, 5)}
    assert {e.data_source for e in evals} == {"lab-hard" if levels else "lab"}


def test_the_shipped_base_is_the_variants_start(stand_in, tmp_path):
    """A variant continues from the base's weights: 2 steps move them only a little."""
    from transformers import AutoModelForCausalLM

    base = lw.resolve_lab_model("lab", tmp_path, log=lambda *_: None)
    boxed = lw.resolve_lab_model(LAB_BOXED, tmp_path, log=lambda *_: None)
    a = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).state_dict()
    b = AutoModelForCausalLM.from_pretrained(boxed, dtype=torch.float32).state_dict()
    moved = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert 0 < moved < 0.01
