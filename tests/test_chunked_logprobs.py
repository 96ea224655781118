"""Chunked log-probs give the full-logits path's values and gradients, and never keep its logits.

fp32: values and gradients within 1e-6. bf16: the head runs in bf16 on both paths, so
values agree within 1e-6 too; the head's weight gradient is summed over chunks in bf16,
one rounding per chunk where the full path rounds once, so gradients agree within 1e-2
relative (a few bf16 ulps).
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grpoctl.grpo import get_response_log_probs, get_response_log_probs_shared_prompts
from grpoctl.grpo.logprobs import chunked_label_log_probs, compute_entropy

torch.set_num_threads(1)

VOCAB, HIDDEN, POSITIONS = 97, 16, 23


def full_path(hidden: torch.Tensor, head: torch.nn.Linear, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Today's path: the whole (positions, vocab) logits in float32."""
    logits = head(hidden).float()
    label_logits = logits.gather(-1, labels[..., None]).squeeze(-1)
    return {"log_probs": label_logits - torch.logsumexp(logits, -1), "token_entropy": compute_entropy(logits)}


def weighted_loss(out: dict[str, torch.Tensor], seed: int) -> torch.Tensor:
    """A loss that weights every position's log-prob and entropy differently (as GRPO's does)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(out["log_probs"].shape, generator=g)
    b = torch.randn(out["log_probs"].shape, generator=g)
    return (a * out["log_probs"]).sum() + (b * out["token_entropy"]).sum()


def values_and_grads(fn, hidden, head, seed=0):
    hidden = hidden.detach().clone().requires_grad_(True)
    head.zero_grad(set_to_none=True)
    out = fn(hidden, head)
    weighted_loss(out, seed).backward()
    grads = {"hidden": hidden.grad, **{n: p.grad.clone() for n, p in head.named_parameters()}}
    return {k: v.detach() for k, v in out.items()}, grads


def inputs(dtype=torch.float32, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=g))
        if bias:
            head.bias.copy_(torch.randn(VOCAB, generator=g))
    hidden = torch.randn(2, POSITIONS, HIDDEN, generator=g)
    labels = torch.randint(0, VOCAB, (2, POSITIONS), generator=g)
    return hidden.to(dtype), head.to(dtype), labels


@pytest.mark.parametrize("chunk", [1, 7, 2 * POSITIONS, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_fp32_values_and_gradients_equal_the_full_path(chunk, bias):
    hidden, head, labels = inputs(bias=bias)
    want, want_grads = values_and_grads(lambda h, m: full_path(h, m, labels), hidden, head)
    got, got_grads = values_and_grads(
        lambda h, m: chunked_label_log_probs(h, m, labels, chunk, True, entropy_with_grad=True), hidden, head
    )
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-6)
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], atol=1e-5, rtol=1e-6)


def test_bf16_values_and_gradients_within_the_stated_tolerance():
    hidden, head, labels = inputs(torch.bfloat16)
    want, want_grads = values_and_grads(lambda h, m: full_path(h, m, labels), hidden, head)
    got, got_grads = values_and_grads(
        lambda h, m: chunked_label_log_probs(h, m, labels, 5, True, entropy_with_grad=True), hidden, head
    )
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-6)
    for name in want_grads:
        assert got_grads[name].dtype == want_grads[name].dtype == torch.bfloat16
        torch.testing.assert_close(got_grads[name].float(), want_grads[name].float(), atol=2e-2, rtol=1e-2)


def test_under_autocast_the_head_runs_in_bf16_and_the_master_weight_gets_fp32_grads():
    hidden, head, labels = inputs(torch.float32)

    def under_autocast(fn):
        def run(h, m):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return fn(h, m)

        return run

    want, want_grads = values_and_grads(under_autocast(lambda h, m: full_path(h, m, labels)), hidden, head)
    got, got_grads = values_and_grads(
        under_autocast(lambda h, m: chunked_label_log_probs(h, m, labels, 5, True, entropy_with_grad=True)),
        hidden,
        head,
    )
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-6)
    for name in want_grads:
        assert got_grads[name].dtype == torch.float32
        torch.testing.assert_close(got_grads[name], want_grads[name], atol=2e-2, rtol=1e-2)


def test_entropy_without_grad_is_detached_and_log_probs_still_train():
    hidden, head, labels = inputs()
    hidden.requires_grad_(True)
    out = chunked_label_log_probs(hidden, head, labels, 4, return_token_entropy=True)
    assert not out["token_entropy"].requires_grad
    out["log_probs"].sum().backward()
    logits = head(hidden.detach()).float()
    torch.testing.assert_close(out["token_entropy"], compute_entropy(logits), atol=1e-6, rtol=1e-6)
    assert hidden.grad is not None and head.weight.grad is not None


def saved_numels(fn) -> list[int]:
    """The sizes of every tensor autograd keeps for backward while `fn` runs."""
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sizes


def test_no_vocabulary_sized_tensor_is_kept_for_backward():
    hidden, head, labels = inputs()
    hidden.requires_grad_(True)
    full_logits = labels.numel() * VOCAB
    chunked = saved_numels(lambda: chunked_label_log_probs(hidden, head, labels, 4, True, entropy_with_grad=True))
    assert max(chunked) < full_logits / 2  # the hidden states (and the weight), never the logits
    # ... whereas the full path keeps the logits themselves.
    assert max(saved_numels(lambda: full_path(hidden, head, labels))) >= full_logits


@pytest.fixture(scope="module")
def model():
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN * 2,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def grads_of(model, out, mask):
    model.zero_grad(set_to_none=True)
    ((out["log_probs"] * mask).sum() + 0.1 * (out["token_entropy"] * mask).sum()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(model, plain, chunked, mask):
    for name in ("log_probs", "token_entropy"):
        torch.testing.assert_close(chunked[name], plain[name], atol=1e-6, rtol=1e-6)
    want, got = grads_of(model, plain, mask), grads_of(model, chunked, mask)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-5)


def test_model_forward_equals_the_full_logits_path(model):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, 11), generator=g)
    labels = torch.randint(0, VOCAB, (3, 11), generator=g)
    att = torch.ones_like(ids)
    att[0, 8:] = 0
    mask = att.float()

    def run(chunk):
        return get_response_log_probs(model, ids, labels, True, att, entropy_with_grad=True, chunk_tokens=chunk)

    assert_same(model, run(0), run(4), mask)


def test_shared_prompt_path_equals_the_full_logits_path(model):
    from grpoctl.grpo import collate_prompt_and_output_ids

    g = torch.Generator().manual_seed(2)
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]
    responses = [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (4, 1, 6, 3)]
    batch = collate_prompt_and_output_ids(prompts, responses, pad_token_id=0)
    mask = batch["response_mask"]

    def run(chunk):
        return get_response_log_probs_shared_prompts(
            model, batch["input_ids"], batch["labels"], mask, True, entropy_with_grad=True, chunk_tokens=chunk
        )

    assert_same(model, run(0), run(3), mask.float())


def test_a_head_that_is_not_a_plain_linear_falls_back_to_the_full_logits(model, monkeypatch):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (2, 9), generator=g)
    labels = torch.randint(0, VOCAB, (2, 9), generator=g)
    plain = get_response_log_probs(model, ids, labels, True)
    monkeypatch.setattr(model.config, "final_logit_softcapping", 30.0, raising=False)
    calls = []
    monkeypatch.setattr(model, "get_decoder", lambda: calls.append(1) or model.model)
    out = get_response_log_probs(model, ids, labels, True, chunk_tokens=4)
    assert not calls  # the full forward ran, not the decoder alone
    for name in plain:
        torch.testing.assert_close(out[name], plain[name], atol=0, rtol=0)


@pytest.mark.slow
def test_a_chunked_run_records_the_unchunked_runs_rows(tiny_model_dir, tmp_path):
    """Through the trainer: the training forward, the old log-probs of an off-policy step and
    an entropy bonus's gradient all take the chunked path, and every recorded number stays."""
    import os
    import sys

    import trainer_zygote
    from conftest import REPO, fast_overrides
    from run_rows import assert_same_rows, rows

    def run(name: str, chunk: int):
        extra = {"loop.n_grpo_steps": 2, "loop.epochs_per_rollout_batch": 2, "loop.train_batch_size": 8}
        extra |= {"loss.entropy_coef": 0.01, "model.logprob_chunk_tokens": chunk, "eval.at_start": "false"}
        overrides = fast_overrides(tiny_model_dir, tmp_path / name, **extra)
        cmd = [sys.executable, str(REPO / "tests" / "digit_reward_train.py"), "train", "addition"]
        out = trainer_zygote.run(
            [*cmd, *overrides, f"name={name}"], tmp_path, dict(os.environ, PYTHONPATH=str(REPO)), timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return rows(tmp_path / "registry.db", name)

    assert_same_rows(run("chunked", 7), run("full", 0))
