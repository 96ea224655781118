"""Learning-rate schedule: warm-up, then constant or cosine decay to a floor."""

import math

import pytest
import torch

from grpoctl.config import load_config
from grpoctl.train.schedule import build_scheduler, lr_multiplier


def test_warmup_is_linear_then_constant():
    assert [lr_multiplier(i, 4, 100, "constant", 0.1) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_multiplier(0, 0, 100, "constant", 0.1) == 1.0


def test_cosine_decays_from_peak_to_the_floor():
    values = [lr_multiplier(i, 10, 110, "cosine", 0.1) for i in range(110)]
    assert values[9] == 1.0 and values[10] == 1.0
    assert values[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert values[-1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 99 / 100)))
    assert all(a >= b for a, b in zip(values[10:], values[11:], strict=False))  # never rises after warm-up


def test_scheduler_steps_the_optimizer_lr():
    cfg = load_config(None, ["optimizer.warmup_steps=2", "optimizer.lr=1e-3"])
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=cfg.optimizer.lr)
    sched = build_scheduler(opt, cfg.optimizer, total_steps=10)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen[0] == pytest.approx(5e-4) and seen[1] == pytest.approx(1e-3)
    assert seen[-1] == pytest.approx(1e-3 * lr_multiplier(9, 2, 10, "cosine", 0.1))


def test_warmup_in_grpo_steps_holds_the_lr_for_every_update_of_a_step():
    # 4 updates per GRPO step, 2 GRPO steps of warm-up, 5 GRPO steps in all.
    cfg = load_config(None, ["optimizer.warmup_steps=2", "optimizer.lr=1e-3", "optimizer.warmup_unit=grpo_step"])
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=cfg.optimizer.lr)
    sched = build_scheduler(opt, cfg.optimizer, total_steps=20, updates_per_grpo_step=4)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    by_grpo_step = [seen[i : i + 4] for i in range(0, 20, 4)]
    assert all(len(set(updates)) == 1 for updates in by_grpo_step)  # one lr per GRPO step
    assert [u[0] for u in by_grpo_step] == pytest.approx(
        [1e-3 * lr_multiplier(g, 2, 5, "cosine", 0.1) for g in range(5)]
    )
    assert by_grpo_step[0][0] == pytest.approx(5e-4) and by_grpo_step[1][0] == pytest.approx(1e-3)


def test_the_default_unit_is_the_optimizer_step_and_leaves_the_hash_alone():
    from grpoctl.rules import config_hash

    default = load_config(None, [])
    assert default.optimizer.warmup_unit == "optimizer_step"
    assert config_hash(default) == config_hash(load_config(None, ["optimizer.warmup_unit=optimizer_step"]))
    assert config_hash(default) != config_hash(load_config(None, ["optimizer.warmup_unit=grpo_step"]))
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    # optimizer_step: warm-up counts updates, whatever a GRPO step holds
    sched = build_scheduler(opt, load_config(None, ["optimizer.warmup_steps=2"]).optimizer, 20, 4)
    assert sched.lr_lambdas[0](1) == pytest.approx(1.0) and sched.lr_lambdas[0](0) == pytest.approx(0.5)
