"""model.dtype's precisions, on CPU: pure bf16 rounds a small AdamW step away, bf16-mixed
(fp32 weights and AdamW states, forward under bf16 autocast) keeps it.

One Adam step moves a weight by about lr. Next to a weight of N(0, 0.02), half of bf16's
spacing is ~6e-5, so at lr 1e-6 the stored bf16 weight does not change; fp32's spacing
there is ~2e-9. The policy, its loading, its autocast and its optimizer are the trainer's
own (train/setup.py, train/optim.py), on the tiny Qwen2 model.
"""

from __future__ import annotations

import pytest
import torch

from grpoctl.config import load_config
from grpoctl.train.optim import build_optimizer
from grpoctl.train.setup import load_policy, pick_autocast, pick_dtype

CPU = torch.device("cpu")


def one_step(model_dir, dtype: str) -> tuple[float, dict]:
    """One AdamW step at lr 1e-6 in model.dtype=`dtype`: the share of the weights that had a
    gradient and did not change, and what the step ran in."""
    cfg = load_config("addition", [f"model.dtype={dtype}", "optimizer.lr=1e-6", "runtime.device=cpu"])
    model, _ = load_policy(str(model_dir), CPU, pick_dtype(cfg, CPU), gradient_checkpointing=False)
    optimizer = build_optimizer(model.parameters(), cfg.optimizer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.randint(3, 200, (4, 24), generator=torch.Generator().manual_seed(0))
    with pick_autocast(cfg, CPU)():
        out = model(ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    moved = still = 0
    for name, p in model.named_parameters():
        had_gradient = p.grad != 0
        same = (p.detach() == before[name]) & had_gradient
        still += int(same.sum())
        moved += int(had_gradient.sum())
    state = next(iter(optimizer.state.values()))
    ran = {"weights": next(model.parameters()).dtype, "logits": out.logits.dtype, "adam": state["exp_avg"].dtype}
    return still / moved, ran


def test_pure_bf16_loses_most_of_a_small_step_and_mixed_keeps_it(tiny_model_dir):
    unchanged, ran = one_step(tiny_model_dir, "bfloat16")
    assert ran == {"weights": torch.bfloat16, "logits": torch.bfloat16, "adam": torch.bfloat16}
    assert unchanged > 0.9  # measured 0.98: the step rounds away

    unchanged, ran = one_step(tiny_model_dir, "bf16-mixed")
    assert ran == {"weights": torch.float32, "logits": torch.bfloat16, "adam": torch.float32}
    assert unchanged < 0.01  # measured 0: every weight with a gradient moved


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # a CUDA autocast made on CPU, only inspected
@pytest.mark.parametrize(
    ("dtype", "device", "weights", "computes_in"),
    [
        ("auto", "cpu", torch.float32, None),
        ("auto", "cuda", torch.bfloat16, None),
        ("bfloat16", "cpu", torch.bfloat16, None),
        ("bf16-mixed", "cuda", torch.float32, torch.bfloat16),
        ("bf16-mixed", "cpu", torch.float32, torch.bfloat16),
    ],
)
def test_what_each_dtype_stores_and_computes_in(dtype, device, weights, computes_in):
    from grpoctl.rules import compute_dtype, resolve_dtype

    cfg = load_config("addition", [f"model.dtype={dtype}"])
    where = torch.device(device)
    assert pick_dtype(cfg, where) == weights
    context = pick_autocast(cfg, where)()
    if computes_in is None:
        assert not isinstance(context, torch.autocast)
    else:
        assert isinstance(context, torch.autocast) and context.fast_dtype == computes_in
    # vLLM samples in the compute dtype (rollout/vllm.py)
    assert compute_dtype(resolve_dtype(dtype, device)) == str(computes_in or weights).removeprefix("torch.")
