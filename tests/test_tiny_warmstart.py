"""The tiny warm-start: the default's ships with the package and is what its recipe says; others are built.

- The default config (any seed) resolves to the shipped directory without building
  anything, and so do `tiny@100` and `tiny@200`.
- The shipped final checkpoint is the recipe's result: warmstart.json records the default
  spec, and the weights reach exactly the greedy probe accuracy recorded there.
- A config whose recipe differs builds its own warm-start into the cache (a short one here).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict

import pytest
import torch

from grpoctl.config import load_config
from grpoctl.data import synthetic_examples
from grpoctl.train.setup import load_policy
from grpoctl.warmstart import tiny as ws

torch.set_num_threads(1)


def test_default_resolves_to_the_shipped_warm_start_for_every_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(ws, "_build", lambda *a, **k: (_ for _ in ()).throw(AssertionError("built instead of shipped")))
    for seed in (0, 1, 2):
        cfg = load_config(None, [f"seed={seed}", f"runtime.cache_dir={tmp_path}"])
        assert ws.resolve_tiny_model(cfg).parent.parent == ws.SHIPPED
        for at in ("100", "200"):
            path = ws.resolve_tiny_model(load_config(None, [f"model.path=tiny@{at}", f"runtime.cache_dir={tmp_path}"]))
            assert path.name == f"step-{at}" and (path / "model.safetensors").is_file()
    assert not any(tmp_path.iterdir())  # nothing cached, nothing built


def test_shipped_weights_are_the_recipes_result(tmp_path):
    cfg = load_config(None, [f"runtime.cache_dir={tmp_path}"])
    spec = ws.WarmStartSpec.from_config(cfg)
    final = ws.resolve_tiny_model(cfg)
    assert final.parent.name == f"tiny-warmstart-{spec.key()}"
    meta = json.loads((final.parent / "warmstart.json").read_text())
    recipe = json.loads(json.dumps(asdict(spec)))
    del recipe["steps"]  # warmstart.json's "steps" is how many it took (at most the recipe's)
    assert {k: meta[k] for k in recipe} == recipe and meta["steps"] <= spec.steps
    # The probe the builder measured, drawn the way _build draws it.
    syn = spec.synthetic
    train = synthetic_examples(
        "train",
        None,
        seed=spec.seed,
        min_digits=syn["min_digits"],
        max_digits=syn["max_digits"],
        ops=tuple(syn["ops"]),
        num_operands=syn["num_operands"],
    )
    probe = random.Random(f"grpoctl-warmstart:{spec.seed}").sample(train, ws.PROBE_SIZE)
    model, tokenizer = load_policy(str(final), torch.device("cpu"), torch.float32, False)
    assert ws.greedy_accuracy(model, tokenizer, probe, spec.template) == meta["probe_accuracy"]


def test_another_recipe_is_built_and_cached(tmp_path):
    overrides = [
        f"runtime.cache_dir={tmp_path}",
        "model.warmstart.steps=12",
        "model.warmstart.check_every=6",
        "model.warmstart.save_steps=[6]",
        "model.warmstart.batch_size=8",
        "model.tiny.intermediate_size=64",
    ]
    said = []
    path = ws.resolve_tiny_model(load_config(None, overrides), log=said.append)
    assert path.parent.parent == tmp_path and (path / "config.json").is_file()
    # Its progress is on screen while it builds: a line per check_every steps.
    progress = [line for line in said if line.startswith("warm-start step ")]
    assert [line.split()[2] for line in progress] == ["6/12:", "12/12:"] and "greedy probe accuracy" in progress[0]
    meta = json.loads((path.parent / "warmstart.json").read_text())
    assert meta["steps"] == 12 and [s for s, _ in meta["probe_curve"]] == [6, 12]
    assert (path.parent / "step-6" / "model.safetensors").is_file()
    again = ws.resolve_tiny_model(load_config(None, overrides + ["seed=5"]), log=lambda *_: None)
    assert again == path  # seeds share one warm-start


def test_rebuilding_a_shipped_model_replaces_old_builds_and_never_leaves_half_of_one(tmp_path, monkeypatch):
    from grpoctl.warmstart import shipping

    monkeypatch.setattr(shipping, "SHIPPED", tmp_path)
    (tmp_path / "base-old").mkdir()
    (tmp_path / "other-keep").mkdir()

    def build(folder):
        folder.mkdir()
        (folder / "weights").write_text("w")

    root = shipping.rebuild_shipped("base", "new", build)
    assert root == tmp_path / "base-new" and (root / "weights").read_text() == "w"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base-new", "other-keep"]

    def broken(folder):
        folder.mkdir()
        raise RuntimeError("stopped half-way")

    with pytest.raises(RuntimeError):
        shipping.rebuild_shipped("base", "newer", broken)
    assert not (tmp_path / "base-newer").exists()
