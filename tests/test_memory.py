"""Memory: the estimate's components derived by hand for Qwen2.5-Math-1.5B under both GPU
presets, its activation factor checked against what autograd really saves, gradient
checkpointing's equivalence on CPU, and the CPU tracker."""

import mmap

import pytest
import torch

from grpoctl.arch import KNOWN_CONFIGS, arch_from_hf_config, arch_from_model_path
from grpoctl.config import load_config
from grpoctl.train.memory import MemoryTracker
from grpoctl.train.memory_estimate import (
    GiB,
    activation_bytes_per_token_layer,
    estimate_peak_memory,
    estimate_prompt_tokens,
)

QWEN = arch_from_hf_config(KNOWN_CONFIGS["Qwen/Qwen2.5-Math-1.5B"])
P = 1_543_714_304  # parameters, derived below
SEQ = 368 + 1024  # prompt allowance + rollout.max_tokens
DEVICE_24 = 24 * GiB


def test_qwen_math_1_5b_parameter_count():
    h, i, v, kv = 1536, 8960, 151_936, 2 * 128  # kv: 2 KV heads x head_dim 128
    attention = h * h + h + 2 * (h * kv + kv) + h * h  # q (+bias), k and v (+bias), o
    layer = attention + 3 * h * i + 2 * h  # SwiGLU + two RMSNorm weights
    assert v * h + 28 * layer + h == P  # tied embeddings: no separate lm_head
    assert QWEN.num_params() == P
    assert abs(P - 1.54e9) / 1.54e9 < 0.01


def test_tiny_arch_counts_the_real_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from grpoctl.tiny.model import create_tiny_model_dir

    cfg = load_config()
    path = create_tiny_model_dir(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(path)
    real = sum(p.numel() for p in model.parameters())
    assert arch_from_model_path("tiny", cfg.model.tiny).num_params() == real
    assert arch_from_model_path(str(path)).num_params() == real


# Per token and layer, bf16 (b = 2), h = 1536, kv_dim = 256, I = 8960, 12 heads:
#   norms      2 x (4h fp32 input + 2h output) + 2 x 4 rstd            = 18,440
#   attention  2h qkv input + 2h q + 2 x 2 x 256 k,v + 2h out + 4 x 12 = 10,288
#   MLP        2h input + 4 x 2I (gate, silu, up, product)              = 74,752
LAYER = 103_480
FINAL = 4 * 1536 + 2 * 2 * 1536 + 4  # final norm (fp32 input, output) + lm_head input


def test_activation_factor_by_hand():
    assert activation_bytes_per_token_layer(QWEN, 2) == 18_440 + 10_288 + 74_752 == LAYER


def test_rtx4090_preset_components():
    cfg = load_config("experiments/rtx4090.yaml")
    e = estimate_peak_memory(QWEN, cfg, device_total_bytes=DEVICE_24, prompt_tokens=368)
    assert (e.device, e.dtype, e.microbatch, e.seq_len) == ("cuda", "bfloat16", 1, SEQ)
    assert e["weights"] == e["gradients"] == 2 * P
    assert e["optimizer states"] == int(P * (2 + 8 / 256))  # uint8 m, v + fp32 absmax per 256
    # checkpointing: 28 layer inputs (2h each) + one layer rebuilt in backward
    assert e["activations (ckpt)"] == SEQ * (28 * 2 * 1536 + LAYER + FINAL)
    assert e["logits"] == 512 * 151_936 * 8  # chunks of 512 positions: fp32 logits + one fp32 temporary
    assert e["vLLM pool"] == int(0.3 * DEVICE_24)
    assert e["vLLM asleep"] == GiB and e["runtime overhead"] == GiB
    rollout = 2 * P + int(P * (2 + 8 / 256)) + int(0.3 * DEVICE_24) + GiB
    backward = 4 * P + int(P * (2 + 8 / 256)) + SEQ * (28 * 2 * 1536 + LAYER + FINAL) + 512 * 151_936 * 8 + 2 * GiB
    assert e.phase_bytes("rollout") == rollout and e.phase_bytes("backward") == backward
    assert e.total == max(rollout, backward) < DEVICE_24  # ~12.6 GiB: fits the 24 GB card


def test_h100_preset_components():
    cfg = load_config("experiments/h100.yaml")
    e = estimate_peak_memory(QWEN, cfg, device_total_bytes=80 * GiB, prompt_tokens=368)
    assert e.microbatch == 4
    assert e["optimizer states"] == 2 * 2 * P  # AdamW m, v in bf16
    assert e["optimizer temporaries"] == 2 * P
    assert e["activations"] == 4 * SEQ * (28 * LAYER + FINAL)  # ~15 GiB
    assert e["logits"] == 1024 * 151_936 * 8  # chunks of 1024 positions
    backward = 2 * P + 2 * P + 4 * P + 4 * SEQ * (28 * LAYER + FINAL) + 1024 * 151_936 * 8 + 2 * GiB
    assert e.phase_bytes("backward") == backward  # ~29.8 GiB
    assert e.total == e.phase_bytes("rollout")  # ~33.6 GiB: vLLM's 0.3 share of 80 GiB, now the largest phase
    assert e.total < 80 * GiB
    assert estimate_peak_memory(QWEN, cfg, device_total_bytes=DEVICE_24, prompt_tokens=368).total > DEVICE_24


def test_the_logits_term_follows_logprob_chunk_tokens():
    full = load_config("experiments/h100.yaml", ["model.logprob_chunk_tokens=0", "loss.entropy_coef=0.01"])
    e = estimate_peak_memory(QWEN, full, device_total_bytes=80 * GiB, prompt_tokens=368)
    assert e["logits"] == 4 * SEQ * 151_936 * 10  # bf16 2 + fp32 upcast 4 + fp32 grad 4
    assert e["entropy bonus graph"] == 4 * SEQ * 151_936 * 8
    chunked = load_config("experiments/h100.yaml", ["model.logprob_chunk_tokens=256", "loss.entropy_coef=0.01"])
    c = estimate_peak_memory(QWEN, chunked, device_total_bytes=80 * GiB, prompt_tokens=368)
    assert c["logits"] == 256 * 151_936 * 8
    assert "entropy bonus graph" not in {x.name for x in c.components}  # rebuilt per chunk as well
    assert e.phase_bytes("backward") - c.phase_bytes("backward") == e["logits"] + e["entropy bonus graph"] - c["logits"]
    # A chunk longer than the microbatch's tokens is the microbatch.
    whole = load_config("experiments/h100.yaml", ["model.logprob_chunk_tokens=100000"])
    assert estimate_peak_memory(QWEN, whole, 80 * GiB, prompt_tokens=368)["logits"] == 4 * SEQ * 151_936 * 8


def test_without_the_tricks_the_24gb_card_overflows():
    """The seed's first attempt: defaults (no checkpointing, AdamW, no sleep) at microbatch 1."""
    cfg = load_config(
        "experiments/rtx4090.yaml",
        ["model.gradient_checkpointing=false", "optimizer.name=adamw", "rollout.vllm.sleep_mode=false"],
    )
    assert estimate_peak_memory(QWEN, cfg, device_total_bytes=DEVICE_24, prompt_tokens=368).total > DEVICE_24


def test_8bit_adamw_saves_almost_half_not_4x_and_each_precision_is_priced():
    cfg = load_config("experiments/rtx4090.yaml")
    eight = estimate_peak_memory(QWEN, cfg, DEVICE_24, prompt_tokens=368)["optimizer states"]
    cfg = load_config("experiments/rtx4090.yaml", ["optimizer.name=adamw"])
    bf16 = estimate_peak_memory(QWEN, cfg, DEVICE_24, prompt_tokens=368)
    assert 0.5 < eight / bf16["optimizer states"] < 0.52
    assert bf16["weights"] + bf16["gradients"] + bf16["optimizer states"] == 8 * P
    assert "autocast weight copies" not in {c.name for c in bf16.components}
    cfg = load_config("experiments/rtx4090.yaml", ["optimizer.name=adamw", "model.dtype=bf16-mixed"])
    mixed = estimate_peak_memory(QWEN, cfg, DEVICE_24, prompt_tokens=368)
    # fp32 weights, gradients, m and v; autocast's bf16 copy of the weights while they are in use
    assert mixed["weights"] + mixed["gradients"] + mixed["optimizer states"] == 16 * P
    assert mixed["autocast weight copies"] == 2 * P
    assert mixed["activations (ckpt)"] == bf16["activations (ckpt)"] and mixed["logits"] == bf16["logits"]
    assert mixed.phase_bytes("backward") - bf16.phase_bytes("backward") == 10 * P
    cfg = load_config("experiments/rtx4090.yaml", ["optimizer.name=adamw", "model.dtype=float32"])
    fp32 = estimate_peak_memory(QWEN, cfg, DEVICE_24, prompt_tokens=368)
    assert fp32["weights"] + fp32["gradients"] + fp32["optimizer states"] == 16 * P
    assert fp32["activations (ckpt)"] > bf16["activations (ckpt)"]  # fp32 activations: no autocast


def test_dry_run_fits_or_warns():
    from grpoctl.train.dry_run import describe_dry_run

    rtx = describe_dry_run(load_config("experiments/rtx4090.yaml"), device_total_bytes=DEVICE_24)
    assert "fits: estimated peak" in rtx and "WARNING" not in rtx
    assert "gradient_accumulation_steps: 256" in rtx and "microbatch_size: 1" in rtx
    h100 = describe_dry_run(load_config("experiments/h100.yaml"), device_total_bytes=DEVICE_24)
    assert "WARNING: estimated peak" in h100 and "model.gradient_checkpointing=true" in h100
    assert "fits" in describe_dry_run(load_config("experiments/h100.yaml"), device_total_bytes=80 * GiB)
    unchunked = load_config("experiments/h100.yaml", ["model.logprob_chunk_tokens=0"])
    assert "model.logprob_chunk_tokens=512" in describe_dry_run(unchunked, device_total_bytes=DEVICE_24)
    assert "logprob_chunk_tokens" not in h100.split("WARNING")[1]  # already on: not offered


def test_prompt_allowance():
    from grpoctl.prompts import load_template

    assert estimate_prompt_tokens(load_config()) == len(load_template("r1_zero_compact")) + 16
    assert estimate_prompt_tokens(load_config("experiments/rtx4090.yaml")) == -(-449 // 4) + 256


@pytest.mark.parametrize("dtype,b", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_activation_factor_matches_what_autograd_saves(dtype, b):
    """Count the bytes autograd keeps for backward, per token and layer, in a small Qwen2."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def saved_bytes(layers):
        config = Qwen2Config(
            vocab_size=300,
            hidden_size=256,
            intermediate_size=1024,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=layers,
            tie_word_embeddings=True,
        )
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(dtype).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                seen[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.model(torch.randint(0, 300, (2, 32)))
        return sum(seen.values())

    per_layer = (saved_bytes(3) - saved_bytes(1)) / (2 * 2 * 32)
    small = arch_from_hf_config(
        dict(
            model_type="qwen2",
            hidden_size=256,
            intermediate_size=1024,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=1,
            vocab_size=300,
        )
    )
    assert per_layer == activation_bytes_per_token_layer(small, b)


def test_gradient_checkpointing_same_loss_and_gradients():
    from grpoctl.tiny.model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    ids = torch.randint(2, len(tokenizer), (4, 24), generator=torch.Generator().manual_seed(0))
    results = []
    for ckpt in (False, True):
        model = build_model(tokenizer, seed=0).train()  # Qwen2 configs have dropout 0
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        loss = model(ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-5, atol=1e-7)


def test_cpu_tracker_reports_phase_peaks():
    tracker = MemoryTracker("cpu")
    tracker.start_step()
    # 64 MiB of fresh pages, touched (an anonymous map: torch's allocator may reuse memory
    # an earlier test in this worker left resident, and then the resident set does not grow).
    block = mmap.mmap(-1, 64 * 2**20)
    block.write(b"\1" * len(block))
    block.close()
    first = tracker.boundary("rollout")
    assert set(first) == {"mem/peak_after_rollout", "mem/reserved_after_rollout", "mem/device_free_after_rollout"}
    assert first["mem/peak_after_rollout"] >= first["mem/reserved_after_rollout"] > 0
    second = tracker.boundary("optimizer")
    assert tracker.step_peak() == max(first["mem/peak_after_rollout"], second["mem/peak_after_optimizer"])
    import sys

    if sys.platform.startswith("linux"):  # per-phase peaks: the 64 MiB block belongs to the first phase only
        assert first["mem/peak_after_rollout"] - second["mem/peak_after_optimizer"] > 32


def test_phases_time_and_measure_together_nested_and_repeated():
    import time

    from grpoctl.train.phases import Phases

    phases = Phases(MemoryTracker("cpu"))
    with phases.step():
        with phases("train"):
            for _ in range(2):  # a phase run twice in a step adds its time, keeps its highest memory
                with phases("backward"):
                    # 48 MiB of fresh pages, touched: an anonymous map, not torch's allocator,
                    # which may reuse memory an earlier test left resident (no RSS growth).
                    block = mmap.mmap(-1, 48 * 2**20)
                    block.write(b"\1" * len(block))
                    block.close()
                    time.sleep(0.01)
            with phases("optimizer"):
                pass
    m = phases.metrics
    assert m["time/backward"] >= 0.02 and m["time/train"] >= m["time/backward"] + m["time/optimizer"]
    assert m["time/step"] >= m["time/train"]
    # time/cpu is the process's CPU-seconds: the sleeps are wall time, not CPU time.
    assert 0 < m["time/cpu"] < m["time/step"] - 0.015
    for name in ("backward", "optimizer", "train"):
        assert {f"mem/{k}_after_{name}" for k in ("peak", "reserved", "device_free")} <= set(m)
    # The outer phase's peak covers the phases inside it, though the tracker was reset at each.
    assert m["mem/peak_after_train"] >= m["mem/peak_after_backward"]
    assert m["mem/peak"] == max(m[f"mem/peak_after_{n}"] for n in ("backward", "optimizer", "train"))
    import sys

    if sys.platform.startswith("linux"):
        assert m["mem/peak_after_backward"] - m["mem/peak_after_optimizer"] > 24


class FakeCuda:
    """torch.cuda's memory counters on a 24 GiB card where vLLM sleeps in its pool: PyTorch
    counts the pool's tensors as allocated and reserved, the driver sees none of it."""

    MiB = 2**20

    def __init__(self, monkeypatch, pool: int, policy_peak: int, policy_reserved: int, context: int):
        self.pool, self.total = pool, 24 * GiB
        self.peak, self.reserved = pool + policy_peak, pool + policy_reserved
        self.resets = 0
        self.used = policy_reserved + context  # asleep: the pool holds no device memory
        for name, fn in {
            "synchronize": lambda device=None: None,
            "reset_peak_memory_stats": self._reset,
            "max_memory_allocated": lambda device=None: self.peak,
            "memory_reserved": lambda device=None: self.reserved,
            "mem_get_info": lambda device=None: (self.total - self.used, self.total),
        }.items():
            monkeypatch.setattr(torch.cuda, name, fn)

    def _reset(self, device=None):
        self.resets += 1


def test_cuda_figures_leave_out_vllms_sleeping_pool_and_agree_with_the_driver(monkeypatch, caplog):
    from grpoctl.train.phases import Phases

    MiB = FakeCuda.MiB
    fake = FakeCuda(monkeypatch, pool=6 * GiB, policy_peak=10 * GiB, policy_reserved=11 * GiB, context=512 * MiB)
    tracker = MemoryTracker("cuda", memory_pool=lambda: fake.pool)
    phases = Phases(tracker)
    with caplog.at_level("WARNING", logger="grpoctl"):
        with phases.step(), phases("backward"):
            pass
    m = phases.metrics
    assert m["mem/peak_after_backward"] == m["mem/peak"] == 10 * 1024  # MiB: the policy's own
    assert m["mem/reserved_after_backward"] == 11 * 1024
    assert m["mem/device_free_after_backward"] == (24 * GiB - 11 * GiB - 512 * MiB) / MiB  # the driver's, as it is
    assert m["mem/vllm_pool"] == 6 * 1024
    assert fake.resets >= 2 and not caplog.records

    # Not told of the pool, the figures read 6 GiB high, and the driver's count gives it away.
    blind = Phases(MemoryTracker("cuda"))
    with caplog.at_level("WARNING", logger="grpoctl"):
        with blind.step(), blind("backward"), blind("optimizer"):
            pass
    assert blind.metrics["mem/peak"] == 16 * 1024 and "mem/vllm_pool" not in blind.metrics
    (warning,) = caplog.records  # once, not per phase
    assert "may read high" in warning.getMessage() and "17408 MiB" in warning.getMessage()


def test_vllm_reports_its_pool_only_with_sleep_mode(monkeypatch):
    import sys
    import types

    from grpoctl.rollout.vllm import VLLMRolloutBackend

    class FakeAllocator:  # vLLM's CuMemAllocator: a singleton counting what it mapped
        @staticmethod
        def get_instance():
            return FakeAllocator()

        def get_current_usage(self):
            return 5 * GiB

    module = types.ModuleType("vllm.device_allocator.cumem")
    module.CuMemAllocator = FakeAllocator
    monkeypatch.setitem(sys.modules, "vllm.device_allocator.cumem", module)
    backend = object.__new__(VLLMRolloutBackend)  # no engine: only the accounting is under test
    backend.sleep_mode = True
    assert backend.memory_pool_bytes() == 5 * GiB
    backend.sleep_mode = False  # no pool: vLLM then allocates as any PyTorch code does
    assert backend.memory_pool_bytes() == 0


def test_phases_turn_counted_tokens_into_throughput():
    import time

    from grpoctl.train.phases import Phases

    phases = Phases(MemoryTracker("cpu"))
    with phases.step():
        with phases("rollout"):
            time.sleep(0.01)
            phases.count_tokens("rollout", 300)
        with phases("train"):
            for _ in range(2):  # two train batches (or epochs): their tokens add up
                phases.count_tokens("train", 500)
            time.sleep(0.01)
    m = phases.metrics
    assert m["time/rollout_tokens_per_s"] == pytest.approx(300 / m["time/rollout"])
    assert m["time/train_tokens_per_s"] == pytest.approx(1000 / m["time/train"])
    with pytest.raises(ValueError, match="reward"):
        phases.count_tokens("reward", 1)


def test_the_kv_cache_left_for_rollouts_derived_by_hand():
    from grpoctl.train.memory_estimate import estimate_vllm_kv_cache

    cfg = load_config("experiments/rtx4090.yaml")
    kv = estimate_vllm_kv_cache(QWEN, cfg, DEVICE_24, prompt_tokens=368)
    per_token = 28 * 2 * (2 * 128) * 2  # layers x (K, V) x 2 KV heads of 128 x bf16
    assert kv.bytes_per_token == per_token == 28 * 1024
    share = int(0.3 * DEVICE_24)
    assert kv.cache_bytes == share - 2 * P  # the share less vLLM's bf16 weights
    assert kv.tokens == (share - 2 * P) // per_token == 161_952
    assert kv.seq_len == SEQ and kv.sequences == 161_952 // SEQ == 116
    text = kv.text()
    assert "116 sequences of 1392 tokens" in text and "256 rollouts in 3 waves" in text and "at most 4.32 GiB" in text
    # An H100's 80 GB: every rollout of a step at once
    assert "all 256 rollouts of a step at once" in estimate_vllm_kv_cache(QWEN, cfg, 80 * GiB, prompt_tokens=368).text()
    # A share smaller than the weights leaves no cache
    low = load_config("experiments/rtx4090.yaml", ["rollout.vllm.gpu_memory_utilization=0.1"])
    assert "no room for one sequence" in estimate_vllm_kv_cache(QWEN, low, DEVICE_24, prompt_tokens=368).text()
    # On CPU, cpu_kvcache_space_gb; the hf backend has none
    cpu = load_config("lab", ["rollout.backend=vllm", "rollout.vllm.cpu_kvcache_space_gb=0.25"])
    lab = arch_from_model_path("lab")
    on_cpu = estimate_vllm_kv_cache(lab, cpu, prompt_tokens=51)
    assert on_cpu.cache_bytes == GiB // 4 and on_cpu.seq_len == 51 + cpu.rollout.max_tokens
    assert estimate_vllm_kv_cache(QWEN, load_config("lab"), DEVICE_24) is None


def test_dry_run_shows_the_kv_cache():
    from grpoctl.train.dry_run import describe_dry_run

    text = describe_dry_run(load_config("experiments/rtx4090.yaml"), device_total_bytes=DEVICE_24)
    assert "vLLM KV cache: at most" in text and "sequences of" in text and "rollouts in" in text
    assert "vLLM KV cache" not in describe_dry_run(load_config("lab", ["rollout.backend=hf"]))
