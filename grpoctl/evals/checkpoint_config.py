"""The config `grpoctl eval CKPT_DIR` evaluates with: the run's own, with its flags over it.

A checkpoint that a grpoctl run wrote is evaluated as that run evaluated itself (its eval
data, template, decoding and subset), with the built-in grader alone; each flag given
replaces one setting. A checkpoint that no known run wrote gets the defaults.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from grpoctl import config as C
from grpoctl.rules import grader_reward, reward_for_template

DEFAULT_SUBSET = 1024  # problems, when neither --subset nor a run says


@dataclass(frozen=True)
class EvalFlags:
    """`grpoctl eval`'s flags; None means the run's own setting (else the default)."""

    subset: int | None = None
    data: str | None = None
    source: str | None = None
    prompt: str | None = None
    seed: int | None = None
    greedy: bool | None = None
    max_tokens: int | None = None
    samples: int | None = None
    ks: tuple[int, ...] = ()


def checkpoint_eval_config(path: Path, run_config: dict, flags: EvalFlags) -> DictConfig:
    """The config to evaluate the model at `path` with; `run_config` is the stored config of
    the run that wrote it ({} when no run is known)."""
    base = copy.deepcopy(run_config)
    if base.get("prompt", {}).get("reward") is not None:
        # An eval grades with the built-in grader alone: the run's reward plugins are not
        # needed, and need not be found from here.
        base["prompt"]["reward"] = grader_reward(base["prompt"]["reward"], base["prompt"]["template"])
        base.get("reward", {})["components"] = []
    _headline_set_only(base, flags.data, flags.subset)
    values = _flag_values(path, flags, run_known=bool(run_config), run_subset=base.get("eval", {}).get("subset"))
    overrides = [f"{key}={value}" for key, value in values.items()]
    return C.apply_overrides(C.from_dict(base) if base else C.load_config(None, []), overrides)


def _flag_values(path: Path, flags: EvalFlags, run_known: bool, run_subset: int | None) -> dict[str, object]:
    """The settings the flags replace, by dotted key."""
    values: dict[str, object] = {"model.path": path}
    if flags.subset is not None or not run_known:
        values["eval.subset"] = flags.subset if flags.subset is not None else DEFAULT_SUBSET
    if flags.seed is not None:
        values["eval.subset_seed"] = flags.seed
    if flags.prompt:
        values["prompt.template"] = flags.prompt
        reward = reward_for_template(flags.prompt)  # a template file keeps the run's reward
        if reward:
            values["prompt.reward"] = reward
    # The eval data only: the run's training data is neither needed nor read.
    if flags.data:
        values["data.eval_source"] = flags.source or ("gsm8k" if "gsm8k" in Path(flags.data).name.lower() else "math")
        values["data.eval_path"] = flags.data
    elif flags.source:
        values["data.eval_source"] = flags.source
    if flags.greedy is not None:
        values["eval.greedy"] = str(flags.greedy).lower()
    if flags.max_tokens is not None:
        values["eval.max_tokens"] = flags.max_tokens
    if flags.samples is not None:
        # Every problem of the eval subset is sampled: --subset sizes both.
        values["eval.sampled.n"] = flags.samples
        values["eval.sampled.k"] = f"[{','.join(map(str, flags.ks))}]"
        values["eval.sampled.subset"] = flags.subset if flags.subset is not None else (run_subset or DEFAULT_SUBSET)
    return values


def _headline_set_only(base: dict, data: str | None, subset: int | None) -> None:
    """A run with several eval sets (eval.sets) is evaluated on its headline set, the first;
    --data evaluates on that file instead (data.eval_*), and --subset sizes the set."""
    sets = base.get("eval", {}).get("sets") or []
    if not sets:
        return
    if data:
        base["eval"]["sets"] = []
        return
    first = dict(sets[0])
    if subset is not None:
        first.pop("subset", None)  # eval.subset, set from --subset, sizes it
    base["eval"]["sets"] = [first]
