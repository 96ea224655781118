"""Everything a run's steps use, loaded once before the first (train/trainer.py: prepare).

The GRPO step (train/step.py) reads its inputs from here and advances `state`, the one
object a checkpoint stores.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpoctl.data.curriculum import LevelCurriculum
from grpoctl.train.state import TrainState

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from grpoctl.config import Config
    from grpoctl.data import PromptStream
    from grpoctl.data.run_data import RunData
    from grpoctl.grpo import PolicyGradientLoss
    from grpoctl.registry import Registry, Run
    from grpoctl.rollout import RolloutBackend
    from grpoctl.train.memory import MemoryTracker
    from grpoctl.train.progress import Progress
    from grpoctl.train.stop import StopRequest


@dataclass
class RunContext:
    cfg: Config  # the run's resolved, validated config, typed (config.typed_config)
    registry: Registry
    model: PreTrainedModel  # the policy, trained in place
    tokenizer: PreTrainedTokenizerBase
    ref_model: PreTrainedModel | None  # the initial policy, frozen, for loss.kl_beta > 0; else None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loss: PolicyGradientLoss  # cfg.loss, built once
    backend: RolloutBackend  # samples from the policy (hf or vLLM)
    data: RunData  # train problems, the eval subset, the template
    stream: PromptStream | LevelCurriculum  # the training prompts, in a resumable order
    memory: MemoryTracker
    progress: Progress
    # What the policy's (and the KL reference's) forward passes run under: bf16 autocast for
    # model.dtype=bf16-mixed, else nothing (train/setup.py: pick_autocast).
    autocast: Callable[[], AbstractContextManager] = nullcontext
    state: TrainState = field(default_factory=TrainState)
    run: Run | None = None  # the registry's row, once created (start) or claimed (resume)
    stop: StopRequest | None = None  # the signal handling of the outer loop, while it runs

    @property
    def curriculum(self) -> LevelCurriculum | None:
        """The level curriculum the prompts are drawn by (data.curriculum.enabled), else None."""
        return self.stream if isinstance(self.stream, LevelCurriculum) else None

    def rewind_stream(self) -> None:
        """The prompts back where the last recorded step left them (`state`), the
        curriculum's pass rates with them: on resume, and when a step is abandoned."""
        stream = self.stream
        if isinstance(stream, LevelCurriculum):
            stream.restore(self.state.curriculum)
        else:
            stream.seek(self.state.data_position)

    @property
    def row(self) -> Run:
        """The registry's row: every step runs after start() created it or resume() claimed it."""
        if self.run is None:
            raise RuntimeError("this run has no registry row yet")
        return self.run

    @property
    def run_id(self) -> int:
        """The registry row's id (a stored row always has one)."""
        run_id = self.row.id
        if run_id is None:
            raise RuntimeError("this run's registry row is not stored")
        return run_id
