"""Loss and advantage plugins: what `loss.loss_type` and `loss.advantage_estimator` name,
resolved to the function the train step calls.

Each key names a built-in (LOSS_FUNCTIONS, ADVANTAGE_FUNCTIONS) or a plugin, as reward
plugins are named (reward_specs.py): `package.module:function` or
`path/to/file.py:function`. A plugin is called exactly as the built-ins are:

    loss(inputs: LossInputs) -> per-token loss (batch, seq), or (that, {name: (batch, seq) tensor})
    estimator(inputs: AdvantageInputs) -> advantages (rollout_batch_size,)

in the trainer's own process (a loss needs the autograd graph). What it returns is
checked at every call; a plugin that raises, returns another shape, a loss without a
gradient, or a non-finite value stops the run with one line naming it (PluginFailed,
exit 1), before the step records anything. docs/loss-plugins.md is the user's page.
"""

from __future__ import annotations

from typing import Any

import torch

from grpoctl.errors import PluginFailed
from grpoctl.reward_specs import is_plugin, load_function, one_line

from .advantages import AdvantageFunction, AdvantageInputs, builtin_advantages
from .losses import LossFunction, LossInputs, builtin_loss


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


class PluginLoss:
    """A loss plugin, called as a built-in loss is, with its output checked."""

    def __init__(self, spec: str):
        self.spec = spec
        self.fn = load_function(spec)

    def _fail(self, what: str) -> PluginFailed:
        return PluginFailed(f"loss plugin {self.spec} {what}")

    def __call__(self, inputs: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        try:
            out = self.fn(inputs)
        except Exception as exc:  # noqa: BLE001 - whatever it raised, the run stops in one line
            raise self._fail(f"raised {one_line(exc)}") from None
        loss, metadata = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        shape = tuple(inputs.policy_log_probs.shape)
        if not isinstance(loss, torch.Tensor) or tuple(loss.shape) != shape or not loss.is_floating_point():
            raise self._fail(f"returned {_shape(loss)}, not a float per-token loss of shape {shape} (batch, seq)")
        if not loss.requires_grad:
            raise self._fail("returned a loss without a gradient to the policy's log-probs")
        if not bool(torch.isfinite(loss.detach()[inputs.response_mask]).all()):
            raise self._fail("returned a non-finite loss")
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) and tuple(v.shape) == shape for k, v in metadata.items()
        ):
            raise self._fail(f"returned metadata that is not a dict of {shape} tensors")
        return loss, metadata


class PluginAdvantages:
    """An advantage plugin, called as a built-in estimator is, with its output checked."""

    def __init__(self, spec: str):
        self.spec = spec
        self.fn = load_function(spec)

    def __call__(self, inputs: AdvantageInputs) -> torch.Tensor:
        try:
            advantages = self.fn(inputs)
        except Exception as exc:  # noqa: BLE001 - whatever it raised, the run stops in one line
            raise PluginFailed(f"advantage plugin {self.spec} raised {one_line(exc)}") from None
        shape = tuple(inputs.rewards.shape)
        if not isinstance(advantages, torch.Tensor) or tuple(advantages.shape) != shape:
            raise PluginFailed(
                f"advantage plugin {self.spec} returned {_shape(advantages)}, not advantages of shape {shape}"
            )
        if not bool(torch.isfinite(advantages).all()):
            raise PluginFailed(f"advantage plugin {self.spec} returned a non-finite advantage")
        return advantages.detach().float()


def loss_function(loss_type: str) -> LossFunction:
    """loss.loss_type as the function the train step calls: a built-in or a plugin."""
    return PluginLoss(loss_type) if is_plugin(loss_type) else builtin_loss(loss_type)


def advantage_function(estimator: str) -> AdvantageFunction:
    """loss.advantage_estimator as the function scoring calls: a built-in or a plugin."""
    return PluginAdvantages(estimator) if is_plugin(estimator) else builtin_advantages(estimator)
