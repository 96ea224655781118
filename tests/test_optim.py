"""build_optimizer: AdamW from the config, and bitsandbytes' 8-bit AdamW where it runs."""

import functools
import sys

import pytest
import torch

from grpoctl.config import load_config
from grpoctl.errors import UserError
from grpoctl.train.optim import build_optimizer


@functools.cache
def _bnb_reason() -> str | None:
    """Why 8-bit AdamW cannot run here, or None when it can."""
    try:
        import bitsandbytes as bnb
    except Exception as exc:
        return f"bitsandbytes does not import: {type(exc).__name__}"
    try:
        p = torch.nn.Parameter(torch.zeros(4096))
        p.grad = torch.ones_like(p)
        bnb.optim.AdamW8bit([p]).step()
    except Exception as exc:
        return f"bitsandbytes {bnb.__version__} has no 8-bit AdamW for cpu: {str(exc).splitlines()[0]}"
    return None


def test_adamw_from_config():
    cfg = load_config(overrides=["lr=2e-5", "optimizer.betas=[0.8,0.9]", "optimizer.weight_decay=0.1"])
    opt = build_optimizer(torch.nn.Linear(4, 4).parameters(), cfg.optimizer)
    assert isinstance(opt, torch.optim.AdamW)
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (2e-5, (0.8, 0.9), 0.1)


def test_frozen_parameters_are_left_out():
    model = torch.nn.Linear(4, 4)
    model.bias.requires_grad_(False)
    opt = build_optimizer(model.parameters(), load_config().optimizer)
    assert [p for g in opt.param_groups for p in g["params"]] == [model.weight]


def test_adamw8bit_without_bitsandbytes_is_a_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # makes `import bitsandbytes` fail
    cfg = load_config(overrides=["optimizer.name=adamw8bit"])
    with pytest.raises(UserError, match="needs bitsandbytes"):
        build_optimizer(torch.nn.Linear(4, 4).parameters(), cfg.optimizer)


@pytest.mark.skipif(_bnb_reason() is not None, reason=str(_bnb_reason()))
def test_adamw8bit_tracks_adamw_with_byte_states():
    """A few steps on a small regression: 8-bit states, nearly the same trajectory."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 128), torch.randn(64, 64)
    finals, opts = [], []
    for name in ("adamw", "adamw8bit"):
        torch.manual_seed(1)
        model = torch.nn.Linear(128, 64)  # 8192 weights: over bitsandbytes' 4096 minimum for 8-bit states
        opt = build_optimizer(
            model.parameters(), load_config(overrides=[f"optimizer.name={name}", "lr=1e-2"]).optimizer
        )
        for _ in range(20):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        finals.append(torch.nn.functional.mse_loss(model(x), y).item())
        opts.append((opt, model))
    opt8, model8 = opts[1]
    assert type(opt8).__name__ == "AdamW8bit"
    state = opt8.state[model8.weight]
    assert state["state1"].dtype == state["state2"].dtype == torch.uint8
    assert abs(finals[0] - finals[1]) < 0.05 * finals[0]
