"""Rollout backends: transformers `generate` everywhere, vLLM where it imports."""

from __future__ import annotations

from grpoctl.errors import UserError
from grpoctl.rollout.base import RolloutBackend, Rollouts, SamplingSettings


def make_backend(cfg, model, tokenizer, model_dir: str, say=print) -> RolloutBackend:
    """`rollout.backend`: auto takes vLLM when it imports, else transformers; says which."""
    choice = cfg.rollout.backend
    if choice in ("auto", "vllm"):
        from grpoctl.rollout.vllm import VLLMRolloutBackend, vllm_available

        ok, why = vllm_available()
        if ok:
            say("rollout backend: vllm (colocated with the policy)")
            return VLLMRolloutBackend(model_dir, cfg)
        if choice == "vllm":
            raise UserError(f"rollout.backend=vllm but vllm is unavailable ({why}); use rollout.backend=hf or auto")
        say(f"rollout backend: hf (vllm unavailable: {why})")
    from grpoctl.rollout.hf import HFRolloutBackend

    return HFRolloutBackend(model, tokenizer, batch_size=cfg.rollout.generation_batch_size)


__all__ = ["RolloutBackend", "Rollouts", "SamplingSettings", "make_backend"]
