"""The project's rules and vocabularies, each written once, for every module to import.

What a config key may be set to, which keys make a run what it is (and its hash), how a
nested config flattens, what "auto" means for the device, dtype and rollout backend,
which reward goes with which template, when a run is off-policy, which eval is a run's
headline accuracy, the colour of each status, and how numbers are written in tables.

No torch, no omegaconf, nothing heavy: `runs`, `compare` and the sweep planner import
this at start-up.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from collections.abc import Mapping
from typing import Any

# --------------------------------------------------------------------------- vocabularies

LOSS_TYPES = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip")
# The losses without an importance ratio: they can only learn from the policy that sampled.
RATIO_FREE_LOSSES = ("no_baseline", "reinforce_with_baseline")
# How a sequence's token losses become the number the gradient is taken of (grpo/train_step.py).
LENGTH_NORMALIZATIONS = ("mean", "constant", "microbatch", "token")
IMPORTANCE_LEVELS = ("token", "sequence")
REWARDS = ("r1_zero", "question_only")
DATA_SOURCES = ("synthetic", "math", "gsm8k", "jsonl", "hub")
BACKENDS = ("auto", "vllm", "hf")
DTYPES = ("auto", "float32", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")

# Every key whose value is one of a few words (config_checks.validate refuses the rest).
CHOICES: dict[str, tuple[str, ...]] = {
    "rollout.backend": BACKENDS,
    "loss.loss_type": LOSS_TYPES,
    "loss.length_normalization": LENGTH_NORMALIZATIONS,
    "loss.importance_level": IMPORTANCE_LEVELS,
    "prompt.reward": REWARDS,
    "optimizer.name": ("adamw", "adamw8bit"),
    "optimizer.lr_schedule": ("constant", "cosine"),
    "optimizer.warmup_unit": ("optimizer_step", "grpo_step"),
    "model.dtype": DTYPES,
    "runtime.device": DEVICES,
    "data.source": DATA_SOURCES,
    "data.eval_source": DATA_SOURCES,
    "runtime.on_signal": ("finish_step", "checkpoint_now"),
}
# Keys of CHOICES that may also be null, and what null means.
NULL_MEANS = {"data.eval_source": "the same as data.source"}

# What the registry stores as a run's status; "stale" is shown, never stored: a running
# run whose heartbeat stopped (registry.store.effective_status).
RUN_STATUSES = ("running", "finished", "failed", "diverged", "interrupted")
SHOWN_STATUSES = (*RUN_STATUSES, "stale")
ENDED_BADLY = ("failed", "diverged")  # a sweep retries these on request; plots draw them dashed
STATUS_STYLES = {
    "running": "cyan",
    "finished": "green",
    "failed": "red",
    "diverged": "magenta",
    "interrupted": "yellow",
    "stale": "yellow",
}

# --------------------------------------------------------------------------- what goes with what


def reward_for_template(template: str) -> str | None:
    """The reward a packaged template's answer format needs; None for a template file,
    whose format only its author knows.

    r1_zero and r1_zero_compact answer in `<answer>` tags, question_only in `\\boxed{}`.
    """
    if template == "question_only":
        return "question_only"
    if template.startswith("r1_zero"):
        return "r1_zero"
    return None


def is_off_policy(epochs_per_rollout_batch: int, train_batch_size: int, rollout_batch_size: int) -> bool:
    """A rollout batch trained on more than once, or in several optimizer steps: every
    update after the first is taken on rollouts of an older policy."""
    return epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size


# --------------------------------------------------------------------------- what "auto" means


def resolve_device(device: str, cuda_available: bool) -> str:
    """runtime.device: auto is cuda when torch sees a CUDA device, else cpu."""
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """model.dtype: auto is bfloat16 on a GPU and float32 on a CPU (whose bf16 matmuls are slow)."""
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return dtype


def vllm_installed() -> bool:
    """Whether a vLLM package is installed, found without importing it (that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def resolve_backend(backend: str, vllm_is_installed: bool) -> str:
    """rollout.backend: auto is vllm when vLLM is installed, else hf.

    Installed is enough to decide, so a dry run (which must not import vLLM) and the run
    itself agree; a vLLM that is installed but does not import is refused before the run
    starts rather than quietly replaced (train/setup.py: preflight).
    """
    if backend == "auto":
        return "vllm" if vllm_is_installed else "hf"
    return backend


# --------------------------------------------------------------------------- run identity


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
    "loss.mask_truncated": False,  # truncated completions were trained on
    "loss.entropy_coef": 0.0,  # no entropy bonus
    "loss.tis_cap": None,  # no importance correction for the sampler
    "rollout.dynamic_sampling": False,  # every group was trained on
    "rollout.dynamic_sampling_max_rounds": 10,  # ... (the cap only acts with dynamic sampling)
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
    return items


def _digest(items: dict[str, Any]) -> str:
    blob = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_hash(config: Any) -> str:
    """The identity of a run: a hash of the keys that change what it computes.

    A pure function of the resolved config (a DictConfig or its plain dict). Excluded
    are the keys in HASH_EXCLUDED; keys added to the config later are dropped while at
    their neutral default (NEUTRAL_DEFAULTS), so a new option never renames old runs.
    The registry's migration 0002 holds a frozen copy of this definition, to rewrite
    the hashes that the earlier definition stored; changing it again needs a migration.
    """
    return _digest(hashed_items(config))


def variant_items(config: Any) -> dict[str, Any]:
    """What makes runs the same variant: the hashed keys but the seed."""
    return {k: v for k, v in hashed_items(config).items() if k != "seed"}


def variant_hash(config: Any) -> str:
    """Runs that differ only by their seed share it: `compare` folds them into one row."""
    return _digest(variant_items(config))


# --------------------------------------------------------------------------- headline accuracy

# (step, accuracy, problems evaluated; None when not recorded)
EvalPoint = tuple[int, float, "int | None"]


def eval_curve(trainer_evals: list[EvalPoint], accuracy_metric: list[tuple[int, float]]) -> list[EvalPoint]:
    """A run's eval curve: the evals its trainer ran, in step order.

    `trainer_evals` are the run's eval rows with a step and no checkpoint path: a later
    `grpoctl eval CKPT` of one of its checkpoints is linked to the run too, but may use
    other data or decoding, so it is no point of the curve. A run recorded before eval
    rows existed has only its `eval/accuracy` metric: those points, of unknown size.
    """
    if trainer_evals:
        return sorted(trainer_evals)
    return [(step, value, None) for step, value in sorted(accuracy_metric)]


def headline_accuracy(curve: list[EvalPoint], at_step: int | None = None) -> EvalPoint | None:
    """A run's accuracy: the last point of its eval curve (at or before `at_step`)."""
    eligible = [point for point in curve if at_step is None or point[0] <= at_step]
    return eligible[-1] if eligible else None


# --------------------------------------------------------------------------- how numbers are written

MiB, GiB = 2**20, 2**30


def format_number(value: float | None, digits: int = 3) -> str:
    """A figure in a table: `digits` decimals from 0.001 up to a million (so a column of
    accuracies lines up), `digits` significant digits with an exponent beyond (learning
    rates, byte counts); "-" for none, and nan or inf as such."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value != 0 and not 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def format_config_value(value: Any) -> str:
    """A config value as a person writes it: 3e-5 (not 3e-05 or 0.00003), 0.2, true, grpo_clip, -."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != 0 and abs(value) < 0.01:
            mantissa, exponent = f"{value:.6e}".split("e")
            return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return f"{value:g}"
    return str(value)


def format_bytes(n: float) -> str:
    """A memory size: 2 decimals in GiB from 1 GiB, else 1 decimal in MiB."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"


def format_count(n: int) -> str:
    """A parameter count: 1.54B, 0.432M."""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"
