"""Reward plugins and weighted components, as the trainer scores a step's rollouts with them.

What a spec names, and how a plugin is found and checked, is grpoctl/reward_specs.py.
Here a plugin runs: in a worker process of its own (pool.py's Grader, one worker), where
`reward.timeout_s` of CPU time bounds each call whichever thread asks, and where a
plugin that hangs without computing is stopped at PLUGIN_WALL_FACTOR times that in wall
time. A call that raises, hangs, or returns something that is not a finite number (or a
dict of them) scores 0 and is counted, as a grading error or timeout
(train/grading_errors, train/grading_timeouts); the run goes on.

Built-in rewards are called in-process, as without plugins. train/format_reward and
train/answer_reward stay the built-in grade of the answers (the first built-in
component, else the evals' grader, called for them), so runs with and without plugins
read alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grpoctl.reward_specs import Component, PluginError, absolute_spec, is_plugin, load_function
from grpoctl.rewards import get_reward_fn, stats
from grpoctl.rewards.pool import Grader
from grpoctl.rewards.shared import Shared

# A plugin waiting without computing (a lock, a network call) is stopped after this many
# times reward.timeout_s of wall time; a computing one at reward.timeout_s of CPU time.
PLUGIN_WALL_FACTOR = 2.0


def component_values(value: Any) -> dict[str, float]:
    """A plugin's return value as {"reward": total, other named parts...}: a number is the
    reward; a dict's reward is its "reward" entry, else the sum of its entries. Raises
    on anything else, or on a value that is not finite."""
    if isinstance(value, bool | int | float) and not isinstance(value, complex):
        parts = {"reward": float(value)}
    elif isinstance(value, Mapping) and value:
        parts = {}
        for key, part in value.items():
            if not isinstance(key, str) or not isinstance(part, bool | int | float):
                raise TypeError(f"a reward dict maps names to numbers, got {key!r}: {type(part).__name__}")
            parts[key] = float(part)
        if "reward" not in parts:
            parts["reward"] = math.fsum(parts.values())
    else:
        raise TypeError(f"a reward is a number or a dict of numbers, got {type(value).__name__}")
    if not all(math.isfinite(v) for v in parts.values()):
        raise ValueError(f"a reward must be finite, got {parts}")
    return parts


class PluginCall:
    """A plugin's function, imported in the worker by its spec and called there:
    (response, truth, example) -> ({"reward": ..., parts...}, timed_out, error)."""

    def __init__(self, spec: str):
        self.spec = spec
        self._fn: Any = None
        self._failed: str | None = None

    def __getstate__(self) -> dict:
        return {"spec": self.spec}  # the worker imports the function itself

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def warm_up(self) -> None:
        """Import the plugin before the worker says it is ready, so its first call is not
        charged for the import; a plugin that fails to import fails each call instead."""
        try:
            self._fn = load_function(self.spec)
        except BaseException as exc:  # noqa: BLE001 - whatever the module does, the worker lives
            self._failed = str(exc)

    def __call__(self, response: str, truth: str, example: dict) -> tuple[dict[str, float], bool, bool]:
        if self._fn is None:
            self.warm_up()
        if self._fn is None:
            raise PluginError(self._failed or f"{self.spec} did not load")
        return component_values(self._fn(response, truth, example)), False, False


class RewardScorer:
    """The reward of each rollout under a run's components: their weighted sum, each
    component's value (recorded as train/reward/<name>), and the built-in grade."""

    def __init__(self, components: Sequence[Component], timeout_s: float, grader_reward: str):
        self.components = list(components)
        self._pools: dict[str, Grader] = {}
        for c in self.components:
            if is_plugin(c.spec) and c.spec not in self._pools:
                self._pools[c.spec] = Grader(
                    workers=1,
                    timeout_s=timeout_s,
                    check=PluginCall(absolute_spec(c.spec)),  # the worker finds it from anywhere
                    wall_timeout_s=PLUGIN_WALL_FACTOR * timeout_s,
                )
        builtin = [c.spec for c in self.components if not is_plugin(c.spec)]
        # The grade behind train/format_reward and train/answer_reward (and the samples').
        self._grade_with = builtin[0] if builtin else grader_reward

    def score(self, responses: Sequence[str], truths: Sequence[str], examples: Sequence[dict]) -> list[dict]:
        """One dict per rollout: reward, format_reward, answer_reward, and "components"
        ({name: value}) when there are named components or plugin parts."""
        values: dict[str, list[dict[str, float]]] = {}
        for c in self.components:
            if c.spec in values:
                continue
            if is_plugin(c.spec):
                out = self._call(c.spec, list(zip(responses, truths, examples, strict=True)))
                values[c.spec] = [v if isinstance(v, dict) else {"reward": 0.0} for v in out]
            else:
                fn = get_reward_fn(c.spec)
                values[c.spec] = [fn(r, t) for r, t in zip(responses, truths, strict=True)]
        if self._grade_with not in values:
            fn = get_reward_fn(self._grade_with)
            values[self._grade_with] = [fn(r, t) for r, t in zip(responses, truths, strict=True)]
        grades = values[self._grade_with]
        scores = []
        for i in range(len(responses)):
            total = math.fsum(c.weight * values[c.spec][i]["reward"] for c in self.components)
            parts: dict[str, float] = {}
            for c in self.components:
                got = values[c.spec][i]
                if c.name is not None:
                    parts[c.name] = got["reward"]
                if is_plugin(c.spec):  # a plugin's named parts; a built-in's are the grade's
                    for key, part in got.items():
                        if key != "reward":
                            parts[key if c.name is None else f"{c.name}.{key}"] = part
            score = {
                "reward": total,
                "format_reward": grades[i]["format_reward"],
                "answer_reward": grades[i]["answer_reward"],
            }
            if parts:
                score["components"] = parts
            scores.append(score)
        return scores

    def _call(self, spec: str, jobs: list[tuple]) -> list[Any]:
        try:
            return self._pools[spec].call_many(jobs)
        except RuntimeError:
            # Its worker would not start (the plugin's import took the process down, say):
            # every call scores 0 and counts as an error, and the run goes on.
            stats.count("errors", len(jobs))
            return [None] * len(jobs)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools = {}


_scorer: Shared[RewardScorer] = Shared(RewardScorer)


def reward_scorer(components: Sequence[Component], timeout_s: float, grader_reward: str) -> RewardScorer:
    """The process's scorer for these components (its plugin workers are started once, and
    stopped when another set of components is asked for, or at exit)."""
    return _scorer.get((tuple(components), timeout_s, grader_reward))


def close_reward_scorer() -> None:
    """Stop the plugin workers, if any."""
    _scorer.close()


def example_record(example: Any) -> dict:
    """What a plugin gets as `example`: the problem's record as a plain dict."""
    record = {name: getattr(example, name) for name in ("id", "question", "answer", "solution", "level", "subject")}
    for key, value in example.fields:
        record.setdefault(key, value)
    return record
