"""Running each distinct prompt once gives the plain forward's log-probs, entropies and gradients.

`get_response_log_probs_shared_prompts` must agree with `get_response_log_probs` on every
response position (and be 0 elsewhere), with gradients equal to 1e-5, for GRPO-shaped
microbatches (groups sharing a prompt, prompts of different lengths, responses of
different lengths down to one token), shuffled rows, and the fallbacks.
"""

from __future__ import annotations

import functools

import pytest
import torch

from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs, get_response_log_probs_shared_prompts
from grpoctl.train.setup import load_policy

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    model, tokenizer = load_policy(str(tiny_model_dir), torch.device("cpu"), torch.float32, False)
    return model, tokenizer


def grpo_batch(tokenizer, questions, group: int, seed: int, shuffle: bool = False):
    g = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for q in questions:
        ids = tokenizer(f"User: {q}\nAssistant: <think>", add_special_tokens=False).input_ids
        for _ in range(group):
            n = int(torch.randint(1, 20, (), generator=g))
            prompts.append(ids)
            responses.append(torch.randint(2, 250, (n,), generator=g).tolist())
    if shuffle:
        order = torch.randperm(len(prompts), generator=g).tolist()
        prompts, responses = [prompts[i] for i in order], [responses[i] for i in order]
    return collate_prompt_and_output_ids(prompts, responses, tokenizer.pad_token_id)


def loss_and_grads(model, out, mask):
    model.zero_grad(set_to_none=True)
    per_row = (out["log_probs"] * mask).sum(-1) / mask.sum(-1)
    per_row.mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize(
    "questions,group,shuffle",
    [
        (["12+34", "5+7", "100+99", "40+40"], 8, False),  # 4 groups, prompts of 3 lengths
        (["1+1", "22+22"], 4, True),  # groups broken up, as off-policy microbatches are
        (["7+8"], 2, False),
    ],
)
def test_same_log_probs_entropy_and_gradients(policy, questions, group, shuffle):
    model, tokenizer = policy
    batch = grpo_batch(tokenizer, questions, group, seed=len(questions), shuffle=shuffle)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["response_mask"]

    plain = get_response_log_probs(model, ids, labels, return_token_entropy=True)
    want = loss_and_grads(model, plain, mask)
    shared = get_response_log_probs_shared_prompts(model, ids, labels, mask, return_token_entropy=True)
    got = loss_and_grads(model, shared, mask)

    assert shared["log_probs"].shape == ids.shape and shared["log_probs"].requires_grad
    torch.testing.assert_close(shared["log_probs"][mask], plain["log_probs"][mask].detach(), rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(shared["token_entropy"][mask], plain["token_entropy"][mask], rtol=1e-5, atol=1e-5)
    assert (shared["log_probs"][~mask] == 0).all() and (shared["token_entropy"][~mask] == 0).all()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-5, msg=name)


def test_one_token_responses_need_no_second_pass(policy):
    model, tokenizer = policy
    ids = tokenizer("User: 3+4\nAssistant: <think>", add_special_tokens=False).input_ids
    batch = collate_prompt_and_output_ids([ids] * 3, [[40], [41], [42]], tokenizer.pad_token_id)
    shared = get_response_log_probs_shared_prompts(model, batch["input_ids"], batch["labels"], batch["response_mask"])
    plain = get_response_log_probs(model, batch["input_ids"], batch["labels"])
    mask = batch["response_mask"]
    torch.testing.assert_close(shared["log_probs"][mask], plain["log_probs"][mask], rtol=1e-5, atol=1e-5)


def test_falls_back_to_the_plain_forward(policy, monkeypatch):
    model, tokenizer = policy
    batch = grpo_batch(tokenizer, ["1+2", "3+4", "5+6"], 1, seed=0)  # every prompt distinct
    calls = []
    real_forward = type(model).forward

    @functools.wraps(real_forward)
    def counted(self, *args, **kwargs):
        calls.append(kwargs)
        return real_forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", counted)
    get_response_log_probs_shared_prompts(model, batch["input_ids"], batch["labels"], batch["response_mask"])
    assert len(calls) == 1 and "attention_mask" not in calls[0]  # one plain forward

    calls.clear()
    shared = grpo_batch(tokenizer, ["1+2"], 3, seed=0)
    get_response_log_probs_shared_prompts(model, shared["input_ids"], shared["labels"], shared["response_mask"])
    assert len(calls) == 2  # prompt once, then the responses

    calls.clear()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        get_response_log_probs_shared_prompts(model, shared["input_ids"], shared["labels"], shared["response_mask"])
    finally:
        model.gradient_checkpointing_disable()
    assert len(calls) == 1  # checkpointing drops a cache passed to the layers: no sharing
