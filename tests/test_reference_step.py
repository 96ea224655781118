"""grpoctl/grpo/reference.py computes what the engine's `grpo_step` computes.

One GRPO step of a tiny Qwen2 (grpoctl/tiny/model.py), twice from the same weights on the
same rollouts: once through the real `grpo_step` (train/step.py, with a backend that
returns fixed rollouts, so nothing is sampled), once through `reference_grpo_step`. The
rollouts are graded by the real r1_zero reward, so every group but one has a spread of
rewards and real gradients. Each optimizer step's loss and gradients, and the updated
weights, must agree: on-policy (one optimizer step, no clipping, so the raw gradients are
compared), and off-policy (two optimizer steps per rollout batch, from two train batches
or two epochs), where the second step's ratios have moved, PPO's clip bites and the
gradient norm is clipped.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from grpoctl import metrics  # noqa: E402
from grpoctl.config import load_config  # noqa: E402
from grpoctl.data.examples import Example  # noqa: E402
from grpoctl.data.run_data import RunData  # noqa: E402
from grpoctl.data.stream import PromptStream  # noqa: E402
from grpoctl.grpo.reference import reference_grpo_step  # noqa: E402
from grpoctl.prompts import format_prompt  # noqa: E402
from grpoctl.rewards import get_reward_fn  # noqa: E402
from grpoctl.rollout.base import Rollouts  # noqa: E402
from grpoctl.tiny.model import build_model, build_tokenizer  # noqa: E402
from grpoctl.train.context import RunContext  # noqa: E402
from grpoctl.train.memory import MemoryTracker  # noqa: E402
from grpoctl.train.step import grpo_step, shuffle_seed  # noqa: E402
from grpoctl.train.trainer import policy_loss  # noqa: E402

TEMPLATE = "Q: {question} A: <think>"
GROUP = 4
# Four problems, four completions each; the last group is all wrong (zero advantage).
PROBLEMS = [("12+30", "42"), ("5+7", "12"), ("40+9", "49"), ("3+3", "6")]
COMPLETIONS = [
    [
        " 42 </think> <answer>42</answer>",
        " no </think> <answer>41</answer>",
        " 4</think>",
        " ok </think> <answer>42</answer>",
    ],
    [" 12 </think> <answer>12</answer>", " 5+7 </think> <answer>13</answer>", " x", " </think> <answer>2</answer>"],
    [" 49 </think> <answer>49</answer>", " 49 </think> <answer>49</answer>", " 4 </think> <answer>9</answer>", " 9"],
    [" 7 </think> <answer>7</answer>", " 5", " 8 </think> <answer>8</answer>", " </think> <answer>9</answer>"],
]
ROLLOUTS = len(PROBLEMS) * GROUP
OVERRIDES = [
    f"rollout.rollout_batch_size={ROLLOUTS}",
    f"rollout.group_size={GROUP}",
    "loop.gradient_accumulation_steps=2",
    "loop.n_grpo_steps=10",  # step 1 is neither the last nor an eval step
    "eval.every=0",
    "checkpoint.every=0",
    "prompt.reward=r1_zero",
]
# One train batch: on-policy. No clipping, so the gradients compared are the raw ones.
ON_POLICY = [f"loop.train_batch_size={ROLLOUTS}", "optimizer.max_grad_norm=1e6"]
# Two optimizer steps per rollout batch; every raw gradient norm of this batch is above 1.0.
MAX_GRAD_NORM = 0.5
OFF_POLICY = {
    "two train batches": [f"loop.train_batch_size={ROLLOUTS // 2}"],
    "two epochs": [f"loop.train_batch_size={ROLLOUTS}", "loop.epochs_per_rollout_batch=2"],
}
LR = 0.05


class FixedRollouts:
    """A rollout backend whose completions for each prompt are fixed, whatever the weights."""

    name = "fixed"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.completions = {
            format_prompt(TEMPLATE, q): group for (q, _), group in zip(PROBLEMS, COMPLETIONS, strict=True)
        }
        self.returned: Rollouts | None = None

    def generate(self, prompts, n, sampling, seed):
        assert n == GROUP and sorted(prompts) == sorted(self.completions)
        texts = [t for p in prompts for t in self.completions[p]]
        self.returned = Rollouts(
            prompt_ids=[self.tokenizer.encode(p) for p in prompts for _ in range(n)],
            response_ids=[self.tokenizer.encode(t) for t in texts],
            response_texts=texts,
            truncated=[False] * len(texts),
        )
        return self.returned

    def sync_weights(self, model):
        return 0.0

    def before_training(self):
        pass

    def memory_pool_bytes(self):
        return 0

    def close(self):
        pass


class Recorder:
    """The registry and progress view: keeps what the step records."""

    def __init__(self):
        self.steps = []

    def log_step(self, run_id, step, figures, **rows):
        self.steps.append((step, figures, rows))

    def update(self, *args):
        pass


class Row:
    id = 1


def grads_at_each_step(optimizer, model) -> list[dict[str, torch.Tensor]]:
    """The parameters' gradients as the optimizer sees them (clipped), one dict per optimizer step."""
    seen = []
    optimizer.register_step_pre_hook(
        lambda *_: seen.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    )
    return seen


def engine_and_reference(overrides: list[str]) -> dict:
    """One GRPO step through the engine and through the reference, from the same weights."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    reference_model = copy.deepcopy(model)
    cfg = load_config(None, OVERRIDES + overrides)

    # The engine: grpo_step over a RunContext with fixed rollouts.
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    engine_grads = grads_at_each_step(optimizer, model)
    examples = [Example(id=q, question=q, answer=a) for q, a in PROBLEMS]
    recorder = Recorder()
    run = RunContext(
        cfg=cfg,
        registry=recorder,
        model=model,
        tokenizer=tokenizer,
        ref_model=None,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
        loss=policy_loss(cfg),
        backend=(backend := FixedRollouts(tokenizer)),
        data=RunData(examples, [], "test", TEMPLATE, "", "synthetic"),
        stream=PromptStream(examples, seed=0),
        memory=MemoryTracker("cpu"),
        progress=recorder,
        run=Row(),
    )
    grpo_step(run, 1)
    ((step, figures, rows),) = recorder.steps
    assert step == 1
    # Throughput: the tokens sampled per second of rollout, and those trained on (prompt and
    # response, the last token only a label, once per epoch) per second of training.
    sampled = sum(len(r) for r in backend.returned.response_ids)
    trained = sum(
        len(p) + len(r) - 1 for p, r in zip(backend.returned.prompt_ids, backend.returned.response_ids, strict=True)
    )
    assert figures[metrics.ROLLOUT_TOKENS_PER_S] == pytest.approx(sampled / figures["time/rollout"])
    epochs = run.cfg.loop.epochs_per_rollout_batch
    assert figures[metrics.TRAIN_TOKENS_PER_S] == pytest.approx(epochs * trained / figures["time/train"])

    # The reference, on the same rollouts and rewards from the same starting weights.
    rollouts = backend.returned
    reward_fn = get_reward_fn("r1_zero")
    answers = {format_prompt(TEMPLATE, q): a for q, a in PROBLEMS}
    truths = [answers[tokenizer.decode(ids)] for ids in rollouts.prompt_ids]
    rewards = torch.tensor(
        [reward_fn(t, truth)["reward"] for t, truth in zip(rollouts.response_texts, truths, strict=True)]
    )
    assert 0 < rewards.sum() < len(rewards)  # a real signal, not all-equal groups
    assert figures[metrics.REWARD] == pytest.approx(float(rewards.mean()))
    reference_optimizer = torch.optim.SGD(reference_model.parameters(), lr=LR)
    reference_grads = grads_at_each_step(reference_optimizer, reference_model)
    losses = reference_grpo_step(
        reference_model,
        reference_optimizer,
        rollouts.prompt_ids,
        rollouts.response_ids,
        rewards,
        group_size=GROUP,
        pad_token_id=tokenizer.pad_token_id,
        train_batch_size=cfg.loop.train_batch_size,
        gradient_accumulation_steps=cfg.loop.gradient_accumulation_steps,
        epochs=cfg.loop.epochs_per_rollout_batch,
        shuffle_seed=shuffle_seed(cfg.seed, 1),
        cliprange=cfg.loss.cliprange,
        advantage_eps=cfg.loss.advantage_eps,
        max_grad_norm=cfg.optimizer.max_grad_norm,
    )
    return {
        "engine_steps": [figures for _, figures in rows["opt_metrics"]],
        "engine_grads": engine_grads,
        "reference_losses": losses,
        "reference_grads": reference_grads,
        "engine_model": model,
        "reference_model": reference_model,
    }


def assert_same_update(out: dict, optimizer_steps: int) -> None:
    """Each optimizer step's loss and gradients, and the weights after the last, agree."""
    engine_steps, engine_grads = out["engine_steps"], out["engine_grads"]
    assert len(out["reference_losses"]) == len(engine_steps) == len(engine_grads) == optimizer_steps
    assert len(out["reference_grads"]) == optimizer_steps
    for opt_step in range(optimizer_steps):
        assert out["reference_losses"][opt_step] == pytest.approx(engine_steps[opt_step][metrics.LOSS], abs=1e-6)
        for name, engine_grad in engine_grads[opt_step].items():
            reference_grad = out["reference_grads"][opt_step][name]
            torch.testing.assert_close(reference_grad, engine_grad, atol=1e-6, rtol=0, msg=f"{opt_step}: {name}")
    updated = dict(out["reference_model"].named_parameters())
    for name, param in out["engine_model"].named_parameters():
        torch.testing.assert_close(updated[name], param, atol=1e-6, rtol=0, msg=name)


def test_reference_step_equals_the_engine_step():
    out = engine_and_reference(ON_POLICY)
    assert_same_update(out, optimizer_steps=1)
    nonzero = sum(bool(grad.abs().max() > 1e-6) for grad in out["engine_grads"][0].values())
    # On-policy the loss is -mean(A) = 0 in value (advantages sum to zero in a group);
    # the signal is in its gradient, which every parameter gets.
    assert nonzero == len(out["engine_grads"][0])


@pytest.mark.parametrize("loop", OFF_POLICY.values(), ids=OFF_POLICY.keys())
def test_reference_step_equals_the_engine_step_off_policy(loop):
    out = engine_and_reference([*loop, f"optimizer.max_grad_norm={MAX_GRAD_NORM}"])
    assert_same_update(out, optimizer_steps=2)
    first, second = out["engine_steps"]
    # The first step trains on its own policy's rollouts; by the second the weights have
    # moved, so the ratio is no longer 1 and PPO's clip takes some tokens.
    assert first[metrics.CLIP_FRACTION] == 0 < second[metrics.CLIP_FRACTION]
    for opt_step, figures in enumerate(out["engine_steps"]):
        # Gradient-norm clipping is active: the raw norm is above the cap, and the
        # gradients each optimizer stepped with (the reference's too) were scaled to it.
        assert figures[metrics.GRAD_NORM] > MAX_GRAD_NORM
        for grads in (out["engine_grads"][opt_step], out["reference_grads"][opt_step]):
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
            assert float(norm) == pytest.approx(MAX_GRAD_NORM, rel=1e-4)
