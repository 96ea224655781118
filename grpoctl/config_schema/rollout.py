"""The rollout's keys: how vLLM or HF generates a group of responses per prompt.

Part of the config tree; grpoctl/config_schema/__init__.py says how the tree works.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoctl.config_keys import (
    BACKENDS,
    key,
    section,
)


@dataclass
class VLLMConfig:
    """The vLLM rollout backend."""

    gpu_memory_utilization: float = key(0.3, "share of the GPU vLLM may take", range="(0, 1]")
    enable_prefix_caching: bool = key(True, "reuse a group's shared prompt")
    sleep_mode: bool = key(True, "free vLLM's memory during training (CUDA only; off on CPU, with one logged line)")
    # Level 2 is safe for grpoctl: every wake-up is followed by a push of every parameter
    # (VLLMRolloutBackend.sync_weights), and vLLM restores its buffers itself.
    sleep_level: int = key(
        1,
        "1: offload the weights to host memory while asleep; 2: discard them (grpoctl pushes every parameter "
        "after waking), which saves their size in host memory (the GPU presets)",
        range="[1, 2]",
    )
    max_model_len: int = key(
        2048,
        "longest prompt + response; a problem whose prompt leaves no room is dropped at load (counted in runs show)",
        range="[1, inf)",
    )
    cpu_kvcache_space_gb: float = key(1.0, "KV cache size on CPU", range="(0, inf)")
    # torch.compile at engine start costs ~22 s on CPU even for the tiny models (9 s when
    # its cache is warm), against ~2 s eager; steps then run eager. The tests' engines use it.
    enforce_eager: bool = key(
        False, "skip torch.compile and CUDA graphs: the engine starts in seconds, steps may be slower", neutral=True
    )


@dataclass
class RolloutConfig:
    """Sampling the rollouts."""

    backend: str = key("hf", "hf | vllm | auto (vllm when installed)", choices=BACKENDS, aliases=("backend",))
    rollout_batch_size: int = key(256, "completions per GRPO step", range="[1, inf)", aliases=("rollout_batch_size",))
    group_size: int = key(
        8,
        "completions per prompt",
        range="[2, inf)",
        note="advantages compare the rollouts of a group, so at least 2",
        aliases=("group_size",),
    )
    temperature: float = key(1.0, "sampling temperature", range="(0, inf)", aliases=("temperature",))
    top_p: float = key(1.0, "nucleus sampling", range="(0, 1]")
    min_tokens: int = key(4, "fewest new tokens", range="[0, inf)")
    max_tokens: int = key(32, "most new tokens", range="[1, inf)")
    stop: list[str] = key(["</answer>"], "stop strings (kept in the response)", non_empty=True)
    # Bounds the transformers backend's KV cache on a GPU.
    generation_batch_size: int = key(256, "sequences per generate call (hf backend)", range="[1, inf)")
    # train/dynamic_sampling.py says how a batch still short at the cap is trained.
    dynamic_sampling: bool = key(
        False,
        "DAPO's dynamic sampling: drop groups whose rewards are all equal, draw more prompts to fill the batch",
        neutral=True,
    )
    dynamic_sampling_max_rounds: int = key(
        10, "at most this many rounds of prompts per step (dynamic_sampling)", range="[1, inf)", neutral=True
    )
    # vLLM releases monthly; grpoctl reads and tests a range of them (rules.VLLM_RANGE).
    allow_untested_vllm: bool = key(
        False,
        "run a vLLM newer than the tested range (pyproject.toml's gpu extra); an older one is always refused",
        neutral=True,
    )
    vllm: VLLMConfig = section(VLLMConfig)
