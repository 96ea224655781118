"""What every rollout backend (transformers, vLLM) takes and returns.

The trainer trains on the token ids the backend returned, never on re-tokenized text: a
decode/encode round trip does not give back the same ids for BPE tokenizers, and the
log-probs must be those of the sequence that was actually sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0
    top_p: float = 1.0
    min_tokens: int = 4
    max_tokens: int = 32
    stop: tuple[str, ...] = ("</answer>",)
    greedy: bool = False

    def as_dict(self) -> dict:
        return {
            "temperature": 0.0 if self.greedy else self.temperature,
            "top_p": self.top_p,
            "min_tokens": self.min_tokens,
            "max_tokens": self.max_tokens,
            "stop": list(self.stop),
            "greedy": self.greedy,
        }


@dataclass
class Rollouts:
    """`n` completions per prompt, grouped: rows i*n .. i*n+n-1 belong to prompt i.

    response_ids end at the stop string or EOS (both kept) and hold no padding.
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    response_texts: list[str]
    # True where generation ended because of max_tokens rather than a stop string or EOS.
    truncated: list[bool] = field(default_factory=list)
    # Log-prob of each response token under the distribution it was drawn from (after
    # temperature and top-p), where the backend reports it: what TIS compares the
    # trainer's log-probs with (loss.tis_cap). Same shape as response_ids.
    sampled_log_probs: list[list[float]] | None = None

    def __len__(self) -> int:
        return len(self.response_ids)


class RolloutBackend(Protocol):
    name: str

    def generate(self, prompts: list[str], n: int, sampling: SamplingSettings, seed: int) -> Rollouts:
        """Sample `n` completions for each prompt."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> float:
        """Make the backend sample from `model`'s current weights; returns seconds spent."""
        ...

    def before_training(self) -> None:
        """Free what generation holds (vLLM sleep mode) before the policy's backward pass."""
        ...

    def memory_pool_bytes(self) -> int:
        """Bytes PyTorch's CUDA allocator counts for the backend's own memory pool (vLLM in
        sleep mode), which train/memory.py leaves out of the mem/ figures; 0 without one."""
        ...

    def close(self) -> None: ...
