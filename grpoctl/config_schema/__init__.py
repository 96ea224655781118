"""The configuration tree: every key with its type, its default and its help, once.

Every key has a typed default here, so a yaml file only says what differs (the seed's
lesson: an ablation variant is a minimal diff, easy to read and to reproduce). Key names
follow the seed and CS336 (rollout_batch_size, group_size, loss_type, ...).

The defaults are the addition task (`grpoctl train addition`): a tiny model on synthetic
2-digit addition that learns on a laptop CPU in minutes. `grpoctl train`'s own default is
the lab, a yaml diff from these (grpoctl/configs/lab.yaml). `experiments/rtx4090.yaml` and `experiments/h100.yaml` hold the
seed's GPU configurations for Qwen2.5-Math-1.5B on MATH.

Each key's help is its `help` metadata, and docs/configuration.md's table of keys is made
from it (`python scripts/config_table.py --write`; tests/test_config_table.py fails when
the two drift). Comments here say why a default is what it is. Changing a default
changes the hash of every run that did not set the key: see run_identity.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpoctl.config_keys import SEED_LIMIT, key, key_rules, section
from grpoctl.config_schema.data import CurriculumConfig, DataConfig, PromptConfig, SyntheticConfig
from grpoctl.config_schema.loop import (
    CheckpointConfig,
    EvalConfig,
    LoggingConfig,
    LoopConfig,
    RuntimeConfig,
    SampledEvalConfig,
)
from grpoctl.config_schema.model import LoraConfig, ModelConfig, TinyModelConfig, WarmStartConfig
from grpoctl.config_schema.objective import LossConfig, OptimizerConfig, RewardConfig
from grpoctl.config_schema.rollout import RolloutConfig, VLLMConfig

__all__ = [
    "TinyModelConfig",
    "WarmStartConfig",
    "LoraConfig",
    "ModelConfig",
    "SyntheticConfig",
    "CurriculumConfig",
    "DataConfig",
    "PromptConfig",
    "VLLMConfig",
    "RolloutConfig",
    "LossConfig",
    "RewardConfig",
    "OptimizerConfig",
    "LoopConfig",
    "SampledEvalConfig",
    "EvalConfig",
    "CheckpointConfig",
    "LoggingConfig",
    "RuntimeConfig",
    "Config",
    "KEY_RULES",
    "documented_keys",
]


@dataclass
class Config:
    """A run's whole configuration."""

    name: str | None = key(None, "run name; generated when unset")
    group: str | None = key(None, "sweep / ablation the run belongs to")
    variant: str | None = key(None, "the run's variant within its group")
    seed: int = key(0, "seed of sampling, shuffling and initialisation", range=f"[0, {SEED_LIMIT}]")
    model: ModelConfig = section(ModelConfig)
    data: DataConfig = section(DataConfig)
    prompt: PromptConfig = section(PromptConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    reward: RewardConfig = section(RewardConfig)
    loss: LossConfig = section(LossConfig)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    loop: LoopConfig = section(LoopConfig)
    eval: EvalConfig = section(EvalConfig)
    checkpoint: CheckpointConfig = section(CheckpointConfig)
    logging: LoggingConfig = section(LoggingConfig)
    runtime: RuntimeConfig = section(RuntimeConfig)


KEY_RULES = {k.path: k for k in key_rules(Config)}


def documented_keys() -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) of every key, in the tree's order."""
    return [(k.path, k.default, k.help) for k in key_rules(Config)]
