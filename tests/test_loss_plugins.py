"""The loss and advantage tables and their plugin hook (issue 40): one vocabulary for the
built-ins, the worked example plugins (examples/losses/clipped.py), the checks on what a
plugin returns, and what a plugin does to a run's identity. The runs are
tests/test_recipe_runs.py."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import REPO

from grpoctl.config import load_config
from grpoctl.config_checks import validate
from grpoctl.errors import PluginFailed, UserError
from grpoctl.grpo import ADVANTAGE_FUNCTIONS, LOSS_FUNCTIONS, AdvantageInputs, LossInputs, PolicyGradientLoss
from grpoctl.grpo.plugins import PluginAdvantages, PluginLoss, advantage_function
from grpoctl.rules import ADVANTAGE_ESTIMATORS, LOSS_TYPES, config_hash
from grpoctl.run_identity import identity_items

EXAMPLE = REPO / "examples" / "losses" / "clipped.py"


def test_the_tables_hold_exactly_the_declared_names():
    """The names live with the config key (config_keys.py, the lowest floor); the functions in
    the engine. Neither may have a name the other lacks, in the same order."""
    assert tuple(LOSS_FUNCTIONS) == LOSS_TYPES
    assert tuple(ADVANTAGE_FUNCTIONS) == ADVANTAGE_ESTIMATORS


def _microbatch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    log_probs = (-torch.rand(6, 5, generator=g) * 2).requires_grad_()
    old = log_probs.detach() + torch.randn(6, 5, generator=g) * 0.8  # off-policy: ratios far from 1
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[2, 3:] = False
    return log_probs, old, mask, torch.randn(6, 1, generator=g)


@pytest.mark.parametrize(
    "settings",
    [{}, {"cliprange_high": 0.28}, {"importance_level": "sequence"}, {"length_normalization": "token"}],
)
def test_the_example_clipped_plugin_is_the_built_in_clipped_loss_bit_for_bit(settings):
    """What the run-level test (identical rows) rests on: same loss, gradient and logged figures."""
    normalization = settings.pop("length_normalization", "mean")
    results = []
    for loss_type in ("grpo_clip", f"{EXAMPLE}:clipped"):
        log_probs, old, mask, adv = _microbatch()
        loss = PolicyGradientLoss(loss_type, normalization, cliprange=0.2, **settings)
        _, stats = loss.microbatch_train_step(
            log_probs, mask, 2, advantages=adv, old_log_probs=old, batch_response_tokens=float(mask.sum())
        )
        results.append((log_probs.grad, stats))
    (builtin_grad, builtin_stats), (plugin_grad, plugin_stats) = results
    assert torch.equal(plugin_grad, builtin_grad)
    assert plugin_stats == builtin_stats
    assert 0 < builtin_stats["clip_fraction"] < 1  # the clip acted


def test_the_example_group_median_estimator_worked_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5])
    estimate = advantage_function(f"{EXAMPLE}:group_median")
    # medians: 0 and (lower middle of 0, 0.5, 1, 1) 0.5
    assert estimate(AdvantageInputs(rewards, 4)).tolist() == [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, -0.5, 0.0]


def test_cispo_caps_the_weight_and_never_zeroes_a_tokens_gradient():
    """-sg(clip(ratio, min, max)) * A * log p: the gradient wrt log p is -w * A at every
    token (a mean over each sequence's 2 tokens, over 2 sequences: / 4), however far the ratio."""
    log_probs = torch.tensor([[0.0, -3.0], [-1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-3.0, 0.0], [-1.0, -1.2]])  # ratios e^3, e^-3; 1, e^0.2
    adv = torch.tensor([[1.0], [-2.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss = PolicyGradientLoss("cispo", cispo_ratio_max=5.0, cispo_ratio_min=0.5)
    _, stats = loss.microbatch_train_step(log_probs, mask, 1, advantages=adv, old_log_probs=old)
    weights = torch.tensor([[5.0, 0.5], [1.0, math.exp(0.2)]])
    torch.testing.assert_close(log_probs.grad, -weights * adv / 4)
    assert stats["clip_fraction"] == 0.5  # e^3 capped at 5, e^-3 raised to 0.5


# --------------------------------------------------------------------------- what a plugin may return


PLUGINS = """
import torch

def raises(inputs):
    raise RuntimeError("out of ideas")

def per_sequence(inputs):
    return -inputs.advantages * inputs.policy_log_probs.sum(-1, keepdim=True)

def detached(inputs):
    return -inputs.advantages * inputs.policy_log_probs.detach()

def infinite(inputs):
    return -inputs.advantages * inputs.policy_log_probs / 0.0

def bad_metadata(inputs):
    return -inputs.advantages * inputs.policy_log_probs, {"ratio": 1.0}

def reinforce(inputs):
    return -inputs.advantages * inputs.policy_log_probs

def advantages_per_group(inputs):
    return inputs.rewards.reshape(-1, inputs.group_size).mean(-1)

def nan_advantages(inputs):
    return inputs.rewards / 0.0 * 0.0
"""


@pytest.fixture
def plugins(tmp_path):
    path = tmp_path / "plugins.py"
    path.write_text(PLUGINS)
    return path


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("raises", "raised RuntimeError: out of ideas"),
        ("per_sequence", "returned a tensor of shape (6, 1), not a float per-token loss of shape (6, 5) (batch, seq)"),
        ("detached", "returned a loss without a gradient to the policy's log-probs"),
        ("infinite", "returned a non-finite loss"),
        ("bad_metadata", "returned metadata that is not a dict of (6, 5) tensors"),
    ],
)
def test_a_loss_plugin_that_misbehaves_stops_with_one_line_naming_it(plugins, name, message):
    log_probs, old, mask, adv = _microbatch()
    loss = PolicyGradientLoss(f"{plugins}:{name}")
    with pytest.raises(PluginFailed) as failed:
        loss.microbatch_train_step(log_probs, mask, 1, advantages=adv, old_log_probs=old)
    assert str(failed.value) == f"loss plugin {plugins}:{name} {message}"
    assert failed.value.exit_code == 1
    assert log_probs.grad is None  # nothing was backpropagated


def test_a_plugin_returning_the_loss_alone_is_reinforce_with_baseline(plugins):
    grads = []
    for loss_type in ("reinforce_with_baseline", f"{plugins}:reinforce"):
        log_probs, old, mask, adv = _microbatch()
        PolicyGradientLoss(loss_type).microbatch_train_step(log_probs, mask, 1, advantages=adv, old_log_probs=old)
        grads.append(log_probs.grad)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("raises", "raised RuntimeError: out of ideas"),
        ("advantages_per_group", "returned a tensor of shape (2,), not advantages of shape (8,)"),
        ("nan_advantages", "returned a non-finite advantage"),
    ],
)
def test_an_advantage_plugin_that_misbehaves_stops_with_one_line_naming_it(plugins, name, message):
    with pytest.raises(PluginFailed) as failed:
        PluginAdvantages(f"{plugins}:{name}")(AdvantageInputs(torch.rand(8), 4))
    assert str(failed.value) == f"advantage plugin {plugins}:{name} {message}"


def test_the_contract_is_the_built_ins_own():
    """A built-in is called with the same one argument a plugin gets."""
    log_probs, old, mask, adv = _microbatch()
    inputs = LossInputs(log_probs, mask, advantages=adv, old_log_probs=old, cliprange=0.2)
    builtin, _ = LOSS_FUNCTIONS["grpo_clip"](inputs)
    plugin, _ = PluginLoss(f"{EXAMPLE}:clipped")(inputs)
    assert torch.equal(builtin, plugin)


# --------------------------------------------------------------------------- config and identity


def test_a_plugin_is_checked_before_anything_runs(plugins):
    for key in ("loss.loss_type", "loss.advantage_estimator"):
        with pytest.raises(UserError, match=f"{key}={plugins}:nope: .* has no function 'nope'"):
            validate(load_config(None, [f"{key}={plugins}:nope"]))
        with pytest.raises(UserError, match=r"is not one of: .* \(or a plugin"):
            validate(load_config(None, [f"{key}=nope"]))
    validate(load_config(None, [f"loss.loss_type={plugins}:reinforce"]))
    with pytest.raises(UserError, match="batch_std divides by the rollout batch's std"):
        validate(load_config(None, ["loss.advantage_estimator=batch_std", "loss.use_std_normalization=false"]))
    with pytest.raises(UserError, match="cispo_ratio_min .* must be below"):
        validate(load_config(None, ["loss.loss_type=cispo", "loss.cispo_ratio_min=6"]))


def test_a_plugins_source_is_part_of_the_identity_only_when_one_is_set(plugins):
    builtin = load_config(None, [])
    assert "loss.plugin_sha256" not in identity_items(builtin)
    for key in ("loss.loss_type", "loss.advantage_estimator"):
        name = "reinforce" if key == "loss.loss_type" else "advantages_per_group"
        cfg = load_config(None, [f"{key}={plugins}:{name}"])
        assert list(identity_items(cfg)["loss.plugin_sha256"]) == [f"{plugins}:{name}"]
        before = config_hash(cfg)
        plugins.write_text(PLUGINS + "\n# edited\n")
        assert config_hash(cfg) != before  # an edited plugin is another run
        plugins.write_text(PLUGINS)
        assert config_hash(cfg) == before


def test_a_sweep_makes_a_loss_or_advantage_plugin_path_absolute(plugins, monkeypatch):
    from grpoctl.sweep.spec import absolute_paths

    monkeypatch.chdir(plugins.parent)
    cfg = load_config(None, ["loss.loss_type=plugins.py:reinforce", "loss.advantage_estimator=rloo"])
    absolute_paths(cfg)
    assert cfg.loss.loss_type == f"{plugins}:reinforce"
    assert cfg.loss.advantage_estimator == "rloo"  # a built-in's name stays a name
