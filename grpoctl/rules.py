"""The project's rules and vocabularies, each written once, for every module to import.

What a config key may be set to, what "auto" means for the device, dtype and rollout
backend, which reward goes with which template, when a run is off-policy, and which
eval is a run's headline accuracy. A run's identity (which keys it is hashed by) is
grpoctl/run_identity.py; how numbers and values are written is grpoctl/formatting.py.
Both are re-exported here, so `from grpoctl.rules import config_hash` keeps working.

No torch, no omegaconf, nothing heavy: `runs`, `compare` and the sweep planner import
this at start-up.
"""

from __future__ import annotations

import importlib.util
import math
import os

# The vocabularies of config values live with the keys' declaration (config_keys.py): re-exported.
from grpoctl.config_keys import (  # noqa: F401
    ADVANTAGE_ESTIMATORS,
    BACKENDS,
    DATA_SOURCES,
    DEVICES,
    DTYPES,
    IMPORTANCE_LEVELS,
    LENGTH_NORMALIZATIONS,
    LOSS_TYPES,
    MIXED_PRECISION,
)
from grpoctl.config_schema import KEY_RULES
from grpoctl.errors import UserError

# Re-exported for the modules and scripts that import them from here (their homes are these).
from grpoctl.formatting import (  # noqa: F401
    STATUS_STYLES,
    GiB,
    MiB,
    format_bytes,
    format_config_value,
    format_count,
    format_number,
)
from grpoctl.reward_specs import is_plugin
from grpoctl.run_identity import (  # noqa: F401
    HASH_EXCLUDED,
    NEUTRAL_DEFAULTS,
    config_hash,
    flatten,
    hashed_items,
    variant_hash,
    variant_items,
)

# --------------------------------------------------------------------------- vocabularies

# The losses without an importance ratio: they can only learn from the policy that sampled.
RATIO_FREE_LOSSES = ("no_baseline", "reinforce_with_baseline")
REWARDS = ("r1_zero", "question_only")
GENERATED_DATA_SOURCES = ("synthetic", "lab", "lab-hard")  # made in-process: no data files

# Every key whose value is one of a few words (key(choices=...); config_checks.validate
# refuses the rest), and, for those that may also be null, what null means.
# prompt.reward is one of REWARDS or a reward plugin (config_checks.check_rewards).
CHOICES: dict[str, tuple[str, ...]] = {k.path: k.choices for k in KEY_RULES.values() if k.choices}
NULL_MEANS = {k.path: k.null_means for k in KEY_RULES.values() if k.null_means}
# The keys that may also name a plugin (key(plugin=True)): the loss and the advantage
# estimator (grpo/plugins.py). prompt.reward's plugins are reward_specs.py's.
PLUGIN_KEYS = tuple(k.path for k in KEY_RULES.values() if k.plugin)

# What the registry stores as a run's status; "stale" is shown, never stored: a running
# run whose heartbeat stopped (registry.store.effective_status).
RUN_STATUSES = ("running", "finished", "failed", "diverged", "interrupted")
SHOWN_STATUSES = (*RUN_STATUSES, "stale")
ENDED_BADLY = ("failed", "diverged")  # a sweep retries these on request; plots draw them dashed
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


def grader_reward(reward: str, template: str) -> str:
    """The built-in reward that grades a run's evals (and its train/answer_reward): prompt.reward,
    or for a plugin the template's answer format's reward (r1_zero for a template file)."""
    if not is_plugin(reward):
        return reward
    return reward_for_template(template) or "r1_zero"


def is_off_policy(epochs_per_rollout_batch: int, train_batch_size: int, rollout_batch_size: int) -> bool:
    """A rollout batch trained on more than once, or in several optimizer steps: every
    update after the first is taken on rollouts of an older policy."""
    return epochs_per_rollout_batch > 1 or train_batch_size < rollout_batch_size


def updates_per_grpo_step(epochs_per_rollout_batch: int, rollout_batch_size: int, train_batch_size: int) -> int:
    """Optimizer updates one GRPO step takes: one per train batch, each epoch over the
    rollout batch again. Exact for every recorded step: the config is refused unless
    train_batch_size divides rollout_batch_size, and a step always trains on a full
    rollout batch (dynamic sampling fills a short one with zero-weight groups)."""
    return epochs_per_rollout_batch * rollout_batch_size // train_batch_size


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


def weights_dtype(resolved: str) -> str:
    """What a resolved model.dtype stores the weights (and their gradients, AdamW's states) in."""
    return "float32" if resolved == MIXED_PRECISION else resolved


def compute_dtype(resolved: str) -> str:
    """What a resolved model.dtype computes the forward passes in (and vLLM samples in)."""
    return "bfloat16" if resolved == MIXED_PRECISION else resolved


def vllm_installed() -> bool:
    """Whether a vLLM package is installed, found without importing it (that takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


# The vLLM releases grpoctl's vLLM backend is written against: pyproject.toml's `gpu` extra
# says the same (tests/test_vllm_version.py holds them together). The floor is the first
# release whose worker takes `reload_weights(weights_iterator=...)`, what every weight sync
# calls, with the other keywords the backend passes (kv_cache_memory_bytes, logprobs_mode,
# sleep levels 1 and 2, wake_up tags) read in the sources of 0.32 and 0.33; older vLLMs fail
# the first sync with a TypeError, a whole step into the run. vLLM releases monthly, so a
# newer one is refused unless rollout.allow_untested_vllm says to try it.
VLLM_FLOOR = "0.32"
VLLM_CEILING = "0.34"
VLLM_RANGE = f">={VLLM_FLOOR},<{VLLM_CEILING}"


def check_vllm_version(version: str, allow_untested: bool) -> None:
    """Raise UserError (one line) unless `version` of vLLM is in VLLM_RANGE.

    A local suffix (`0.32.0+cpu`), a development or release-candidate build counts as its
    release (`0.33.1.dev5` is 0.33.1). Above the ceiling, `allow_untested` lets it run.
    """
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        release = None
    if release is not None and release < Version(VLLM_FLOOR):
        raise UserError(
            f"vLLM {version} is older than grpoctl's vLLM backend supports (vllm{VLLM_RANGE}): "
            "install a vLLM in that range, or use rollout.backend=hf"
        )
    if (release is None or release >= Version(VLLM_CEILING)) and not allow_untested:
        raise UserError(
            f"vLLM {version} is outside the range grpoctl was tested with (vllm{VLLM_RANGE}): install a vLLM in "
            "that range, or set rollout.allow_untested_vllm=true to try this one"
        )


def resolve_backend(backend: str, vllm_is_installed: bool) -> str:
    """rollout.backend: auto is vllm when vLLM is installed, else hf.

    Installed is enough to decide, so a dry run (which must not import vLLM) and the run
    itself agree; a vLLM that is installed but does not import is refused before the run
    starts rather than quietly replaced (train/setup.py: preflight).
    """
    if backend == "auto":
        return "vllm" if vllm_is_installed else "hf"
    return backend


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


# --------------------------------------------------------------------------- a run's claim: its timings

# The one-writer claim (registry/claims.py) lasts LEASE_S after its last renewal; the
# trainer's heartbeat renews it every HEARTBEAT_S (each step commit does too), so two
# heartbeats in a row may fail (a busy database) before the claim is lost. A sweep member
# retried on another machine waits up to the lease plus one heartbeat for the previous
# trainer to let go (its checkpoint after SIGTERM). These are the production timings;
# tests shorten them (a fault test would otherwise sleep for minutes) through the two
# variables below, nothing else.
LEASE_S = 180.0
HEARTBEAT_S = 60.0
LEASE_ENV, HEARTBEAT_ENV = "GRPOCTL_LEASE_S", "GRPOCTL_HEARTBEAT_S"
LEASE_RANGE_S = (2.0, 86_400.0)  # a day at most; under 2 s, a commit's round trip may outlast it


def _seconds(name: str, default: float, low: float, high: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN fails too
        raise UserError(f"{name} must be seconds between {low:g} and {high:g}, got '{text}'")
    return value


def lease_s() -> float:
    """How long a run's claim lasts after its last renewal ($GRPOCTL_LEASE_S, default 180)."""
    return _seconds(LEASE_ENV, LEASE_S, *LEASE_RANGE_S)


def heartbeat_s() -> float:
    """How often a trainer renews its claim ($GRPOCTL_HEARTBEAT_S, default 60): at most a
    third of the lease, so that two missed heartbeats do not lose it."""
    lease = lease_s()
    return _seconds(HEARTBEAT_ENV, min(HEARTBEAT_S, lease / 3), 0.5, lease / 3)


def check_claim_timings() -> None:
    """Raise UserError (one line) if $GRPOCTL_LEASE_S or $GRPOCTL_HEARTBEAT_S is out of range."""
    heartbeat_s()  # reads and checks both


def claim_wait_s() -> float:
    """How long a retried sweep member waits for the previous trainer to let go of the run."""
    return lease_s() + heartbeat_s()


# A PostgreSQL registry that stops answering (a partition, a restart, an outage) must be
# noticed, and a claimed write retried, within the lease: past it, another machine may
# take the run over, and this trainer must by then have stopped trying. So both bounds
# follow the lease: libpq gives up on a silent link after registry_link_s() (connecting,
# unacknowledged data, keepalives, one statement), and a claimed write that failed on a
# lost connection is retried for registry_retry_s() (30 and 120 s of a 180 s lease by
# default, 2 and 6.7 s of the tests' 10 s). The retry also ends before the claim could
# lapse, counted from its last renewal that committed, less one more attempt (a link
# timeout and a pause) and a second to say so and exit (registry/claims.py): a trainer
# whose last renewal came long before the failure (a long step, a frozen process) stops
# sooner, and never after its successor could start.
def registry_link_s() -> float:
    """How long a registry connection may stay silent before libpq drops it: a sixth of
    the lease, between 2 s and 30 s."""
    return min(30.0, max(2.0, lease_s() / 6))


def registry_retry_s() -> float:
    """How long a claimed write that lost its connection is retried: two thirds of the lease."""
    return lease_s() * 2 / 3
