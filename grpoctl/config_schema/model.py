"""The model's keys: the checkpoint or embedded shape to train, its dtype and memory tricks.

Part of the config tree; grpoctl/config_schema/__init__.py says how the tree works.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoctl.config_keys import (
    ADAMW_LR_NOTE,
    DTYPES,
    LORA_ALL_LINEAR,
    key,
    section,
)


@dataclass
class TinyModelConfig:
    """The embedded default model: a Qwen2-architecture net with a character tokenizer.

    head_dim = hidden_size / num_attention_heads = 64, which vLLM's CPU kernels accept.
    """

    hidden_size: int = key(128, "tiny model width", range="[1, inf)")
    num_hidden_layers: int = key(2, "tiny model depth", range="[1, inf)")
    num_attention_heads: int = key(2, "attention heads (head_dim = hidden_size / heads)", range="[1, inf)")
    num_key_value_heads: int = key(1, "key/value heads (grouped-query attention)", range="[1, inf)")
    intermediate_size: int = key(512, "MLP width", range="[1, inf)")


@dataclass
class WarmStartConfig:
    """Supervised warm-start of the tiny model on synthetic worked solutions (built once, cached)."""

    # At most: it stops at target_accuracy, usually after 500-900 steps.
    steps: int = key(1500, "at most this many supervised steps", range="[1, inf)")
    batch_size: int = key(32, "warm-start batch size", range="[1, inf)")
    lr: float = key(1e-3, "warm-start learning rate", range="(0, 1]", note=ADAMW_LR_NOTE)
    # GRPO needs a base that is right sometimes (too weak: no reward signal; too strong:
    # nothing to learn).
    target_accuracy: float = key(0.36, "stop once greedy accuracy on a held-out probe reaches this", range="(0, 1]")
    check_every: int = key(25, "steps between probe checks", range="[1, inf)")
    save_steps: list[int] = key(
        [100, 200], "extra checkpoints kept (`tiny@N` starts from step N: sft-init)", range="[1, inf)"
    )


# LoRA's defaults follow "LoRA without regret" (Thinking Machines, 2025): for RL a low rank
# matches full fine-tuning when every linear layer is adapted (with an lr about 10x higher).
@dataclass
class LoraConfig:
    """LoRA: train a low-rank adapter instead of the weights (peft; pip install grpoctl[lora])."""

    # Every key is hash-neutral, and run_identity.py counts them only while enabled is true.
    enabled: bool = key(False, "train a LoRA adapter on a frozen model instead of every weight", neutral=True)
    rank: int = key(16, "the adapter's rank r", range="[1, inf)", neutral=True)
    alpha: int = key(32, "LoRA's alpha: the adapter's update is scaled by alpha / rank", range="[1, inf)", neutral=True)
    targets: list[str] = key(
        [LORA_ALL_LINEAR],
        "module names to adapt (q_proj, v_proj, ...); `all-linear` = every linear layer but the LM head",
        non_empty=True,
        neutral=True,
    )
    dropout: float = key(0.0, "dropout on the adapter's input in training forwards", range="[0, 1)", neutral=True)


@dataclass
class ModelConfig:
    """The policy."""

    path: str = key(
        "tiny",
        "`tiny` = the addition task's model (built and warm-started by grpoctl); `tiny@N` = its warm-start at "
        "step N; `lab` = the lab's base, `lab-sft@N` = it after N narrow SFT steps (100, 400, 800); "
        "else a Hugging Face directory or hub id, e.g. Qwen/Qwen2.5-Math-1.5B",
        non_empty=True,
        aliases=("model",),
    )
    # Pure bf16 (auto's choice on a GPU) rounds most small updates away; bf16-mixed keeps
    # float32 master weights and AdamW states for 2x the memory of both (rules.MIXED_PRECISION).
    dtype: str = key(
        "auto",
        "auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | bf16-mixed (fp32 weights and AdamW states, "
        "forward passes under bf16 autocast)",
        choices=DTYPES,
    )
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass (the 24 GB preset)")
    # Off by default: the addition task and the lab keep their recorded numbers bit for bit.
    # At Qwen's 151,936-entry vocabulary the full fp32 logits are ~0.6 GB per 1k tokens, in
    # forward and again as their gradient; the GPU presets chunk them.
    logprob_chunk_tokens: int = key(
        0,
        "apply the LM head and log-softmax this many positions at a time, in forward and backward, so the "
        "full (tokens x vocabulary) logits never exist; 0 = off",
        range="[0, inf)",
        note="0 is off",
        neutral=True,
    )
    lora: LoraConfig = section(LoraConfig)
    tiny: TinyModelConfig = section(TinyModelConfig)
    warmstart: WarmStartConfig = section(WarmStartConfig)
