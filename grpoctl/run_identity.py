"""Which config keys make a run what it is, and its hash: a run's identity.

A run's `config_hash` is what a sweep finds its members by and what `--resume` checks;
`variant_hash` folds the seeds of one variant into one row of `compare`. Both are pure
functions of the resolved config, over its keys flattened to dotted paths (`flatten`,
the one flatten of the project).

No torch, no omegaconf at import: `runs`, `compare` and the sweep planner import this
at start-up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from grpoctl.config_schema import KEY_RULES
from grpoctl.reward_specs import components_of, is_plugin, plugin_digest, plugin_identity
from grpoctl.tiny.lab_recipe import is_lab_path, recipe_key


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """{'loss': {'loss_type': 'x'}} -> {'loss.loss_type': 'x'}. An empty section has no keys."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


# Keys that do not change what a run computes: they name it (name, group, variant), say
# where its files go or how it is shown (checkpoint.*, runtime.cache_dir, logging.*), or
# change only its speed (runtime.threads, eval.batch_size). A key ending in "." covers
# its whole section.
HASH_EXCLUDED = (
    "name",
    "group",
    "variant",
    "checkpoint.",
    "runtime.threads",
    "runtime.cache_dir",
    "logging.",
    "eval.batch_size",
)
# Config keys added AFTER this definition of the hash (identity v2), each with the value
# that keeps the behaviour runs had before the key existed. At that value the key is left
# out of the hash, so adding it changes no existing run's identity and sweeps keep finding
# their members; at any other value it is part of the hash. Adding a key to the config
# means adding it here (tests/test_run_identity.py checks that every key is accounted for).
NEUTRAL_DEFAULTS: dict[str, Any] = {k.path: k.default for k in KEY_RULES.values() if k.neutral}
# The keys that may name a loss or advantage plugin (key(plugin=True)).
_PLUGIN_KEYS = tuple(k.path for k in KEY_RULES.values() if k.plugin)
# Sections that mean something only while their switch is on: off, none of their keys is
# part of the identity (a LoRA rank left in a full fine-tuning config changes nothing it
# computes); on, all of them are, defaults included, so each LoRA run names its adapter.
SWITCHED_SECTIONS = {"model.lora.": "model.lora.enabled"}


def _plain(config: Any) -> dict:
    """A plain dict of `config` (an OmegaConf DictConfig is converted; omegaconf is then loaded already)."""
    if isinstance(config, dict):
        return config
    from omegaconf import OmegaConf

    return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]


def hashed_items(config: Any) -> dict[str, Any]:
    """The flattened keys and values that define a run: what `config_hash` hashes."""
    excluded_sections = tuple(k for k in HASH_EXCLUDED if k.endswith("."))
    flat = flatten(_plain(config))
    switched_on = tuple(section for section, switch in SWITCHED_SECTIONS.items() if flat.get(switch) is True)
    switched_off = tuple(section for section in SWITCHED_SECTIONS if section not in switched_on)
    items = {}
    for key, value in flat.items():
        if key in HASH_EXCLUDED or key.startswith(excluded_sections) or key.startswith(switched_off):
            continue
        if key in NEUTRAL_DEFAULTS and value == NEUTRAL_DEFAULTS[key] and not key.startswith(switched_on):
            continue
        items[key] = value
    if items.get("reward.components"):
        # The same components however written: a weight of 1, of 1.0 or left out is one run.
        items["reward.components"] = [
            {"name": c.name, "spec": c.spec, "weight": c.weight} for c in components_of("", items["reward.components"])
        ]
    path = items.get("model.path")
    if isinstance(path, str) and is_lab_path(path):
        # The lab's models are built by grpoctl from a recipe in code, not from config keys:
        # the recipe's key stands in for them, as model.warmstart.* does for tiny@N.
        items["model.lab_recipe"] = recipe_key(path)
    return items


def _digest(items: dict[str, Any]) -> str:
    blob = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_hash(config: Any) -> str:
    """The identity of a run: a hash of the keys that change what it computes.

    A pure function of the resolved config (a DictConfig or its plain dict), and of the
    bytes of the reward plugins it names, if any (identity_items). Excluded are the keys
    in HASH_EXCLUDED; keys added to the config later are dropped while at their neutral
    default (NEUTRAL_DEFAULTS), so a new option never renames old runs. The registry's
    migration 0002 holds a frozen copy of this definition, to rewrite the hashes that the
    earlier definition stored; changing it again needs a migration.
    """
    return _digest(identity_items(config))


def identity_items(config: Any) -> dict[str, Any]:
    """hashed_items, and, when the config names reward, loss or advantage plugins, the sha256
    of each plugin's file (its spec string is hashed already, as prompt.reward,
    reward.components, loss.loss_type or loss.advantage_estimator), read now: editing a
    plugin makes a new run, which a sweep then runs rather than reuses.

    Left out without plugins, so no run without one changes hash. Only a run's creation
    (the trainer, the sweep planner) reads the files; compare's folding of seeds
    (variant_hash) and the report's table of keys go by the stored config alone.
    """
    plain = _plain(config)
    items = hashed_items(plain)
    plugins = plugin_identity(plain)
    if plugins:
        items["reward.plugin_sha256"] = plugins
    flat = flatten(plain)
    specs = [flat[key] for key in _PLUGIN_KEYS if isinstance(flat.get(key), str) and is_plugin(flat[key])]
    if specs:
        items["loss.plugin_sha256"] = {spec: plugin_digest(spec) for spec in specs}
    return items


def variant_items(config: Any) -> dict[str, Any]:
    """What makes runs the same variant: the hashed keys but the seed."""
    return {k: v for k, v in hashed_items(config).items() if k != "seed"}


def variant_hash(config: Any) -> str:
    """Runs that differ only by their seed share it: `compare` folds them into one row."""
    return _digest(variant_items(config))
