"""How a config key is declared: `key(...)` with its default, help and every rule on its
value, and `key_rules`, which reads them back from a tree of sections.

The tree itself is config_schema/; what reads the rules: config_checks.py (ranges,
non-empty texts), rules.py (choices), run_identity.py (hash-neutral defaults) and
config.py (aliases). The vocabularies of config values live here, with the keys that
take them.
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, get_type_hints

# Seeds are combined into torch generator seeds (< 2**63) without overflow.
SEED_LIMIT = 2**32 - 1

# The words a config key may be set to (key(choices=...)), each vocabulary once.
# The built-in policy-gradient losses and advantage estimators: their functions are the
# tables grpo/losses.py (LOSS_FUNCTIONS) and grpo/advantages.py (ADVANTAGE_FUNCTIONS) hold
# under these names, in this order (tests/test_recipe_tables.py holds the two together).
LOSS_TYPES = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip", "cispo")
ADVANTAGE_ESTIMATORS = ("group_mean", "rloo", "batch_std")
# How a sequence's token losses become the number the gradient is taken of (grpo/train_step.py).
LENGTH_NORMALIZATIONS = ("mean", "constant", "microbatch", "token")
IMPORTANCE_LEVELS = ("token", "sequence")
DATA_SOURCES = ("synthetic", "lab", "lab-hard", "math", "gsm8k", "jsonl", "hub")
BACKENDS = ("auto", "vllm", "hf")
# model.dtype: what the policy's weights are stored in and computed in. bf16-mixed stores
# the weights, their gradients and AdamW's states in float32 and runs the forward passes
# under bfloat16 autocast (vLLM samples in bfloat16): in pure bfloat16 an update smaller
# than half a weight's spacing (2^-8 of it) rounds away, which at lr 1e-6 is nearly every
# one (tests/test_precision.py).
MIXED_PRECISION = "bf16-mixed"
DTYPES = ("auto", "float32", "bfloat16", MIXED_PRECISION)
DEVICES = ("auto", "cpu", "cuda")
ADAMW_LR_NOTE = "an AdamW step moves each weight by about lr"
# model.lora.targets' word for every linear layer but the LM head (peft's own spelling).
LORA_ALL_LINEAR = "all-linear"


def key(
    default: Any,
    help: str,
    *,
    range: str | None = None,
    note: str = "",
    nullable: bool = False,
    length: int | None = None,
    choices: tuple[str, ...] | None = None,
    null_means: str | None = None,
    non_empty: bool = False,
    neutral: bool = False,
    aliases: tuple[str, ...] = (),
    plugin: bool = False,
) -> Any:
    """A config key: its default, its one-line help (its row in docs/configuration.md's
    table), and every rule on its value, said here once (the checks, the run identity and
    the command line read them from here; KEY_RULES below):

    - range: the interval a number (or each number of a list) lies in, "(0, 1]" as in
      mathematics; note: why, said when a value is refused; nullable: null is allowed too;
      length: how many numbers a list holds (config_checks.py);
    - choices: the words it may be (rules.CHOICES); null_means: what null means, when null
      is allowed too;
    - non_empty: a text that means nothing when empty (a path, a field name);
    - neutral: its default is hash-neutral: a run that leaves the key at its default keeps
      the identity it had before the key existed (run_identity.NEUTRAL_DEFAULTS). Every
      key added after the first runs were recorded has it;
    - aliases: short names for it on the command line and in `sweep` (`lr=1e-5`);
    - plugin: besides its choices, it may name a plugin, `package.module:function` or
      `path/to/file.py:function` (reward_specs.py; rules.PLUGIN_KEYS).
    """
    rules = dict(
        help=help, range=range, note=note, nullable=nullable, length=length, choices=choices,
        null_means=null_means, non_empty=non_empty, neutral=neutral, aliases=aliases, plugin=plugin,
    )  # fmt: skip
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=rules)
    return field(default=default, metadata=rules)


@dataclass(frozen=True)
class KeyRules:
    """One key as key(...) declared it: its dotted path, default, and the rules on its value."""

    path: str
    default: Any
    help: str
    range: str | None
    note: str
    nullable: bool
    length: int | None
    choices: tuple[str, ...] | None
    null_means: str | None
    non_empty: bool
    neutral: bool
    aliases: tuple[str, ...]
    plugin: bool


def key_rules(cls: type, prefix: str = "") -> list[KeyRules]:
    """Every key of the tree `cls`, in its order (a section's keys follow it), with its rules."""
    out: list[KeyRules] = []
    types = get_type_hints(cls)
    for f in fields(cls):
        path = f"{prefix}{f.name}"
        sub = types[f.name]
        if isinstance(sub, type) and is_dataclass(sub):
            out += key_rules(sub, path + ".")
            continue
        default = f.default if f.default_factory is MISSING else f.default_factory()
        out.append(KeyRules(path=path, default=default, **f.metadata))
    return out


def section(cls: type) -> Any:
    """A nested section of the tree; its help is its class docstring's first line."""
    return field(default_factory=cls)
