"""LoRA (model.lora): the merge samplers get, the run identity, bad input, and a LoRA lab run
that checkpoints its adapter alone and resumes to the rows of a run never stopped."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from cli import invoke
from conftest import REPO, lab_overrides
from run_rows import assert_same_rows, rows

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.config_schema import LoraConfig
from grpoctl.rollout.base import SamplingSettings
from grpoctl.rollout.hf import HFRolloutBackend
from grpoctl.rollout.merged import has_adapter, serving_weights
from grpoctl.run_identity import config_hash
from grpoctl.train.setup import load_policy

pytest.importorskip("peft")

LAB_HASH = "b931743862afb61a"  # tests/test_run_identity.py pins it
PROMPTS = ["User: 12+34\nAssistant: <think>", "User: 5+7\nAssistant: <think>"]


def adapted(model_dir, dtype=torch.float32, rank=4):
    """The tiny model with a LoRA adapter whose B is not zero (a fresh one's is), so it matters."""
    model, tokenizer = load_policy(
        str(model_dir), torch.device("cpu"), dtype, False, lora=LoraConfig(enabled=True, rank=rank, alpha=8)
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0, 0.2)
    return model, tokenizer


def test_only_the_adapter_trains(tiny_model_dir):
    model, _ = adapted(tiny_model_dir)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: every projection of every layer, never the LM head (tied to the embedding here)
    assert sum(".lora_A." in n for n in trainable) == 7 * model.config.num_hidden_layers


def test_merged_weights_give_the_adapted_models_logits(tiny_model_dir):
    model, tokenizer = adapted(tiny_model_dir)
    plain, _ = load_policy(str(tiny_model_dir), torch.device("cpu"), torch.float32, False)
    before = {n: p.clone() for n, p in model.named_parameters()}
    merged = dict(serving_weights(model))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the policy itself never moves
    assert set(merged) == {n for n, _ in plain.named_parameters()}  # Hugging Face names, no adapter tensors
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([tokenizer(PROMPTS[0], add_special_tokens=False).input_ids])
    with torch.no_grad():
        want, got = model(ids).logits, plain(ids).logits
        base = load_policy(str(tiny_model_dir), torch.device("cpu"), torch.float32, False)[0](ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (want - base).abs().max() > 1e-2  # the adapter changes the policy, and the merge carries it
    # peft's own merge (in place, on a copy) agrees with ours
    reference = copy.deepcopy(model).model.layers[0].self_attn.q_proj
    reference.merge()
    q = reference.base_layer.weight
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], q, rtol=0, atol=1e-6)


def test_a_bf16_server_gets_the_fp32_merge_rounded_once(tiny_model_dir):
    model, _ = adapted(tiny_model_dir)
    layer = model.model.layers[1].mlp.down_proj
    exact = layer.base_layer.weight.float() + layer.get_delta_weight("default").float()
    served = dict(serving_weights(model, torch.bfloat16))["model.layers.1.mlp.down_proj.weight"]
    assert served.dtype == torch.bfloat16
    assert torch.equal(served, exact.to(torch.bfloat16))
    # rounding the two terms first would serve other numbers
    twice = layer.base_layer.weight.to(torch.bfloat16) + layer.get_delta_weight("default").to(torch.bfloat16)
    assert not torch.equal(served, twice)


def test_a_bf16_models_adapter_comes_back_bit_for_bit(tiny_model_dir, tmp_path):
    """What --resume relies on: the fp32 adapter of a bf16 model, saved and loaded, unrounded and trainable."""
    model, tokenizer = adapted(tiny_model_dir, dtype=torch.bfloat16)
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert saved and all(p.dtype == torch.float32 for p in saved.values())
    model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    loaded, _ = load_policy(str(tmp_path / "ckpt"), torch.device("cpu"), torch.bfloat16, False)
    again = {n: p for n, p in loaded.named_parameters() if p.requires_grad}
    assert again.keys() == saved.keys()
    assert all(torch.equal(again[n], saved[n]) and again[n].dtype == torch.float32 for n in saved)


def test_the_hf_backend_samples_from_the_adapted_policy(tiny_model_dir):
    model, tokenizer = adapted(tiny_model_dir)
    sampling = SamplingSettings(min_tokens=8, max_tokens=8, stop=())
    lean = HFRolloutBackend(model, tokenizer, engine="lean")
    assert lean.engine == "lean" and has_adapter(model)
    ref = HFRolloutBackend(model, tokenizer, engine="generate").generate(PROMPTS, 4, sampling, seed=5)
    got = lean.generate(PROMPTS, 4, sampling, seed=5)
    assert got.response_ids == ref.response_ids  # transformers' generate runs peft's layers
    base, _ = load_policy(str(tiny_model_dir), torch.device("cpu"), torch.float32, False)
    assert HFRolloutBackend(base, tokenizer).generate(PROMPTS, 4, sampling, seed=5).response_ids != got.response_ids


def test_lora_settings_enter_the_identity_only_when_lora_is_on():
    assert config_hash(load_config("lab", [])) == LAB_HASH
    off = ["model.lora.rank=4", "model.lora.alpha=3", "model.lora.targets=[q_proj]", "model.lora.dropout=0.1"]
    assert config_hash(load_config("lab", off)) == LAB_HASH  # LoRA off: its settings compute nothing
    on = config_hash(load_config("lab", ["model.lora.enabled=true"]))
    assert on != LAB_HASH
    assert config_hash(load_config("lab", ["model.lora.enabled=true", "model.lora.rank=4"])) != on
    assert config_hash(load_config("lab", ["model.lora.enabled=true", "model.lora.rank=16"])) == on  # the default


@pytest.mark.parametrize(
    "override, says",
    [
        ("model.lora.rank=0", "model.lora.rank must be an integer >= 1, got 0"),
        ("model.lora.rank=two", "model.lora.rank: Value 'two' of type 'str' could not be converted to Integer"),
        ("model.lora.alpha=0", "model.lora.alpha must be an integer >= 1, got 0"),
        ("model.lora.dropout=1", "model.lora.dropout must be a finite number in [0, 1), got 1.0"),
        ("model.lora.targets=['']", "model.lora.targets must not be empty, got ['']"),
    ],
)
def test_bad_lora_settings_are_one_line_exit_2(tmp_path, override, says):
    out = invoke("train", "model.lora.enabled=true", override, cwd=tmp_path, env={"GRPOCTL_DB": None})
    assert out.returncode == 2, out
    assert out.stderr.strip().splitlines() == [f"error: {says}"]
    assert list(tmp_path.iterdir()) == []


# Small enough for the fast tier: 2 steps of 16 rollouts of at most 12 tokens, 4 eval problems at the last.
SMALL = {
    "runtime.threads": 1,
    "rollout.max_tokens": 12,
    "eval.max_tokens": 12,
    "eval.subset": 4,
    "eval.at_start": "false",
    "optimizer.lr": 1e-3,
}


def lora_run(tmp_path, name, *extra, env=None):
    args = lab_overrides("lab", tmp_path, **SMALL)
    args += ["model.lora.enabled=true", "model.lora.rank=4", f"name={name}"]
    return invoke("train", "lab", *args, *extra, f"--db={tmp_path / 'registry.db'}", cwd=tmp_path, env=env)


def test_a_lora_lab_run_checkpoints_its_adapter_and_resumes_exactly(tmp_path):
    straight = lora_run(tmp_path, "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    # Ctrl-C as step 1 records: the run finishes the step, checkpoints it and stops (train/faults.py)
    stopped = lora_run(tmp_path, "stopped", env={"GRPOCTL_FAULT": "step-record@1:INT"})
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    step1 = tmp_path / "ckpt" / "stopped" / "step-1"
    files = {p.name for p in step1.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "trainer_state.pt"} <= files
    assert not files & {"model.safetensors", "config.json"}  # the adapter alone, never the frozen model
    resumed = invoke("train", "--resume", "stopped", f"--db={tmp_path / 'registry.db'}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming run stopped from step 1" in resumed.stdout
    got, want = rows(tmp_path / "registry.db", "stopped"), rows(tmp_path / "registry.db", "straight")
    assert_same_rows(got, want)
    assert {s for s, _, _, _ in want["metrics"]} == {1, 2} and [e[0] for e in want["evals"]] == [2]
    # The lean sampler reads the adapter merged: its log-probs are the trainer's up to rounding.
    gaps = [v for s, _, n, v in want["metrics"] if n == metrics.SAMPLER_GAP_MEAN]
    assert len(gaps) == 2 and all(0 <= v < 1e-4 for v in gaps), gaps
    # The frozen weights never moved: the final checkpoint's base layers are the lab base's.
    final = tmp_path / "ckpt" / "straight" / "step-2"
    model, _ = load_policy(str(final), torch.device("cpu"), torch.float32, False)
    base_dir = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    base, _ = load_policy(base_dir, torch.device("cpu"), torch.float32, False)
    q, q0 = model.model.layers[0].self_attn.q_proj, base.model.layers[0].self_attn.q_proj
    assert torch.equal(q.base_layer.weight, q0.weight)
    assert not torch.equal(dict(serving_weights(model))["model.layers.0.self_attn.q_proj.weight"], q0.weight)


@pytest.mark.slow
def test_eval_and_from_work_on_a_lora_run(tmp_path):
    first = lora_run(tmp_path, "first", "loop.n_grpo_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = tmp_path / "ckpt" / "first" / "step-1"
    db = f"--db={tmp_path / 'registry.db'}"
    evaluated = invoke("eval", str(ckpt), "--subset", "4", db, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    from grpoctl.registry import Registry

    with Registry(str(tmp_path / "registry.db"), must_exist=True, readonly=True) as registry:
        run = registry.get_run("first")
        evals = registry.evals(run.id)
        assert [e.step for e in evals].count(1) == 2  # the run's own eval of step 1, and grpoctl eval's
        ours, its_own = (e for e in evals if e.step == 1)
        assert ours.accuracy == its_own.accuracy and ours.n == its_own.n  # the same policy, greedy
    child = invoke("train", "--from", "first", "model.lora.rank=2", "name=child", db, cwd=tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    with Registry(str(tmp_path / "registry.db"), must_exist=True, readonly=True) as registry:
        config = json.loads(registry.get_run("child").config)
    assert config["model"]["lora"] == {**json.loads(run.config)["model"]["lora"], "rank": 2}
    assert (tmp_path / "ckpt" / "child" / "step-1" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_the_gap_shows_a_sampler_left_on_old_weights(tmp_path, monkeypatch):
    """Full fine-tuning, with a backend that samples from a copy of the initial policy and
    is never synced: step 1's rollouts come from the trainer's weights, step 2's do not."""
    from grpoctl.train import trainer

    def stale_backend(cfg, model, tokenizer, model_dir, say=print):
        return HFRolloutBackend(copy.deepcopy(model), tokenizer)  # its own weights: sync_weights is a no-op

    monkeypatch.setattr(trainer, "make_backend", stale_backend)
    args = lab_overrides("lab", tmp_path, **SMALL) + ["name=stale"]
    out = invoke("train", "lab", *args, f"--db={tmp_path / 'registry.db'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    gap = {s: v for s, _, n, v in rows(tmp_path / "registry.db", "stale")["metrics"] if n == metrics.SAMPLER_GAP_MEAN}
    assert gap[1] < 1e-4 and gap[2] > 100 * max(gap[1], 1e-6), gap


def test_the_estimate_prices_the_adapter_alone():
    """The 24 GB LoRA preset by hand: Qwen2.5-Math-1.5B (P parameters, frozen in bf16) with a
    rank-16 adapter on its 7 linear layers per layer, trained in fp32 with plain AdamW."""
    from grpoctl.arch import KNOWN_CONFIGS, arch_from_hf_config
    from grpoctl.train.dry_run import describe_dry_run
    from grpoctl.train.memory_estimate import GiB, activation_bytes_per_token_layer, estimate_peak_memory

    qwen, P, seq = arch_from_hf_config(KNOWN_CONFIGS["Qwen/Qwen2.5-Math-1.5B"]), 1_543_714_304, 368 + 1024
    h, i, kv, r = 1536, 8960, 256, 16
    per_layer = r * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h))  # q, k and v, o, gate and up, down
    A = 28 * per_layer
    assert A == qwen.lora_params(r, ["all-linear"]) == 18_464_768
    assert qwen.lora_params(r, ["q_proj", "v_proj"]) == 28 * r * ((h + h) + (h + kv))
    cfg = load_config(str(REPO / "experiments" / "rtx4090-lora.yaml"))
    e = estimate_peak_memory(qwen, cfg, device_total_bytes=24 * GiB, prompt_tokens=368)
    assert e.dtype == "bfloat16" and e.microbatch == 1 and e.seq_len == seq
    assert e["weights"] == 2 * P  # frozen, bf16
    assert e["LoRA adapter"] == e["gradients"] == e["optimizer temporaries"] == 4 * A
    assert e["optimizer states"] == 2 * 4 * A  # AdamW m and v of the adapter, fp32
    # no checkpointing; each adapted layer keeps its input in fp32 and A's output (r values)
    adapter_saves = 4 * (3 * h + h + 2 * h + i) + 7 * 4 * r
    final = 4 * h + 2 * 2 * h + 4
    assert e["activations"] == seq * (28 * (activation_bytes_per_token_layer(qwen, 2) + adapter_saves) + final)
    assert e.total < 24 * GiB
    full = estimate_peak_memory(qwen, load_config(str(REPO / "experiments" / "rtx4090.yaml")), 24 * GiB, 368)
    assert full["gradients"] + full["optimizer states"] - e["gradients"] - e["optimizer states"] > 5.5 * GiB
    text = describe_dry_run(cfg, device_total_bytes=24 * GiB)
    assert "fits: estimated peak" in text and "LoRA adapter" in text
