"""An endless, shuffled, resumable stream of training prompts.

The trainer records how many examples it has consumed (its data position); on
resume it seeks there and must get exactly the prompts an uninterrupted run would
have. So the order is a pure function of (seed, position): the examples are
reshuffled every epoch with a permutation seeded by (seed, epoch), and position p
is index p % N of epoch p // N.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from grpoctl.data.examples import Example


class PromptStream:
    def __init__(self, examples: Sequence[Example], seed: int = 0, position: int = 0):
        if not examples:
            raise ValueError("cannot stream prompts from an empty dataset")
        self.examples = list(examples)
        self.seed = seed
        self._epoch = -1  # the epoch whose permutation is cached
        self._order: list[int] = []
        self.seek(position)

    @property
    def position(self) -> int:
        """Number of examples handed out since the start (across epochs)."""
        return self._position

    @property
    def epoch(self) -> int:
        return self._position // len(self.examples)

    def seek(self, position: int) -> None:
        """Continue from `position` as if that many examples had been consumed."""
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        self._position = position

    def _permutation(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            self._order = list(range(len(self.examples)))
            random.Random(f"grpoctl-prompts:{self.seed}:{epoch}").shuffle(self._order)
            self._epoch = epoch
        return self._order

    def next_batch(self, k: int) -> list[Example]:
        """The next k examples; a batch may span two epochs."""
        if k < 0:
            raise ValueError(f"batch size must be >= 0, got {k}")
        batch = []
        for _ in range(k):
            epoch, index = divmod(self._position, len(self.examples))
            batch.append(self.examples[self._permutation(epoch)[index]])
            self._position += 1
        return batch
