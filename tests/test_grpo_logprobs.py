"""Tokenization on a real (tiny, char-level) HF tokenizer; entropy; log-probs of a tiny Qwen2."""

import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from grpoctl.grpo import (
    collate_prompt_and_output_ids,
    compute_entropy,
    get_response_log_probs,
    tokenize_prompt_and_output,
)

torch.set_num_threads(1)

VOCAB = {"<pad>": 0, "<eos>": 1, "a": 2, "b": 3, "c": 4, " ": 5, "1": 6, "2": 7, "+": 8, "=": 9}


def char_tokenizer(**special_tokens) -> PreTrainedTokenizerFast:
    """One token per character, no post-processor: no special tokens are ever added."""
    tok = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special_tokens)


# Rows: "1+1=" + "2" -> [6 8 6 9 7];  "ab" + "cc" -> [2 3 4 4] then one pad.
EXPECTED_INPUT_IDS = [[6, 8, 6, 9], [2, 3, 4, 4]]
EXPECTED_MASK = [[False, False, False, True], [False, True, True, False]]


def test_tokenize_prompt_and_output_by_hand():
    batch = tokenize_prompt_and_output(
        ["1+1=", "ab"], ["2", "cc"], char_tokenizer(pad_token="<pad>", eos_token="<eos>")
    )
    assert set(batch) == {"input_ids", "labels", "response_mask"}
    assert batch["input_ids"].tolist() == EXPECTED_INPUT_IDS
    assert batch["labels"].tolist() == [[8, 6, 9, 7], [3, 4, 4, 0]]
    assert batch["response_mask"].dtype == torch.bool
    assert batch["response_mask"].tolist() == EXPECTED_MASK


def test_pads_with_eos_when_there_is_no_pad_token():
    batch = tokenize_prompt_and_output(["1+1=", "ab"], ["2", "cc"], char_tokenizer(eos_token="<eos>"))
    assert batch["labels"].tolist() == [[8, 6, 9, 7], [3, 4, 4, 1]]


def test_collate_ids_matches_and_checks_lengths():
    batch = collate_prompt_and_output_ids([[6, 8, 6, 9], [2, 3]], [[7], [4, 4]], pad_token_id=0)
    assert batch["input_ids"].tolist() == EXPECTED_INPUT_IDS
    assert batch["response_mask"].tolist() == EXPECTED_MASK
    with pytest.raises(ValueError):
        collate_prompt_and_output_ids([[1]], [[2], [3]], pad_token_id=0)


def test_entropy_matches_naive_formula():
    logits = torch.randn(3, 4, 11, dtype=torch.float64)
    p = torch.softmax(logits, dim=-1)
    naive = -(p * torch.log(p)).sum(-1)
    assert torch.allclose(compute_entropy(logits), naive, atol=1e-10)
    assert compute_entropy(torch.zeros(7)).item() == pytest.approx(math.log(7), abs=1e-6)


def test_entropy_on_huge_logits_stays_finite():
    h = compute_entropy(torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, -1e4]]))
    assert torch.isfinite(h).all()
    assert h.tolist() == pytest.approx([0.0, math.log(2)], abs=1e-5)
    assert compute_entropy(torch.randn(2, 5).bfloat16()).dtype == torch.float32


@pytest.fixture(scope="module")
def tiny_qwen():
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=50,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(config).eval()


def test_log_probs_match_naive_log_softmax_gather(tiny_qwen):
    input_ids = torch.randint(0, 50, (2, 7))
    labels = torch.randint(0, 50, (2, 7))
    out = get_response_log_probs(tiny_qwen, input_ids, labels)
    assert set(out) == {"log_probs"}
    assert out["log_probs"].shape == (2, 7) and out["log_probs"].requires_grad

    logits = tiny_qwen(input_ids).logits.float()
    naive = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out["log_probs"], naive, atol=1e-5)

    with_entropy = get_response_log_probs(
        tiny_qwen, input_ids, labels, return_token_entropy=True, attention_mask=torch.ones_like(input_ids)
    )
    assert torch.allclose(with_entropy["log_probs"], naive, atol=1e-5)
    p = torch.softmax(logits, dim=-1)
    assert with_entropy["token_entropy"].shape == (2, 7)
    assert torch.allclose(with_entropy["token_entropy"], -(p * p.log()).sum(-1), atol=1e-5)


def test_bf16_logits_are_upcast():
    logits = torch.randn(1, 3, 9).bfloat16()
    model = lambda ids: SimpleNamespace(logits=logits)  # noqa: E731 - a stand-in for a HF model
    labels = torch.tensor([[1, 2, 3]])
    log_probs = get_response_log_probs(model, labels, labels)["log_probs"]
    assert log_probs.dtype == torch.float32
    naive = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(log_probs, naive, atol=1e-6)


def test_token_entropy_in_chunks_matches_whole_rows():
    # Longer than one entropy chunk, so the chunked path is the one exercised.
    logits = torch.randn(2, 600, 17, dtype=torch.float64) * 3

    class FixedLogits(torch.nn.Module):
        def forward(self, input_ids):
            return SimpleNamespace(logits=logits)

    ids = torch.zeros(2, 600, dtype=torch.long)
    out = get_response_log_probs(FixedLogits(), ids, ids, return_token_entropy=True)
    assert out["token_entropy"].shape == (2, 600)
    torch.testing.assert_close(out["token_entropy"], compute_entropy(logits))
