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

from grpoctl.reward_specs import components_of, plugin_identity
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
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "runtime.on_signal": "finish_step",  # how a stop request is met; finish_step is what runs did
    "data.eval_source": None,  # evaluate in data.source's format, as every run did
    "data.eval_question_field": None,  # ... with data.question_field
    "data.eval_answer_field": None,  # ... and data.answer_field
    "optimizer.warmup_unit": "optimizer_step",  # the schedule counted updates, as every run did
    "reward.overlong_buffer_len": None,  # no overlong punishment, as every run had
    "reward.overlong_penalty_factor": 1.0,  # ... (its factor only acts with a buffer)
    "reward.shuffled_control": False,  # every run learned from its own rewards
    "loss.mask_truncated": False,  # truncated completions were trained on
    "loss.entropy_coef": 0.0,  # no entropy bonus
    "loss.tis_cap": None,  # no importance correction for the sampler
    "rollout.dynamic_sampling": False,  # every group was trained on
    "rollout.dynamic_sampling_max_rounds": 10,  # ... (the cap only acts with dynamic sampling)
    "rollout.vllm.enforce_eager": False,  # vLLM compiled its model, as every run's engine did
    "rollout.allow_untested_vllm": False,  # only a tested vLLM ran, as the range check now enforces
    # The sampled eval (pass@k, maj@k) and the breakdowns change no training row: the
    # sampled eval draws from its own generator (evals/sampled.py), and a breakdown
    # only groups verdicts already made. They still enter the identity when set, as
    # eval.every does: they change what the run records, and a sweep that finds its
    # members by hash must not take a finished run without pass@k for one that has it.
    # At these values (off, and no extra fields) they are left out, so no run moves.
    "eval.group_by": [],  # level and subject only, as every run had (none were recorded)
    "eval.sampled.n": 0,  # no sampled eval, as every run had
    "eval.sampled.k": [],  # ... (the sampled eval's settings only act with n > 0)
    "eval.sampled.subset": 128,
    "eval.sampled.every": 50,
    "eval.sampled.temperature": 1.0,
    "eval.sampled.top_p": 1.0,
    # Reward plugins (reward_specs.py): without components the run's reward is prompt.reward
    # alone, as every run's was; the time limit only acts on a plugin.
    "reward.components": [],
    "reward.timeout_s": 5.0,
    # Where answers are graded changes how fast, not what: the same verdicts in workers.
    "reward.grading_workers": 0,
    # Several eval sets change no training row either (every set's problems are held out
    # of training, as the one eval set's are); set, they enter the identity like the above.
    "eval.sets": [],  # the one eval set of data.eval_*, as every run had
}


def _plain(config: Any) -> dict:
    """A plain dict of `config` (an OmegaConf DictConfig is converted; omegaconf is then loaded already)."""
    if isinstance(config, dict):
        return config
    from omegaconf import OmegaConf

    return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]


def hashed_items(config: Any) -> dict[str, Any]:
    """The flattened keys and values that define a run: what `config_hash` hashes."""
    excluded_sections = tuple(k for k in HASH_EXCLUDED if k.endswith("."))
    items = {}
    for key, value in flatten(_plain(config)).items():
        if key in HASH_EXCLUDED or key.startswith(excluded_sections):
            continue
        if key in NEUTRAL_DEFAULTS and value == NEUTRAL_DEFAULTS[key]:
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
    """hashed_items, and, when the config names reward plugins, the sha256 of each plugin's
    file (its spec string is hashed already, as prompt.reward or reward.components), read
    now: editing a plugin makes a new run, which a sweep then runs rather than reuses.

    Left out without plugins, so no run without one changes hash. Only a run's creation
    (the trainer, the sweep planner) reads the files; compare's folding of seeds
    (variant_hash) and the report's table of keys go by the stored config alone.
    """
    plain = _plain(config)
    items = hashed_items(plain)
    plugins = plugin_identity(plain)
    if plugins:
        items["reward.plugin_sha256"] = plugins
    return items


def variant_items(config: Any) -> dict[str, Any]:
    """What makes runs the same variant: the hashed keys but the seed."""
    return {k: v for k, v in hashed_items(config).items() if k != "seed"}


def variant_hash(config: Any) -> str:
    """Runs that differ only by their seed share it: `compare` folds them into one row."""
    return _digest(variant_items(config))
