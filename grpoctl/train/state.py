"""Where a run is: the counters the outer loop advances, which a checkpoint stores whole.

`--resume` restores this object as it was saved, so nothing the loop relies on is
rebuilt by guesswork; the optimizer's, the scheduler's and the RNGs' states are saved
beside it (train/checkpoint.py). A field added later needs a default here: checkpoints
written before it existed load with that default.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainState:
    step: int = 0  # the last completed GRPO step (0: none yet)
    opt_step: int = 0  # optimizer steps taken so far (the per-optimizer-step metrics' index)
    data_position: int = 0  # training prompts drawn from the prompt stream so far
    best_accuracy: float | None = None  # the best eval accuracy so far (checkpoint retention keeps its step)
    last_accuracy: float | None = None  # the latest eval accuracy
    last_eval_step: int | None = None  # the step of the latest eval
    last_checkpoint_step: int | None = None  # the step of the latest checkpoint written
    # The level curriculum's draws and pass rates after the last recorded step
    # (data/curriculum.py: LevelCurriculum.state); None without a curriculum, or before its first step.
    curriculum: dict | None = None

    def record_eval(self, step: int, accuracy: float) -> None:
        self.last_accuracy, self.last_eval_step = accuracy, step
        if self.best_accuracy is None or accuracy > self.best_accuracy:
            self.best_accuracy = accuracy

    def accuracy_at(self, step: int) -> float | None:
        """The eval accuracy of `step`, if that step evaluated."""
        return self.last_accuracy if self.last_eval_step == step else None
