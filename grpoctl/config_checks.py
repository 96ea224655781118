"""Which config values are valid: the choices, the range of every number (one table),
and the rules that tie keys together. `validate` refuses the first problem in one line.

OmegaConf already enforces each key's type; this says which values of that type make
sense. A value outside its range (NaN and infinity included) is refused with one line
that names the key and the range, before anything runs:

    optimizer.max_grad_norm must be a finite number > 0, got -1.0

Without it, a negative max_grad_norm flips the sign of every gradient (training silently
runs uphill), betas of 1 make AdamW divide by zero, and NaN learning rates or
temperatures surface as tracebacks deep inside torch.

Intervals are written as in mathematics: `(0, 1]` excludes 0 and includes 1. Every
numeric field of the config's dataclasses must have a row here (a test checks that), so
a key added later cannot skip its check.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from grpoctl.config_schema import KEY_RULES
from grpoctl.errors import UserError
from grpoctl.metrics import PART_NAME_RE, PART_NAME_WORDS
from grpoctl.reward_specs import PluginError, is_plugin, load_function
from grpoctl.rules import (
    CHOICES,
    GENERATED_DATA_SOURCES,
    NULL_MEANS,
    PLUGIN_KEYS,
    RATIO_FREE_LOSSES,
    REWARDS,
    is_off_policy,
    reward_for_template,
)
from grpoctl.tiny.lab_recipe import is_lab_path, sft_steps_of

# What the synthetic task can compute (data/synthetic.py takes them from here, so
# that checking a config needs no data code).
SYNTHETIC_OPERATORS = ("+", "-", "*")


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    low_closed: bool
    high_closed: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        match = re.fullmatch(r"([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])", text)
        if not match:
            raise ValueError(f"not an interval: {text!r}")
        left, low, high, right = match.groups()
        return cls(float(low), float(high), left == "[", right == "]")

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False  # (an int of any size compares exactly with the bounds)
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def __str__(self) -> str:
        if self.high == math.inf:
            return f"{'>=' if self.low_closed else '>'} {_number(self.low)}"
        left, right = "[" if self.low_closed else "(", "]" if self.high_closed else ")"
        return f"in {left}{_number(self.low)}, {_number(self.high)}{right}"


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


@dataclass(frozen=True)
class Rule:
    interval: Interval
    note: str = ""  # why, when the range is not obvious
    nullable: bool = False  # None is allowed (means "off" or "all")
    length: int | None = None  # for lists: exactly this many items


def rule(interval: str, note: str = "", nullable: bool = False, length: int | None = None) -> Rule:
    return Rule(Interval.parse(interval), note, nullable, length)


# One row per numeric key (lists: the range of each item), from key(range=...).
RANGES: dict[str, Rule] = {
    k.path: rule(k.range, k.note, nullable=k.nullable, length=k.length) for k in KEY_RULES.values() if k.range
}

# Text values that mean nothing when empty (a path, a field name, a stop string): key(non_empty=True).
NON_EMPTY = tuple(k.path for k in KEY_RULES.values() if k.non_empty)


def check_ranges(cfg: DictConfig) -> None:
    """Refuse the first value outside its range, naming the key and the range."""
    for key, r in RANGES.items():
        value = OmegaConf.select(cfg, key)
        if value is None and r.nullable:
            continue
        if isinstance(value, ListConfig):
            items = list(value)
            if (r.length is not None and len(items) != r.length) or not all(_number_in(v, r) for v in items):
                count = {2: "two numbers"}.get(r.length, "numbers") if r.length else "numbers"
                raise UserError(f"{key} must be {count} {r.interval}{_note(r)}, got {_show(items)}")
        elif not _number_in(value, r):
            kind = "an integer" if isinstance(value, int) else "a finite number"
            raise UserError(f"{key} must be {kind} {r.interval}{_note(r)}, got {_show(value)}")
    for key in NON_EMPTY:
        value = OmegaConf.select(cfg, key)
        texts = list(value) if isinstance(value, ListConfig) else [value]
        if any(isinstance(t, str) and not t.strip() for t in texts):
            raise UserError(
                f"{key} must not be empty, got {_show(value if not isinstance(value, ListConfig) else texts)}"
            )


def _number_in(value: Any, r: Rule) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value in r.interval


def _note(r: Rule) -> str:
    return f" ({r.note})" if r.note else ""


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def validate(cfg: DictConfig) -> None:
    """Refuse bad values and impossible combinations with one line that names what would be valid.

    In order: choices, the range of every number (RANGES), run names, then the rules
    that tie keys together.
    """
    for key, choices in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value is None and key in NULL_MEANS:
            continue
        if key in PLUGIN_KEYS and isinstance(value, str) and is_plugin(value):
            _check_plugin(key, value)
            continue
        if value not in choices:
            null = f" (or null: {NULL_MEANS[key]})" if key in NULL_MEANS else ""
            plugin = " (or a plugin: package.module:function or path/to/file.py:function)" if key in PLUGIN_KEYS else ""
            raise UserError(f"{key}={value!r} is not one of: {', '.join(choices)}{null}{plugin}")
    check_ranges(cfg)
    for key in ("name", "group", "variant"):  # a run's labels
        _check_label(key, cfg[key])

    r, loop, loss = cfg.rollout, cfg.loop, cfg.loss
    if r.rollout_batch_size % r.group_size:
        raise UserError(
            f"rollout.rollout_batch_size ({r.rollout_batch_size}) must be divisible by "
            f"rollout.group_size ({r.group_size})"
        )
    if r.rollout_batch_size % loop.train_batch_size:
        raise UserError(
            f"rollout.rollout_batch_size ({r.rollout_batch_size}) must be divisible by "
            f"loop.train_batch_size ({loop.train_batch_size})"
        )
    if loop.train_batch_size % loop.gradient_accumulation_steps:
        raise UserError(
            f"loop.train_batch_size ({loop.train_batch_size}) must be divisible by "
            f"loop.gradient_accumulation_steps ({loop.gradient_accumulation_steps})"
        )
    if r.min_tokens > r.max_tokens:
        raise UserError(f"rollout.min_tokens ({r.min_tokens}) exceeds rollout.max_tokens ({r.max_tokens})")
    buffer = cfg.reward.overlong_buffer_len
    if buffer is not None and buffer > r.max_tokens:
        raise UserError(
            f"reward.overlong_buffer_len ({buffer}) exceeds rollout.max_tokens ({r.max_tokens}): "
            "the buffer is the last tokens before max_tokens"
        )
    off_policy = is_off_policy(loop.epochs_per_rollout_batch, loop.train_batch_size, r.rollout_batch_size)
    if off_policy and loss.loss_type in RATIO_FREE_LOSSES:
        raise UserError(
            f"loss.loss_type={loss.loss_type} is on-policy only; with off-policy reuse "
            "(epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size) use grpo_clip, grpo_no_clip or cispo"
        )
    if loss.importance_level == "sequence" and loss.loss_type in RATIO_FREE_LOSSES:
        raise UserError(
            f"loss.importance_level=sequence (GSPO) weighs an importance ratio that loss.loss_type={loss.loss_type} "
            "does not have: use grpo_clip, grpo_no_clip or cispo, or importance_level=token"
        )
    _check_advantages(cfg)
    check_rewards(cfg)
    expected_reward = reward_for_template(cfg.prompt.template)
    if expected_reward and not is_plugin(cfg.prompt.reward) and cfg.prompt.reward != expected_reward:
        answers_in = "\\boxed{}" if expected_reward == "question_only" else "<answer> tags"
        raise UserError(
            f"prompt.template={cfg.prompt.template} answers in {answers_in}: set prompt.reward={expected_reward}"
        )
    if cfg.data.source not in GENERATED_DATA_SOURCES and cfg.data.train_path is None:
        raise UserError(f"data.source={cfg.data.source} needs data.train_path (a jsonl file or hub dataset name)")
    _check_synthetic(cfg.data.synthetic)
    _check_tiny(cfg.model)
    _check_sampled_eval(cfg.eval)
    check_eval_sets(cfg)


def check_rewards(cfg: DictConfig) -> None:
    """prompt.reward and reward.components name built-in rewards or plugins that resolve:
    a plugin is imported here, so a missing file, a module that does not import or a
    name that is not a function is refused before anything runs or is written."""
    plugin_words = "or a plugin: package.module:function or path/to/file.py:function"
    _check_reward_spec("prompt.reward", cfg.prompt.reward, plugin_words)
    components = cfg.reward.components
    if not components:
        return
    if is_plugin(cfg.prompt.reward):
        raise UserError(
            f"prompt.reward={cfg.prompt.reward} is a plugin, and reward.components replaces prompt.reward as the "
            f"reward: put the plugin in reward.components and leave prompt.reward the built-in that grades the evals "
            f"({', '.join(REWARDS)})"
        )
    shape = "reward.components must be a list of {name, spec, weight}"
    names: set[str] = set()
    for i, item in enumerate(components):
        where = f"reward.components[{i}]"
        if not isinstance(item, DictConfig):
            raise UserError(f"{shape}, got {_show(OmegaConf.to_container(components))}")
        extra = set(item.keys()) - {"name", "spec", "weight"}
        if extra or "name" not in item or "spec" not in item:
            raise UserError(
                f"{where}: {shape} (weight optional, 1 by default), got keys {', '.join(map(str, item.keys()))}"
            )
        name, spec, weight = item["name"], item["spec"], item.get("weight", 1.0)
        if not isinstance(name, str) or not PART_NAME_RE.match(name):
            raise UserError(f"{where}.name={name!r} must be {PART_NAME_WORDS} (it names train/reward/<name>)")
        if name in names:
            raise UserError(f"reward.components has two components named {name!r}")
        names.add(name)
        if not isinstance(spec, str) or not spec.strip():
            raise UserError(f"{where}.spec must be a reward: {', '.join(REWARDS)} {plugin_words}")
        if not _number_in(weight, rule("(-inf, inf)")):
            raise UserError(f"{where}.weight must be a finite number, got {_show(weight)}")
        _check_reward_spec(f"{where}.spec", spec, plugin_words)


def _check_reward_spec(key: str, spec: str, plugin_words: str) -> None:
    if not is_plugin(spec):
        if spec not in REWARDS:
            raise UserError(f"{key}={spec!r} is not one of: {', '.join(REWARDS)} ({plugin_words})")
        return
    _check_plugin(key, spec)


def _check_plugin(key: str, spec: str) -> None:
    """The plugin `spec` imports and names a function (imported here, before anything runs)."""
    try:
        load_function(spec)
    except PluginError as exc:
        raise UserError(f"{key}={spec}: {exc}") from None


def _check_advantages(cfg: DictConfig) -> None:
    """The built-in estimators' needs: rloo's baseline is the other answers of a group, and
    batch_std is the std that use_std_normalization divides by."""
    loss = cfg.loss
    if loss.advantage_estimator == "rloo" and cfg.rollout.group_size < 2:
        raise UserError("loss.advantage_estimator=rloo needs rollout.group_size >= 2 (a baseline of the others)")
    if loss.advantage_estimator == "batch_std" and not loss.use_std_normalization:
        raise UserError(
            "loss.advantage_estimator=batch_std divides by the rollout batch's std, which "
            "loss.use_std_normalization=false turns off: use advantage_estimator=group_mean for no std"
        )
    low, high = loss.cispo_ratio_min, loss.cispo_ratio_max
    if low is not None and low >= high:
        raise UserError(f"loss.cispo_ratio_min ({low}) must be below loss.cispo_ratio_max ({high})")


def _check_sampled_eval(ev: DictConfig) -> None:
    """k of pass@k and maj@k must be drawable from the n samples; group_by names fields."""
    n = ev.sampled.n
    if n and any(k > n for k in ev.sampled.k):
        raise UserError(f"eval.sampled.k={list(ev.sampled.k)} has a k above eval.sampled.n={n}: each k must be <= n")
    for name in ev.group_by:
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"eval.group_by must be a list of record field names, got {list(ev.group_by)}")


def _check_label(key: str, value: str | None) -> None:
    """A run's name, group and variant name directories and fill one-line messages."""
    if value is None:
        return
    if not value.strip() or value.strip() in (".", "..") or len(value) > 200:
        raise UserError(f"{key}={value[:40]!r} is not usable as a name: give 1-200 characters, not '.' or '..'")
    if any(not c.isprintable() for c in value):
        raise UserError(f"{key}={value[:40]!r} contains a control character (a newline or tab, say)")


def _check_synthetic(syn: DictConfig) -> None:
    if syn.min_digits > syn.max_digits:
        raise UserError(
            f"data.synthetic.min_digits ({syn.min_digits}) exceeds data.synthetic.max_digits ({syn.max_digits})"
        )
    ops = list(syn.ops)
    if not ops or any(op not in SYNTHETIC_OPERATORS for op in ops):
        raise UserError(f"data.synthetic.ops must be a non-empty list of {', '.join(SYNTHETIC_OPERATORS)}, got {ops}")


def _check_tiny(model: DictConfig) -> None:
    t = model.tiny
    if t.hidden_size % t.num_attention_heads or (t.hidden_size // t.num_attention_heads) % 2:
        raise UserError(
            f"model.tiny.hidden_size ({t.hidden_size}) must split into model.tiny.num_attention_heads "
            f"({t.num_attention_heads}) heads of an even size (rotary embeddings rotate pairs)"
        )
    if t.num_attention_heads % t.num_key_value_heads:
        raise UserError(
            f"model.tiny.num_attention_heads ({t.num_attention_heads}) must be divisible by "
            f"model.tiny.num_key_value_heads ({t.num_key_value_heads})"
        )
    path = model.path
    if is_lab_path(path):
        try:
            sft_steps_of(path)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    if path.startswith("tiny@"):
        at = path.partition("@")[2]
        saved = ", ".join(str(s) for s in model.warmstart.save_steps)
        if not at.isdigit() or int(at) not in model.warmstart.save_steps:
            raise UserError(
                f"model.path={path}: the warm-start keeps its weights at steps {saved} "
                "(model.warmstart.save_steps) and at its end (model.path=tiny)"
            )


# --------------------------------------------------------------------------- eval.sets

EVAL_SET_KEYS = ("name", "source", "path", "subset", "split", "question_field", "answer_field")


def check_eval_sets(cfg: DictConfig) -> None:
    """Each of eval.sets is a mapping with a unique, metric-safe name, known keys, a known
    source, a path where its source needs one (data.eval_path fills it), a subset >= 1."""
    from grpoctl.rules import DATA_SOURCES

    seen: set[str] = set()
    for i, entry in enumerate(cfg.eval.sets):
        where = f"eval.sets[{i}]"
        if not isinstance(entry, DictConfig):
            raise UserError(f"{where} must be a mapping like {{name: gsm8k, source: gsm8k, path: ..., subset: 256}}")
        unknown = sorted(str(k) for k in set(entry.keys()) - set(EVAL_SET_KEYS))
        if unknown:
            raise UserError(
                f"{where} has unknown key(s) {', '.join(map(str, unknown))}: use {', '.join(EVAL_SET_KEYS)}"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not PART_NAME_RE.match(name):
            raise UserError(f"{where}.name={name!r} must be {PART_NAME_WORDS} (it names the metrics eval/NAME/*)")
        if name in seen:
            raise UserError(f"eval.sets: the name {name!r} is used twice; each set needs its own")
        seen.add(name)
        source = entry.get("source") or cfg.data.eval_source or cfg.data.source
        if source not in DATA_SOURCES:
            raise UserError(f"{where}.source={source!r} is not one of: {', '.join(DATA_SOURCES)}")
        path = entry.get("path") or cfg.data.eval_path  # as data/run_data.py fills it in
        if source not in GENERATED_DATA_SOURCES and not path:
            raise UserError(f"{where} ({name}): source={source} needs a path (a jsonl file or hub dataset name)")
        subset = entry.get("subset")
        if subset is not None and (isinstance(subset, bool) or not isinstance(subset, int) or subset < 1):
            raise UserError(f"{where}.subset must be an integer >= 1 (or left out: eval.subset), got {subset!r}")
        for text_key in ("path", "split", "question_field", "answer_field"):
            value = entry.get(text_key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise UserError(f"{where}.{text_key} must be a non-empty string, got {value!r}")
