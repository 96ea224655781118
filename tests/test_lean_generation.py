"""The lean sampling loop draws exactly what transformers' `generate` draws.

Both engines of the hf backend get the same prompts, settings and seed; the responses,
their texts and their truncation flags must be identical, token for token, for sampling
(with and without temperature / top-p), greedy decoding, min_tokens, stop strings and EOS,
and several generation chunks. The model is the tiny random Qwen2, changed so that the
rare paths are common: it favours a few tokens, EOS among them, and the stop string is a
frequent piece of its own output.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from grpoctl.rollout import qwen2_decoder as dec
from grpoctl.rollout.base import SamplingSettings
from grpoctl.rollout.hf import HFRolloutBackend
from grpoctl.train.setup import load_policy

torch.set_num_threads(1)

FAVOUR = 12.0
PROMPTS = [
    "User: 12+34\nAssistant: <think>",
    "User: 5+7\nAssistant: <think>",
    "User: 100+9\nAssistant: <think>",
    "User: 40+40\nAssistant: <think>",
    "Q: 1\nA:",
    "User: 81+19\nAssistant: <think>",
]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The tiny random Qwen2, made to favour a few tokens: its tied embedding rows for
    "a", "b", "<", "/" and EOS are scaled up, so their logits stand out, and samples
    often hold stop strings made of them and often end in EOS (where min_tokens matters)."""
    model, tokenizer = load_policy(str(tiny_model_dir), torch.device("cpu"), torch.float32, False)
    favoured = tokenizer.convert_tokens_to_ids(list("ab</")) + [tokenizer.eos_token_id]
    with torch.no_grad():
        model.model.embed_tokens.weight[favoured] *= FAVOUR
    return model, tokenizer


@pytest.fixture(scope="module")
def stop_string(policy):
    """The commonest pair of characters in its own samples, not starting with a prompt's last
    character (a stop string straddling the prompt's end is the case tested on its own below)."""
    model, tokenizer = policy
    samples = HFRolloutBackend(model, tokenizer, engine="generate").generate(
        PROMPTS, 4, SamplingSettings(min_tokens=14, max_tokens=14, stop=()), seed=0
    )
    ends = {p[-1] for p in PROMPTS}
    pairs = Counter(t[i : i + 2] for t in samples.response_texts for i in range(len(t) - 1) if t[i] not in ends)
    return pairs.most_common(1)[0][0]


def both(policy, prompts, n, sampling, seed, batch_size=256):
    model, tokenizer = policy
    ref = HFRolloutBackend(model, tokenizer, batch_size=batch_size, engine="generate").generate(
        prompts, n, sampling, seed
    )
    lean_backend = HFRolloutBackend(model, tokenizer, batch_size=batch_size, engine="lean")
    assert lean_backend.engine == "lean"
    return ref, lean_backend.generate(prompts, n, sampling, seed)


@pytest.mark.parametrize(
    "settings",
    [
        dict(),
        dict(min_tokens=0),
        dict(min_tokens=6, max_tokens=10),
        dict(temperature=0.7, top_p=0.9),
        dict(temperature=1.3, top_p=0.5, min_tokens=1),
        dict(greedy=True, min_tokens=1),
        dict(greedy=True, min_tokens=0, stop=()),
    ],
)
def test_lean_samples_are_generate_samples(policy, stop_string, settings):
    sampling = SamplingSettings(**({"stop": (stop_string,), "max_tokens": 14} | settings))
    ref, lean = both(policy, PROMPTS, 4, sampling, seed=3)
    assert lean.response_ids == ref.response_ids
    assert lean.response_texts == ref.response_texts
    assert lean.truncated == ref.truncated
    assert lean.prompt_ids == ref.prompt_ids
    # The settings reach the paths they are meant to: some rows stop early, some run to the end.
    if settings.get("stop", True) and not settings.get("greedy"):
        assert any(ref.truncated) and not all(ref.truncated)


def test_chunks_continue_one_random_stream(policy, stop_string):
    sampling = SamplingSettings(stop=(stop_string,), max_tokens=12)
    ref, lean = both(policy, PROMPTS, 3, sampling, seed=11, batch_size=5)
    assert lean.response_ids == ref.response_ids and lean.truncated == ref.truncated


def test_eos_is_masked_until_min_tokens(policy):
    model, tokenizer = policy
    lean = HFRolloutBackend(model, tokenizer, engine="lean")
    early = lean.generate(PROMPTS, 4, SamplingSettings(min_tokens=0, max_tokens=10, stop=()), seed=1)
    late = lean.generate(PROMPTS, 4, SamplingSettings(min_tokens=5, max_tokens=10, stop=()), seed=1)
    eos = tokenizer.eos_token_id
    assert any(len(r) < 5 and r[-1] == eos for r in early.response_ids)  # EOS is likely here...
    assert all(len(r) >= 5 for r in late.response_ids)  # ...and never comes before min_tokens
    assert all(r[-1] == eos for r, cut in zip(late.response_ids, late.truncated, strict=True) if not cut)


def test_decoder_logits_match_the_module(policy):
    model, tokenizer = policy
    ids = [tokenizer(p, add_special_tokens=False).input_ids for p in PROMPTS[:3]]
    width = max(map(len, ids))
    padded = torch.tensor([[0] * (width - len(r)) + r for r in ids])
    mask = (torch.arange(width) >= torch.tensor([width - len(r) for r in ids])[:, None]).long()
    w = dec.read_weights(model)
    cache = dec.KVCache.empty(w, 3, width + 2, "cpu")
    cos, sin = dec.rotary_tables(w, width + 2, "cpu")
    rows = torch.arange(3)
    with torch.no_grad():
        first = dec.prefill(w, padded, mask, rows, cache, cos, sin)
        want = model(padded, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
        torch.testing.assert_close(first, want, rtol=1e-5, atol=1e-5)
        nxt = first.argmax(-1)
        second = dec.decode_step(w, nxt, mask.sum(-1), width, cache, cos, sin)
        full = torch.cat([padded, nxt[:, None]], dim=1)
        full_mask = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], dim=1)
        want = model(full, attention_mask=full_mask, position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
        torch.testing.assert_close(second, want, rtol=1e-5, atol=1e-5)


def test_unsupported_models_use_generate(policy):
    model, tokenizer = policy
    assert dec.unsupported_reason(model) is None
    fake = type("GPT2ish", (), {"config": type("C", (), {"model_type": "gpt2"})()})()
    assert "gpt2" in dec.unsupported_reason(fake)
    with pytest.raises(ValueError, match="lean engine does not support"):
        HFRolloutBackend(fake, tokenizer, engine="lean")
    assert HFRolloutBackend(fake, tokenizer).engine == "generate"


def test_a_stop_string_straddling_the_prompt_end_does_not_count(policy):
    model, tokenizer = policy
    lean = HFRolloutBackend(model, tokenizer, engine="lean")
    plain = lean.generate(PROMPTS[:1], 4, SamplingSettings(max_tokens=6, stop=(), min_tokens=6), seed=2)
    # ">" + the first response character: in the text only if the prompt's ">" counted.
    straddling = ">" + plain.response_texts[0][0]
    out = lean.generate(PROMPTS[:1], 4, SamplingSettings(max_tokens=6, stop=(straddling,), min_tokens=6), seed=2)
    assert out.response_ids[0] == plain.response_ids[0] and out.truncated[0]
