"""Checkpoints: a Hugging Face model directory plus what the trainer needs to resume.

`step-N/` holds config.json, safetensors and the tokenizer (loadable by anything that
loads Qwen, `grpoctl eval` and vLLM included) and `trainer_state.pt` (optimizer, RNG
states, the data position and the step), so `grpoctl train --resume RUN` continues exactly
where the run stopped. Retention keeps the last `keep_last` and the best `keep_best` by eval
accuracy: a 1.5B-parameter checkpoint is several GB.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"
RUN_FILE = "grpoctl_run.json"  # lets `grpoctl eval CKPT_DIR` link its result to the run


@dataclass
class TrainerState:
    step: int
    opt_step: int
    data_position: int
    optimizer: dict
    scheduler: dict
    best_accuracy: float | None
    rng: dict


def checkpoint_dir(cfg, run_name: str) -> Path:
    """Where a run's checkpoints go: one folder per run under checkpoint.dir."""
    return Path(cfg.checkpoint.dir) / run_name.replace("/", "_")


def capture_rng() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def restore_rng(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])


def save_checkpoint(path: Path, model, tokenizer, state: TrainerState, run_name: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    torch.save(state.__dict__, tmp / STATE_FILE)
    (tmp / RUN_FILE).write_text(json.dumps({"run": run_name, "step": state.step}))
    # Renamed into place only when complete: a kill mid-save never leaves a torn checkpoint.
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


def load_trainer_state(path: Path) -> TrainerState:
    data = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
    return TrainerState(**data)


def run_of_checkpoint(path: Path) -> dict | None:
    """{'run': name, 'step': N} for a checkpoint grpoctl wrote, else None."""
    marker = Path(path) / RUN_FILE
    return json.loads(marker.read_text()) if marker.exists() else None


def select_for_deletion(checkpoints: list, keep_last: int, keep_best: int) -> list:
    """Checkpoints (objects with .step and .eval_accuracy) that retention removes.

    The newest is always kept, whatever keep_last says: it is what --resume needs.
    """
    by_step = sorted(checkpoints, key=lambda c: c.step)
    keep = {id(c) for c in by_step[-max(keep_last, 1):]}
    scored = [c for c in by_step if c.eval_accuracy is not None]
    for c in sorted(scored, key=lambda c: (-c.eval_accuracy, -c.step))[:keep_best]:
        keep.add(id(c))
    return [c for c in by_step if id(c) not in keep]
