"""Rollout backends: transformers `generate` everywhere, vLLM where it is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpoctl.errors import UserError
from grpoctl.rollout.base import RolloutBackend, Rollouts, SamplingSettings
from grpoctl.rules import resolve_backend, vllm_installed

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from grpoctl.config import Config
    from grpoctl.formatting import Say


def make_backend(
    cfg: Config, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_dir: str, say: Say = print
) -> RolloutBackend:
    """The backend `rollout.backend` names (auto: see grpoctl.rules.resolve_backend); says which."""
    if resolve_backend(cfg.rollout.backend, vllm_installed()) == "vllm":
        from grpoctl.rollout.vllm import VLLMRolloutBackend, vllm_available

        ok, why = vllm_available()
        if not ok:  # preflight refuses this before the run; here for callers that skip it
            raise UserError(
                f"rollout.backend={cfg.rollout.backend} chose vllm, which does not import here ({why}); "
                "use rollout.backend=hf"
            )
        say("rollout backend: vllm (colocated with the policy)")
        return VLLMRolloutBackend(model_dir, cfg)
    from grpoctl.rollout.hf import HFRolloutBackend

    if cfg.rollout.backend == "auto":
        say("rollout backend: hf (vllm is not installed)")
    return HFRolloutBackend(model, tokenizer, batch_size=cfg.rollout.generation_batch_size)


__all__ = ["RolloutBackend", "Rollouts", "SamplingSettings", "make_backend"]
