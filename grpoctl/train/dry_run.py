"""`grpoctl train --dry-run`: what a run would do, without loading a model.

The resolved config, the sizes it implies (prompts per step, microbatch, optimizer steps
per GRPO step), the memory estimate and, with the vLLM backend, the KV cache left for
rollouts and how many sequences it holds at once, with a warning when the estimate exceeds the
device: the seed's first 24 GB attempt died of OOM, which a dry run would have shown.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from grpoctl.arch import arch_from_model_path
from grpoctl.config import derived_sizes
from grpoctl.rules import resolve_backend, vllm_installed
from grpoctl.train.memory_estimate import (
    GiB,
    estimate_device,
    estimate_peak_memory,
    estimate_vllm_kv_cache,
    visible_device_bytes,
)

if TYPE_CHECKING:
    from grpoctl.config import RunConfig


def describe_dry_run(cfg: RunConfig, device_total_bytes: int | None = None) -> str:
    """Plain text: config yaml, derived sizes, memory table, and a fit verdict.

    device_total_bytes: the memory to compare with (and to size vLLM's share by);
    default: the visible device's (CUDA) or the machine's RAM (CPU).
    """
    device = estimate_device(cfg)
    if device_total_bytes is None:
        device_total_bytes = visible_device_bytes(device)
    arch = arch_from_model_path(cfg.model.path, cfg.model.tiny)
    estimate = estimate_peak_memory(arch, cfg, device_total_bytes=device_total_bytes)
    kv_cache = estimate_vllm_kv_cache(arch, cfg, device_total_bytes=device_total_bytes)

    sizes = "\n".join(f"  {key}: {value}" for key, value in asdict(derived_sizes(cfg)).items())
    out = [
        "resolved config:",
        OmegaConf.to_yaml(cfg).rstrip(),
        "",
        "derived sizes:",
        sizes,
        "",
        "memory estimate:",
        estimate.table(),
        *([kv_cache.text()] if kv_cache is not None else []),
        "",
        _verdict(cfg, estimate.total, device, device_total_bytes),
    ]
    return "\n".join(out)


def _verdict(cfg: RunConfig, peak: int, device: str, total: int | None) -> str:
    if total is None:
        return (
            f"estimated peak {peak / GiB:.1f} GiB; no {device} device visible here to compare with "
            "(pass the device's memory to check the fit)"
        )
    if peak <= total:
        return f"fits: estimated peak {peak / GiB:.1f} GiB of {total / GiB:.1f} GiB on {device}"
    vllm = resolve_backend(cfg.rollout.backend, vllm_installed()) == "vllm"
    levers = []
    if not cfg.model.gradient_checkpointing:
        levers.append("model.gradient_checkpointing=true")
    if cfg.model.logprob_chunk_tokens == 0:
        levers.append("model.logprob_chunk_tokens=512")
    if cfg.optimizer.name != "adamw8bit" and not cfg.model.lora.enabled:  # a LoRA adapter's states are small
        levers.append("optimizer.name=adamw8bit")
    if not cfg.model.lora.enabled:
        levers.append("model.lora.enabled=true (gradients and optimizer states for an adapter alone)")
    if vllm and not cfg.rollout.vllm.sleep_mode:
        levers.append("rollout.vllm.sleep_mode=true")
    if derived_sizes(cfg).microbatch_size > 1:
        levers.append("a smaller microbatch (raise loop.gradient_accumulation_steps)")
    levers.append("a lower rollout.vllm.gpu_memory_utilization" if vllm else "a shorter rollout.max_tokens")
    return (
        f"WARNING: estimated peak {peak / GiB:.1f} GiB exceeds the {total / GiB:.1f} GiB of this {device} device; "
        f"to shrink it: {', '.join(levers)}"
    )
