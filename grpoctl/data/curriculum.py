"""A curriculum by level: training problems drawn level by level, weighted towards the
levels whose groups carry signal (`data.curriculum.*`).

GRPO learns only from a group whose rewards differ (a mixed group). A level the policy
always solves, or never does, gives groups whose rewards are all equal, and its prompts
teach nothing. So the sampler keeps a running pass rate p per level, and weighs each level
by the share of its groups expected to be mixed. For groups of G rollouts that pass
independently with chance p, that share is

    s(p) = 1 - p^G - (1 - p)^G              (0 at p = 0 and p = 1, highest at p = 1/2)

and the weights, over the L levels of the training data, are

    w_l = u / L + (1 - u) * s(p_l) / sum_k s(p_k)

with u = `uniform_share`: an even share that keeps every level drawn now and then, so the
pass rate of a level that was solved keeps up with a policy that forgets it. A level not
seen yet counts s = 1 (as much signal as a level can have), so every level is tried early;
when every s is 0 (each level solved, or failed, every time) the weights are even.

Pass rates: after each step, for each level drawn in it, p <- decay * p + (1 - decay) * m,
m the step's mean pass over that level's rollouts (a level's first step sets p to m). A
rollout's pass is its answer grade in [0, 1] (answer_reward), whatever a reward plugin adds.

Draws: the b-th batch (b = 0, 1, ...) picks the level of each of its k problems with
`random.Random(f"grpoctl-curriculum:{seed}:{b}").choices(levels, weights, k=k)`, and takes
each problem from that level's own PromptStream (its problems reshuffled every epoch), in
draw order. Every draw is so a pure function of the seed and the state: the batches drawn,
each level's stream position and each pass rate (`state()`, a plain dict the checkpoint
holds; `restore(state)` puts it back, None for the start).

A step's outcomes (`observe`) are held until `commit()`, when the step is recorded: every
draw of a step uses the weights of its start (dynamic sampling's rounds too), and a step
abandoned before it is recorded leaves no trace once restored.

(A per-prompt pass rate would never fire on the lab or MATH: a run sees each problem well
under once, so it tracks levels.)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from grpoctl.data.examples import Example
from grpoctl.data.stream import PromptStream


def mixed_group_share(pass_rate: float, group_size: int) -> float:
    """The chance that a group of `group_size` rollouts, each passing with `pass_rate`, is mixed."""
    return 1.0 - pass_rate**group_size - (1.0 - pass_rate) ** group_size


def level_weights(pass_rates: dict[int, float | None], group_size: int, uniform_share: float) -> dict[int, float]:
    """Each level's weight (they sum to 1) from its pass rate (None: not seen yet), as the
    module's docstring says."""
    signal = {level: 1.0 if p is None else mixed_group_share(p, group_size) for level, p in pass_rates.items()}
    total, even = sum(signal.values()), 1.0 / len(signal)
    if total <= 0.0:
        return dict.fromkeys(signal, even)
    return {level: uniform_share * even + (1.0 - uniform_share) * s / total for level, s in signal.items()}


class LevelCurriculum:
    """The training prompts by level, with the PromptStream's `position` and `next_batch`."""

    def __init__(self, examples: Sequence[Example], seed: int, group_size: int, decay: float, uniform_share: float):
        by_level: dict[int, list[Example]] = {}
        for example in examples:
            if example.level is None:
                raise ValueError(f"problem {example.id} has no level")
            by_level.setdefault(example.level, []).append(example)
        if not by_level:
            raise ValueError("cannot draw a curriculum from an empty dataset")
        self.levels = sorted(by_level)
        self.seed, self.group_size, self.decay, self.uniform_share = seed, group_size, decay, uniform_share
        # Each level its own shuffle (levels are under 1000: data/records.py reads at most 3 digits).
        self.streams = {level: PromptStream(by_level[level], seed=seed * 1000 + level) for level in self.levels}
        self.batches = 0  # batches drawn so far: the next one's draw is seeded by its index
        self.pass_rates: dict[int, float | None] = {}  # level -> running pass rate; None: not seen yet
        self.pending: dict[int, tuple[float, int, int]] = {}  # level -> (sum of passes, rollouts, problems)
        self.restore(None)

    @property
    def position(self) -> int:
        """Problems handed out since the start, over every level."""
        return sum(stream.position for stream in self.streams.values())

    def weights(self) -> dict[int, float]:
        """The weights the next batch is drawn with."""
        return level_weights(self.pass_rates, self.group_size, self.uniform_share)

    def next_batch(self, k: int) -> list[Example]:
        """The next k problems, each level drawn by the current weights."""
        weights = self.weights()
        rng = random.Random(f"grpoctl-curriculum:{self.seed}:{self.batches}")
        drawn = rng.choices(self.levels, [weights[level] for level in self.levels], k=k)
        self.batches += 1
        return [self.streams[level].next_batch(1)[0] for level in drawn]

    def observe(self, examples: Sequence[Example], passes: Sequence[float]) -> None:
        """Note a step's outcomes: `passes` holds each rollout's pass (in [0, 1]), the
        rollouts of `examples[i]` being passes[i * G:(i + 1) * G]."""
        group = len(passes) // max(len(examples), 1)
        if group * len(examples) != len(passes):
            raise ValueError(f"{len(passes)} rollouts do not split into groups of {len(examples)} problems")
        for i, example in enumerate(examples):
            level = self._level_of(example)
            total, rollouts, problems = self.pending.get(level, (0.0, 0, 0))
            self.pending[level] = (total + sum(passes[i * group : (i + 1) * group]), rollouts + group, problems + 1)

    def _level_of(self, example: Example) -> int:
        level = example.level
        if level is None or level not in self.streams:
            raise ValueError(f"problem {example.id} is not of this curriculum's levels {self.levels}")
        return level

    def step_outcomes(self) -> dict[int, tuple[float, int]]:
        """(mean pass of its rollouts, problems) of each level observed since the last commit."""
        return {
            level: (total / rollouts, problems)
            for level, (total, rollouts, problems) in sorted(self.pending.items())
            if rollouts
        }

    def commit(self) -> None:
        """Fold the observed outcomes into the running pass rates (a recorded step's end)."""
        for level, (mean, _) in self.step_outcomes().items():
            old = self.pass_rates[level]
            self.pass_rates[level] = mean if old is None else self.decay * old + (1.0 - self.decay) * mean
        self.pending = {}

    def state(self) -> dict:
        """What a checkpoint holds to draw on exactly as an uninterrupted run would."""
        return {
            "batches": self.batches,
            "positions": {level: stream.position for level, stream in self.streams.items()},
            "pass_rates": dict(self.pass_rates),
        }

    def restore(self, state: dict | None) -> None:
        """Back to `state` (from `state()`), or to the start for None; outcomes not committed are dropped."""
        state = state or {}
        positions = state.get("positions", {})
        for level, stream in self.streams.items():
            stream.seek(int(positions.get(level, 0)))
        saved = state.get("pass_rates", {})
        self.pass_rates = {level: saved.get(level) for level in self.levels}
        self.batches = int(state.get("batches", 0))
        self.pending = {}
