"""Shared fixtures: a tiny random model directory and the fast-run config.

Nothing here downloads anything: the model is built in-process as an ordinary Hugging
Face directory (Qwen2 architecture, byte-level tokenizer), like the embedded default.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from grpoctl.tiny.model import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny-model") / "model", seed=0)


def fast_overrides(model_dir: Path, workdir: Path, **extra) -> list[str]:
    """A run small enough for a unit test: seconds on one CPU thread."""
    values = {
        "model.path": str(model_dir),
        "loop.n_grpo_steps": 3,
        "rollout.rollout_batch_size": 16,
        "rollout.group_size": 4,
        "loop.train_batch_size": 16,
        "loop.gradient_accumulation_steps": 2,
        "rollout.min_tokens": 1,
        "rollout.max_tokens": 12,
        "eval.max_tokens": 12,
        "eval.subset": 16,
        "eval.every": 2,
        "checkpoint.every": 2,
        "checkpoint.dir": str(workdir / "ckpt"),
        "runtime.cache_dir": str(workdir / "cache"),
        "runtime.threads": 1,
        "logging.live": "false",
        "optimizer.lr": 1e-3,
        "optimizer.warmup_steps": 0,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


def grpoctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "grpoctl", *args]
