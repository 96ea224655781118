"""Run identity: what `config_hash` covers, pinned, and kept stable when keys are added."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpoctl import rules
from grpoctl.config import load_config, to_dict
from grpoctl.rules import config_hash, flatten

ROOT = Path(__file__).resolve().parents[1]

# The keys hashed when this definition was fixed (migration 0002). A key added to the
# config later must be declared key(..., neutral=True) in config_schema/ (or be excluded), so that this
# set, and every stored hash with it, stays what it is.
HASHED_KEYS = {
    "data.answer_field",
    "data.eval_path",
    "data.eval_split",
    "data.question_field",
    "data.source",
    "data.synthetic.max_digits",
    "data.synthetic.min_digits",
    "data.synthetic.num_operands",
    "data.synthetic.ops",
    "data.train_path",
    "data.train_size",
    "data.train_split",
    "eval.at_start",
    "eval.every",
    "eval.greedy",
    "eval.max_tokens",
    "eval.subset",
    "eval.subset_seed",
    "eval.temperature",
    "eval.top_p",
    "loop.epochs_per_rollout_batch",
    "loop.gradient_accumulation_steps",
    "loop.n_grpo_steps",
    "loop.train_batch_size",
    "loss.advantage_eps",
    "loss.cliprange",
    "loss.cliprange_high",
    "loss.importance_level",
    "loss.kl_beta",
    "loss.length_normalization",
    "loss.loss_type",
    "loss.use_std_normalization",
    "model.dtype",
    "model.gradient_checkpointing",
    "model.path",
    "model.tiny.hidden_size",
    "model.tiny.intermediate_size",
    "model.tiny.num_attention_heads",
    "model.tiny.num_hidden_layers",
    "model.tiny.num_key_value_heads",
    "model.warmstart.batch_size",
    "model.warmstart.check_every",
    "model.warmstart.lr",
    "model.warmstart.save_steps",
    "model.warmstart.steps",
    "model.warmstart.target_accuracy",
    "optimizer.betas",
    "optimizer.lr",
    "optimizer.lr_schedule",
    "optimizer.max_grad_norm",
    "optimizer.min_lr_ratio",
    "optimizer.name",
    "optimizer.warmup_steps",
    "optimizer.weight_decay",
    "prompt.reward",
    "prompt.template",
    "rollout.backend",
    "rollout.generation_batch_size",
    "rollout.group_size",
    "rollout.max_tokens",
    "rollout.min_tokens",
    "rollout.rollout_batch_size",
    "rollout.stop",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.vllm.cpu_kvcache_space_gb",
    "rollout.vllm.enable_prefix_caching",
    "rollout.vllm.gpu_memory_utilization",
    "rollout.vllm.max_model_len",
    "rollout.vllm.sleep_level",
    "rollout.vllm.sleep_mode",
    "runtime.device",
    "seed",
}


def test_the_hash_of_the_addition_task_is_pinned():
    assert config_hash(load_config(ROOT / "experiments" / "tiny.yaml", [])) == "272e3b4b1f1c5f38"
    assert config_hash(load_config("addition", [])) == "272e3b4b1f1c5f38"  # tiny.yaml is the defaults
    assert config_hash(load_config(None, [])) == "272e3b4b1f1c5f38"


def test_the_hash_of_the_lab_is_pinned():
    # `grpoctl train`'s default since the lab landed; the lab studies' lr=1e-4 seed-0 run
    # (docs/results/lab.db) has this hash, so the built-in and experiments/lab.yaml agree.
    assert config_hash(load_config("lab", [])) == "b931743862afb61a"
    assert config_hash(load_config(ROOT / "experiments" / "lab.yaml", [])) == "b931743862afb61a"


def test_every_config_key_is_hashed_excluded_or_neutral():
    keys = set(flatten(to_dict(load_config(None, []))))
    excluded = {
        k
        for k in keys
        if k in rules.HASH_EXCLUDED or k.startswith(tuple(e for e in rules.HASH_EXCLUDED if e.endswith(".")))
    }
    added_later = set(rules.NEUTRAL_DEFAULTS)
    assert keys - excluded - added_later == HASHED_KEYS, (
        "a config key was added or removed: declare a new key key(..., neutral=True) with the default that "
        "keeps today's behaviour, or a changed definition needs a migration that rewrites stored hashes"
    )


@pytest.mark.parametrize(
    "override",
    [
        "name=other",
        "group=g",
        "variant=v",
        "checkpoint.dir=/elsewhere",
        "checkpoint.every=7",
        "checkpoint.keep_last=3",
        "runtime.threads=4",
        "runtime.cache_dir=/cache",
        "logging.live=false",
        "logging.samples_per_step=0",
        "eval.batch_size=16",
    ],
)
def test_keys_that_do_not_change_the_computation_do_not_change_the_hash(override):
    assert config_hash(load_config(None, [override])) == "272e3b4b1f1c5f38"


@pytest.mark.parametrize(
    "override",
    [
        "lr=1e-4",
        "seed=1",
        "eval.subset=64",
        "rollout.max_tokens=64",
        "runtime.device=cpu",
        "loss=grpo_no_clip",
        "data.train_size=100",
    ],
)
def test_keys_that_change_the_computation_change_the_hash(override):
    assert config_hash(load_config(None, [override])) != "272e3b4b1f1c5f38"


def test_a_key_added_later_changes_no_hash_at_its_neutral_default(monkeypatch):
    old = to_dict(load_config(None, []))  # a run stored before the key existed
    new = to_dict(load_config(None, []))
    new["loss"]["clip_ratio_c"] = None  # the key, as a later grpoctl would resolve it
    monkeypatch.setitem(rules.NEUTRAL_DEFAULTS, "loss.clip_ratio_c", None)
    assert config_hash(new) == config_hash(old) == "272e3b4b1f1c5f38"
    new["loss"]["clip_ratio_c"] = 3.0  # used: now it is part of what the run computes
    assert config_hash(new) != config_hash(old)


def _migration_0002():
    path = ROOT / "grpoctl" / "registry" / "migrations" / "versions" / "0002_run_identity.py"
    spec = importlib.util.spec_from_file_location("migration_0002", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("config", ["tiny.yaml", "rtx4090.yaml", "h100.yaml", "tiny-off-policy.yaml"])
def test_the_migration_rewrites_hashes_to_what_the_code_computes(config):
    # Its frozen copy of the hash must agree with config_hash for every stored config.
    path = ROOT / "experiments" / config
    if "base:" in path.read_text() or "variants:" in path.read_text():
        cfg = load_config(None, ["lr=2e-5", "checkpoint.dir=/x", "runtime.threads=3"])
    else:
        cfg = load_config(path, ["checkpoint.dir=/x", "runtime.threads=3"])
    # A config stored before the keys added since (NEUTRAL_DEFAULTS) existed lacks them.
    stored = to_dict(cfg)
    for key, neutral in rules.NEUTRAL_DEFAULTS.items():
        section, _, name = key.rpartition(".")
        node = stored
        for part in section.split(".") if section else []:
            node = node[part]
        if node.get(name) == neutral:
            del node[name]
    assert _migration_0002().config_hash_v2(stored) == config_hash(cfg)
