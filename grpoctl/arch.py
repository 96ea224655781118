"""A model's shape, read from its Hugging Face config.json (never its weights).

What the memory estimate (train/memory_estimate.py) prices and the thread rule
(threads.py) counts: sizes from a model directory, the local hub cache, or the
published configs below, so that a dry run of the GPU presets works before the download.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl.config import to_dict
from grpoctl.config_keys import LORA_ALL_LINEAR
from grpoctl.errors import UserError
from grpoctl.tiny.lab_recipe import LAB_SIZES, LAB_VOCAB, is_lab_path

if TYPE_CHECKING:
    from grpoctl.config_schema import TinyModelConfig


@dataclass(frozen=True)
class Arch:
    """The sizes that decide memory, read from a Hugging Face config."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = True  # Qwen2 has biases on q, k and v
    head_dim: int | None = None  # None: hidden_size / num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * (self.head_dim or self.hidden_size // self.num_attention_heads)

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * (self.head_dim or self.hidden_size // self.num_attention_heads)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer, by its module name."""
        h, i, q, kv = self.hidden_size, self.intermediate_size, self.q_dim, self.kv_dim
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def lora_shapes(self, targets: list[str] | tuple[str, ...]) -> list[tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer that model.lora.targets adapts
        (`all-linear`: all of them; the LM head is never counted)."""
        shapes = self.linear_shapes()
        names = list(shapes) if list(targets) == [LORA_ALL_LINEAR] else [t for t in targets if t in shapes]
        return [shapes[name] for name in names]

    def lora_params(self, rank: int, targets: list[str] | tuple[str, ...]) -> int:
        """The adapter's parameters: A (rank x in) and B (out x rank) per adapted layer, every layer."""
        return self.num_hidden_layers * sum(rank * (i + o) for i, o in self.lora_shapes(targets))

    def num_params(self) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.qkv_bias:
            attention += self.q_dim + 2 * self.kv_dim
        layer = attention + 3 * h * i + 2 * h  # SwiGLU: gate, up, down; two RMSNorm weights
        head = 0 if self.tie_word_embeddings else v * h
        return v * h + self.num_hidden_layers * layer + h + head  # + the final norm


def arch_from_hf_config(config: dict) -> Arch:
    return Arch(
        hidden_size=config["hidden_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=config["num_attention_heads"],
        num_key_value_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
        intermediate_size=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        head_dim=config.get("head_dim"),
    )


# Published configs, so that a dry run of the GPU presets works before the download.
KNOWN_CONFIGS = {
    "Qwen/Qwen2.5-Math-1.5B": dict(
        model_type="qwen2",
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
}
TINY_VOCAB = 2 + 256  # pad, eos and one token per byte (grpoctl.tiny.model)


def arch_from_model_path(path: str, tiny: TinyModelConfig | None = None) -> Arch:
    """Sizes from config.json (a directory, the local hub cache, or KNOWN_CONFIGS); no weights read.

    "tiny" is the embedded default: pass cfg.model.tiny for its sizes.
    """
    if path == "tiny":
        if tiny is None:
            raise ValueError("model 'tiny' needs its sizes (cfg.model.tiny)")
        return arch_from_hf_config(
            {"model_type": "qwen2", "vocab_size": TINY_VOCAB, "tie_word_embeddings": True, **to_dict(tiny)}
        )
    if is_lab_path(path):
        return arch_from_hf_config(
            {"model_type": "qwen2", "vocab_size": LAB_VOCAB, "tie_word_embeddings": True, **LAB_SIZES}
        )
    local = Path(path) / "config.json"
    if local.is_file():
        return arch_from_hf_config(json.loads(local.read_text()))
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return arch_from_hf_config(json.loads(Path(cached).read_text()))
    except Exception:  # not a repo id, or no hub client: fall through
        pass
    if path in KNOWN_CONFIGS:
        return arch_from_hf_config(KNOWN_CONFIGS[path])
    raise UserError(
        f"no config.json for model '{path}': not a directory, not in the Hugging Face cache; download it first"
    )
