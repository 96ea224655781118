"""Config: defaults, yaml diffs, dotted overrides, validation, diffs and hashes."""

from __future__ import annotations

import pytest
from conftest import REPO

from grpoctl.config import config_diff, derived_sizes, from_dict, load_config, resolve_key, to_dict
from grpoctl.errors import UserError
from grpoctl.rules import config_hash, flatten


def test_defaults_are_the_embedded_default():
    cfg = load_config()
    assert cfg.model.path == "tiny" and cfg.data.source == "synthetic"
    assert cfg.rollout.rollout_batch_size == 256 and cfg.rollout.group_size == 8
    assert config_diff(cfg) == {}
    assert config_diff(load_config(REPO / "experiments" / "tiny.yaml")) == {}


def test_yaml_then_overrides_merge_in_order(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("optimizer:\n  lr: 1.0e-5\nloss:\n  loss_type: reinforce_with_baseline\n")
    cfg = load_config(path, ["lr=3e-5", "rollout.stop=[</answer>,END]", "eval.greedy=false"])
    assert cfg.optimizer.lr == 3e-5  # the override wins over the file
    assert cfg.loss.loss_type == "reinforce_with_baseline"
    assert list(cfg.rollout.stop) == ["</answer>", "END"]
    assert cfg.eval.greedy is False
    assert config_diff(cfg) == {
        "optimizer": {"lr": 3e-5},
        "loss": {"loss_type": "reinforce_with_baseline"},
        "rollout": {"stop": ["</answer>", "END"]},
        "eval": {"greedy": False},
    }


def test_aliases_resolve_to_dotted_paths():
    assert resolve_key("lr") == "optimizer.lr"
    assert resolve_key("loss") == "loss.loss_type"
    assert resolve_key("group_size") == "rollout.group_size"
    assert resolve_key("loop.train_batch_size") == "loop.train_batch_size"
    with pytest.raises(UserError, match="valid keys at rollout are"):
        resolve_key("rollout.nope")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["nope=1"], "unknown config key 'nope'"),
        (["lr=fast"], "optimizer.lr"),
        (["steps=1.5"], "loop.n_grpo_steps"),
        (["rollout.group_size=3"], "must be divisible by rollout.group_size"),
        (["loop.gradient_accumulation_steps=3"], "must be divisible by loop.gradient_accumulation_steps"),
        (["loop.train_batch_size=96"], "must be divisible by loop.train_batch_size"),
        (["loss=ppo"], "is not one of: no_baseline, reinforce_with_baseline, grpo_clip, grpo_no_clip"),
        (["length_normalization=sum"], "mean, constant, microbatch"),
        (["backend=tpu"], "auto, vllm, hf"),
        (["epochs=2", "loss=reinforce_with_baseline"], "on-policy only"),
        (["template=question_only"], "prompt.reward=question_only"),
        (["data.source=math"], "needs data.train_path"),
        (["rollout.min_tokens=64"], "exceeds rollout.max_tokens"),
        (["rollout.group_size=1", "rollout.rollout_batch_size=8"], "at least 2"),
        (["top_p=0"], None),
    ],
)
def test_invalid_configs_are_refused_in_one_line(overrides, message):
    with pytest.raises(UserError) as info:
        load_config(None, overrides)
    text = str(info.value)
    assert "\n" not in text
    if message:
        assert message in text


def test_bad_yaml_files(tmp_path):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("loss:\n  bogus: 1\n")
    with pytest.raises(UserError, match="unknown config key 'loss.bogus': valid keys at loss are"):
        load_config(unknown)
    broken = tmp_path / "broken.yaml"
    broken.write_text("loss: [unclosed\n")
    with pytest.raises(UserError, match="invalid yaml"):
        load_config(broken)
    with pytest.raises(UserError, match="no config file"):
        load_config(tmp_path / "missing.yaml")


def test_hash_ignores_identity_and_round_trips():
    a = load_config(None, ["name=a", "group=g", "lr=1e-5"])
    b = load_config(None, ["name=b", "lr=1e-5"])
    c = load_config(None, ["lr=3e-5"])
    assert config_hash(a) == config_hash(b) != config_hash(c)
    assert config_hash(from_dict(to_dict(a))) == config_hash(a)
    assert flatten({"a": {"b": 1, "c": {"d": 2}}}) == {"a.b": 1, "a.c.d": 2}


def test_derived_sizes_follow_the_seed_naming():
    # e4_tb64_ga16: 4 epochs, train batch 64, 16 accumulation steps, 256 rollouts
    cfg = load_config(None, ["epochs=4", "train_batch_size=64", "gradient_accumulation_steps=16"])
    sizes = derived_sizes(cfg)
    assert sizes.optimizer_steps_per_grpo_step == 16
    assert sizes.microbatch_size == 4
    assert sizes.prompts_per_rollout_batch == 32
    assert sizes.off_policy
    assert not derived_sizes(load_config()).off_policy
