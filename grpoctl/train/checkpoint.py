"""Checkpoints: a Hugging Face model directory plus what the trainer needs to resume.

`step-N/` holds config.json, safetensors and the tokenizer (loadable by anything that
loads Qwen, `grpoctl eval` and vLLM included) and `trainer_state.pt`: the run's
TrainState (train/state.py: step, optimizer step, data position, eval accuracies) with the
optimizer's, the scheduler's and the RNGs' states beside it (torch's CPU generator,
Python's, and each CUDA device's where CUDA is present), so `grpoctl train --resume RUN`
continues where the run stopped. Files written before TrainState existed hold its first
fields under the same names, and load; files written before the CUDA states were saved
load too.

What "continues where it stopped" means depends on the device. On CPU a resumed run's
rows are bit-identical to those of a run never stopped (tests/test_resume_v0.py,
tests/test_registry_resume.py): same data, same draws, same deterministic kernels. On a
GPU the same data and generator states come back, but CUDA kernels are not deterministic
(atomic adds in backward passes, cuBLAS and attention reductions whose order depends on
the launch), and vLLM's own sampling keeps no state a checkpoint holds: a resumed run is
a statistically equivalent continuation, not the same numbers. Retention keeps the last
`keep_last` and the best `keep_best` by eval accuracy: a 1.5B-parameter checkpoint is
several GB.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from grpoctl.errors import UserError
from grpoctl.train.faults import fault_point
from grpoctl.train.state import TrainState

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from grpoctl.config import RunConfig

log = logging.getLogger("grpoctl")

STATE_FILE = "trainer_state.pt"
RUN_FILE = "grpoctl_run.json"  # lets `grpoctl eval CKPT_DIR` link its result to the run


@dataclass
class SavedTrainer:
    """What trainer_state.pt holds: the run's state and the state dicts to restore beside it."""

    state: TrainState
    optimizer: dict
    scheduler: dict
    rng: dict  # torch's, Python's and the CUDA devices' generators (capture_rng)


def checkpoint_dir(cfg: RunConfig, run_name: str) -> Path:
    """Where a run's checkpoints go: one folder per run under checkpoint.dir."""
    return Path(cfg.checkpoint.dir) / run_name.replace("/", "_")


def capture_rng() -> dict:
    """The generators' states: torch's (CPU), Python's, and where CUDA is present each CUDA
    device's ("cuda": the transformers sampler and dropout draw from it on a GPU)."""
    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict) -> None:
    """Put back what capture_rng took. A state without "cuda" (written on CPU, or before
    CUDA states were saved) leaves the CUDA generators as seeded at start; CUDA states
    without CUDA here are skipped; with fewer devices here, each device present gets its own."""
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    cuda_states = rng.get("cuda")
    if cuda_states is None or not torch.cuda.is_available():
        if cuda_states is None and torch.cuda.is_available():
            log.info(
                "this checkpoint holds no CUDA generator state: CUDA draws after it differ from the original run's"
            )
        return
    for device, state in enumerate(cuda_states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(state, device)


class CheckpointWriteError(Exception):
    """A checkpoint could not be written (a full disk, a read-only directory): one line."""


def save_checkpoint(
    path: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, saved: SavedTrainer, run_name: str
) -> Path:
    state = saved.state
    tmp = path.with_name(path.name + ".tmp")
    fault_point("checkpoint-write", state.step)
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        # One flat dict, as the first trainer_state.pt files were.
        torch.save(
            {**asdict(state), "optimizer": saved.optimizer, "scheduler": saved.scheduler, "rng": saved.rng},
            tmp / STATE_FILE,
        )
        (tmp / RUN_FILE).write_text(json.dumps({"run": run_name, "step": state.step}))
        fault_point("checkpoint-rename", state.step)
        # Renamed into place only when complete: a kill mid-save never leaves a torn checkpoint.
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(f"cannot write the step {state.step} checkpoint at {path}: {exc}") from exc
    return path


def load_trainer_state(path: Path) -> SavedTrainer:
    file = Path(path) / STATE_FILE
    try:
        data = torch.load(file, map_location="cpu", weights_only=False)
        state = TrainState(**{f.name: data[f.name] for f in fields(TrainState) if f.name in data})
        saved = SavedTrainer(state, optimizer=data["optimizer"], scheduler=data["scheduler"], rng=data["rng"])
    except Exception as exc:  # truncated, not a torch file, another version's fields
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"{file} is unreadable ({type(exc).__name__}: {first[:200]})") from None
    state.last_checkpoint_step = state.step  # it is this checkpoint (older files do not say)
    return saved


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint at `path` cannot be resumed from (its files missing or
    corrupt), or None when it looks whole. Reads headers, not the weights."""
    from grpoctl.train.setup import check_model_dir

    path = Path(path)
    if not path.is_dir():
        return f"{path} does not exist"
    try:
        check_model_dir(path)
    except UserError as exc:
        return str(exc)
    state = path / STATE_FILE
    if not state.is_file() or state.stat().st_size == 0:
        return f"{state} is {'empty' if state.is_file() else 'missing'}"
    return None


def pick_resume_checkpoint(checkpoints: list, run_name: str, skip_missing: bool = False) -> tuple:
    """The checkpoint to resume from: the newest one, whose files must be whole; with
    `skip_missing`, the newest one whose files are. Returns it with the (step, why)
    of each newer one skipped; refuses in one line that names the step whose files are gone."""
    if not checkpoints:
        raise UserError(f"run '{run_name}' has no checkpoint to resume from (it stopped before its first one)")
    skipped: list[tuple[int, str]] = []
    for checkpoint in sorted(checkpoints, key=lambda c: c.step, reverse=True):
        problem = checkpoint_problem(Path(checkpoint.path))
        if problem is None:
            if skipped and not skip_missing:
                step, why = skipped[0]
                raise UserError(
                    f"run '{run_name}': the files of its step {step} checkpoint are missing or damaged "
                    f"({why}); `--skip-missing-checkpoints` resumes from step {checkpoint.step} instead"
                )
            return checkpoint, skipped
        skipped.append((checkpoint.step, problem))
    steps = ", ".join(str(step) for step, _ in skipped)
    which = f"checkpoints (steps {steps}) are" if len(skipped) > 1 else f"step {steps} checkpoint are"
    raise UserError(
        f"run '{run_name}': the files of its {which} missing or damaged ({skipped[0][1]}) "
        f"and no older one is left: start again with `grpoctl train --from {run_name}`"
    )


def run_of_checkpoint(path: Path) -> dict | None:
    """{'run': name, 'step': N} for a checkpoint grpoctl wrote, else None."""
    marker = Path(path) / RUN_FILE
    if not marker.exists():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise UserError(
            f"{marker} is unreadable ({str(exc).splitlines()[0]}): delete it to evaluate the "
            "checkpoint as an unknown model"
        ) from None
    if not (isinstance(data, dict) and isinstance(data.get("run"), str) and isinstance(data.get("step"), int)):
        raise UserError(
            f"{marker} does not name a run and step: delete it to evaluate the checkpoint as an unknown model"
        )
    return data


def select_for_deletion(checkpoints: list, keep_last: int, keep_best: int) -> list:
    """Checkpoints (objects with .step and .eval_accuracy) that retention removes.

    The newest is always kept, whatever keep_last says: it is what --resume needs.
    """
    by_step = sorted(checkpoints, key=lambda c: c.step)
    keep = {id(c) for c in by_step[-max(keep_last, 1) :]}
    scored = [c for c in by_step if c.eval_accuracy is not None]
    for c in sorted(scored, key=lambda c: (-c.eval_accuracy, -c.step))[:keep_best]:
        keep.add(id(c))
    return [c for c in by_step if id(c) not in keep]
