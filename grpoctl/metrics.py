"""Every metric name grpoctl records or reads, with what it means: the one table.

A metric is a (step, value) series in the registry, named `family/what`: `train/` for
one GRPO step's rollouts and updates, `eval/` for a held-out evaluation, `time/` for
seconds, `mem/` for MiB. Writers (the trainer, the evaluator) and readers (compare's
health flags and columns, report's plots, the progress line, the registry's summaries)
import the names from here, so a rename is one edit and a reader never asks for a
series that no writer makes. `tests/test_metric_names.py` finds any name spelled out
elsewhere in `grpoctl/`.

Names that carry a part (a phase, an eval set, a reward component) come from the
functions below, never from an f-string at the call site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How any metric name is spelled (`family/what`, `eval/pass@4`, `eval/SET/accuracy`): what a reader may check a name it was
# given against before asking the registry for it (the dashboard's API).
NAME_RE = re.compile(r"^[a-z]{1,16}/[A-Za-z0-9_.@/\-]{1,120}$")


@dataclass(frozen=True)
class MetricInfo:
    name: str
    description: str
    unit: str
    higher_is_better: bool | None  # None: neither direction is better (a learning rate, a length)


TABLE: dict[str, MetricInfo] = {}


def _metric(name: str, description: str, unit: str, higher_is_better: bool | None) -> str:
    TABLE[name] = MetricInfo(name, description, unit, higher_is_better)
    return name


# --------------------------------------------------------------------------- train/: one GRPO step

REWARD = _metric("train/reward", "mean reward over the step's rollouts", "reward", True)
REWARD_STD = _metric("train/reward_std", "standard deviation of the reward over the step's rollouts", "reward", None)
FORMAT_REWARD = _metric("train/format_reward", "mean format reward over the step's rollouts", "reward", True)
ANSWER_REWARD = _metric("train/answer_reward", "mean answer reward over the step's rollouts", "reward", True)
ZERO_STD_GROUP_FRACTION = _metric(
    "train/zero_std_group_fraction",
    "share of groups whose rewards are all equal (they carry no GRPO signal)",
    "fraction",
    False,
)
GROUPS_RARE_SUCCESS = _metric(
    "train/groups_rare_success",
    "share of groups with 1 or 2 right answers of G (where dividing by the group's std weighs most)",
    "fraction",
    None,
)
GROUPS_NEAR_ALL_RIGHT = _metric(
    "train/groups_near_all_right", "share of groups with at least G-1 right answers of G", "fraction", None
)
LEVEL_ACCURACY_PREFIX = "train/accuracy/L"


def level_accuracy(level: int) -> str:
    """Sampled accuracy on the step's problems of one level (`train/accuracy/L3`), where the data has levels."""
    return _metric(
        f"{LEVEL_ACCURACY_PREFIX}{level}", f"share of the step's rollouts right, on problems of level {level}",
        "fraction", True,
    )  # fmt: skip


def level_of_accuracy(name: str) -> int | None:
    """3 of `train/accuracy/L3`; None for a name that is no level's sampled accuracy."""
    level = name.removeprefix(LEVEL_ACCURACY_PREFIX)
    return int(level) if name.startswith(LEVEL_ACCURACY_PREFIX) and level.isdigit() else None


RESPONSE_LENGTH = _metric("train/response_length", "mean response length over the step's rollouts", "tokens", None)
RESPONSE_CLIP_FRACTION = _metric(
    "train/response_clip_fraction", "share of rollouts cut off at rollout.max_tokens", "fraction", False
)
WORKING_SHARE = _metric(
    "train/working_share",
    "share of rollouts that write anything before their answer (working, not only the formatted answer)",
    "fraction",
    None,
)
GRADING_TIMEOUTS = _metric("train/grading_timeouts", "rollouts whose grading hit its time limit", "count", False)
GRADING_ERRORS = _metric(
    "train/grading_errors", "rollouts whose grading raised (scored 0; should stay at zero)", "count", False
)
TOKEN_ENTROPY = _metric(
    "train/token_entropy", "mean entropy of the policy over every response token trained on", "nats", None
)
GRAD_NORM = _metric("train/grad_norm", "gradient norm before clipping, mean over optimizer steps", "norm", False)
GRAD_NORM_MAX = _metric("train/grad_norm_max", "highest gradient norm of the step's optimizer steps", "norm", False)
LR = _metric("train/lr", "learning rate of the optimizer step", "lr", None)
LOSS = _metric("train/loss", "policy-gradient loss (what was backpropagated)", "loss", None)
CLIP_FRACTION = _metric("train/clip_fraction", "share of tokens whose probability ratio was clipped", "fraction", None)
RATIO_MEAN = _metric("train/ratio_mean", "mean probability ratio pi/pi_old over response tokens", "ratio", None)
RATIO_MIN = _metric("train/ratio_min", "lowest probability ratio pi/pi_old over response tokens", "ratio", None)
RATIO_MAX = _metric("train/ratio_max", "highest probability ratio pi/pi_old over response tokens", "ratio", None)
KL = _metric("train/kl", "KL penalty term against the reference policy (k3 estimate)", "nats", None)
OVERLONG_PENALTY = _metric(
    "train/overlong_penalty",
    "reward removed per rollout by the soft overlong punishment (train/reward is after it)",
    "reward",
    None,
)
OVERLONG_PENALIZED_FRACTION = _metric(
    "train/overlong_penalized_fraction", "share of rollouts inside the overlong buffer (penalised)", "fraction", None
)
LOSS_MASKED_FRACTION = _metric(
    "train/loss_masked_fraction",
    "share of rollouts given zero loss weight for being truncated (loss.mask_truncated)",
    "fraction",
    None,
)
ENTROPY_BONUS = _metric(
    "train/entropy_bonus",
    "the entropy term subtracted from the loss: entropy_coef x entropy, length-normalised like the loss",
    "nats",
    None,
)
DYNAMIC_SAMPLING_PROMPTS = _metric(
    "train/dynamic_sampling_prompts", "prompts drawn by the step's rounds of dynamic sampling", "count", None
)
DYNAMIC_SAMPLING_DROPPED = _metric(
    "train/dynamic_sampling_dropped", "groups dropped by dynamic sampling: their rewards were all equal", "count", None
)
DYNAMIC_SAMPLING_ROUNDS = _metric(
    "train/dynamic_sampling_rounds", "rounds of sampling the step took to fill its batch", "count", False
)
DYNAMIC_SAMPLING_SHORT = _metric(
    "train/dynamic_sampling_short",
    "1 when the step reached dynamic_sampling_max_rounds with too few groups (filled at zero weight)",
    "flag",
    False,
)
TIS_DELTA_MEAN = _metric(
    "train/tis_logprob_delta_mean",
    "mean |trainer log p - sampler log p| over response tokens (the sampler/trainer mismatch)",
    "nats",
    False,
)
TIS_DELTA_MAX = _metric(
    "train/tis_logprob_delta_max", "largest |trainer log p - sampler log p| of the step's tokens", "nats", False
)
TIS_WEIGHT_MEAN = _metric("train/tis_weight_mean", "mean TIS weight min(pi_old / pi_sampler, cap)", "ratio", None)
TIS_CAPPED_FRACTION = _metric(
    "train/tis_capped_fraction", "share of response tokens whose TIS weight hit loss.tis_cap", "fraction", False
)
# The sampler serves weights synced from the trainer (vLLM: copied, a LoRA adapter merged in
# and rounded to its dtype). Each step's rollouts come from the weights of the last sync, and
# the trainer's first pass over them runs on those same weights: their log-probs should agree
# up to float rounding. A gap well above that is a stale or wrongly merged policy.
SAMPLER_GAP_MEAN = _metric(
    "train/sampler_logprob_gap",
    "mean |trainer log p - sampler log p| of the step's response tokens, the trainer under the weights last "
    "synced to the sampler (recorded when the sampler reports log-probs)",
    "nats",
    False,
)
SAMPLER_GAP_MAX = _metric(
    "train/sampler_logprob_gap_max", "largest |trainer log p - sampler log p| of the step's tokens", "nats", False
)
OVERLONG_TRAIN_DROPPED = _metric(
    "train/overlong_prompts_dropped",
    "training problems dropped at load: their prompt left no room for rollout.max_tokens (recorded when > 0)",
    "count",
    None,
)

# The loss function's per-microbatch statistics, by the key the loss returns them under.
LOSS_STATISTICS = {
    "loss": LOSS,
    "clip_fraction": CLIP_FRACTION,
    "ratio_mean": RATIO_MEAN,
    "ratio_min": RATIO_MIN,
    "ratio_max": RATIO_MAX,
    "kl": KL,
    "entropy_bonus": ENTROPY_BONUS,
    "tis_delta_mean": TIS_DELTA_MEAN,
    "tis_delta_max": TIS_DELTA_MAX,
    "tis_weight_mean": TIS_WEIGHT_MEAN,
    "tis_capped_fraction": TIS_CAPPED_FRACTION,
}

# --------------------------------------------------------------------------- eval/: held-out evaluation

EVAL_ACCURACY = _metric("eval/accuracy", "greedy accuracy on the held-out eval problems", "fraction", True)
EVAL_FORMAT_RATE = _metric("eval/format_rate", "share of eval responses in the answer format", "fraction", True)
EVAL_RESPONSE_LENGTH = _metric("eval/response_length", "mean eval response length", "tokens", None)
EVAL_GRADING_ERRORS = _metric(
    "eval/grading_errors", "eval responses whose grading raised (scored 0; should stay at zero)", "count", False
)
OVERLONG_EVAL_DROPPED = _metric(
    "eval/overlong_problems_dropped",
    "eval problems dropped at load, before the subset is drawn: no room for eval.max_tokens (recorded when > 0)",
    "count",
    None,
)


# The sampled eval (eval.sampled.*, evals/sampled.py): n samples per problem.
SAMPLED_FORMAT_RATE = _metric(
    "eval/sampled_format_rate", "share of the sampled eval's samples in the answer format", "fraction", True
)
SAMPLED_RESPONSE_LENGTH = _metric(
    "eval/sampled_response_length", "mean response length of the sampled eval's samples", "tokens", None
)


def pass_at(k: int) -> str:
    """pass@k of the sampled eval (`eval/pass@4`): some one of k samples is right."""
    return _metric(
        f"{EVAL_PREFIX}pass@{k}", f"chance that at least one of {k} samples is right (unbiased)", "fraction", True
    )


def maj_at(k: int) -> str:
    """maj@k of the sampled eval (`eval/maj@4`): the most common answer of k samples is right."""
    return _metric(
        f"{EVAL_PREFIX}maj@{k}", f"chance that the majority answer of {k} samples is right", "fraction", True
    )


def is_sampled_score(name: str) -> bool:
    """A pass@k or maj@k series (any k; of any eval set: `eval/math500/pass@8` too)."""
    return split_eval_set(name)[1].startswith((f"{EVAL_PREFIX}pass@", f"{EVAL_PREFIX}maj@"))


# A name a user gives that becomes part of metric names: an eval set's (eval/NAME/*) and a
# reward component's (train/reward/NAME); config_checks.py refuses any other in these words.
PART_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,39}$")
PART_NAME_WORDS = "1-40 letters, digits, '_', '.' or '-'"

# Several eval sets in one run (eval.sets): each set's figures are the unprefixed eval
# names with the set's name after `eval/` (`eval/gsm8k/accuracy`, `eval/gsm8k/pass@8`).
# The first set, the headline, is also recorded under the unprefixed names.
EVAL_SET_NAME_RE = PART_NAME_RE


def in_eval_set(eval_set: str, name: str) -> str:
    """An eval metric of one eval set: (`gsm8k`, `eval/accuracy`) -> `eval/gsm8k/accuracy`.
    An empty set name is the run's one unnamed set: the name itself."""
    if not eval_set:
        return name
    if not is_eval(name) or split_eval_set(name)[0] is not None:
        raise ValueError(f"{name!r} is not an unprefixed eval metric")
    prefixed = f"{EVAL_PREFIX}{eval_set}/{name.removeprefix(EVAL_PREFIX)}"
    base = _entry(name)
    if base is not None and prefixed not in TABLE:
        _metric(prefixed, f"{base.description} (eval set {eval_set})", base.unit, base.higher_is_better)
    return prefixed


def split_eval_set(name: str) -> tuple[str | None, str]:
    """(`gsm8k`, `eval/accuracy`) of `eval/gsm8k/accuracy`; (None, name) of any other name."""
    if not is_eval(name):
        return None, name
    eval_set, slash, rest = name.removeprefix(EVAL_PREFIX).partition("/")
    if not slash or not EVAL_SET_NAME_RE.match(eval_set):
        return None, name
    return eval_set, f"{EVAL_PREFIX}{rest}"


# Reward components (reward.components, and a plugin's named parts: grpoctl/reward_specs.py).
REWARD_COMPONENT_PREFIX = "train/reward/"


def reward_component(name: str) -> str:
    """One reward component's mean over the step's rollouts, unweighted (`train/reward/brevity`)."""
    return _metric(
        f"{REWARD_COMPONENT_PREFIX}{name}",
        f"mean of the reward component {name!r} over the step's rollouts (before its weight)",
        "reward",
        True,
    )


def is_reward_component(name: str) -> bool:
    """A reward component's series (any name)."""
    return name.startswith(REWARD_COMPONENT_PREFIX)


# The level curriculum (data.curriculum.*, data/curriculum.py): one series per level of the
# training problems, recorded only by runs that draw by level (`train/level/3/accuracy`).
LEVEL_PREFIX = "train/level/"


# Each level's series: its description, unit and direction, as MetricInfo has them.
LEVEL_SERIES = {
    "accuracy": (
        "mean answer grade of the step's rollouts of level {level} (recorded when the step drew that level)",
        "fraction",
        True,
    ),
    "weight": ("the curriculum's chance of drawing level {level} for each of the step's problems", "fraction", None),
    "prompts": ("problems of level {level} the step drew", "count", None),
}


def split_level_series(name: str) -> tuple[int, str] | None:
    """(3, "accuracy") of `train/level/3/accuracy`; None for a name that is no level's series."""
    level, _, what = name.removeprefix(LEVEL_PREFIX).partition("/")
    if not name.startswith(LEVEL_PREFIX) or not level.isdigit() or what not in LEVEL_SERIES:
        return None
    return int(level), what


def level_series(level: int, what: str) -> str:
    """One level's series (`train/level/3/accuracy`): `what` is accuracy (the step's sampled
    accuracy on the level), weight (the curriculum's weight of the level when the step drew)
    or prompts (the step's problems of the level)."""
    description, unit, higher_is_better = LEVEL_SERIES[what]
    return _metric(f"{LEVEL_PREFIX}{level}/{what}", description.format(level=level), unit, higher_is_better)


# --------------------------------------------------------------------------- time/ and mem/

STEP_TIME = _metric("time/step", "seconds of one whole GRPO step", "s", False)
# The compute axis beside the counted ones (rollouts, optimizer updates): wall time is not
# one, since under contention the same step took 0.54 s in one run and 0.90 s in another.
STEP_CPU = _metric(
    "time/cpu",
    "CPU-seconds the trainer's process spent in one whole GRPO step (every thread, user and system; "
    "a vLLM engine's own processes are not counted)",
    "s",
    False,
)
MEM_PEAK = _metric("mem/peak", "highest memory seen at any phase boundary of the step", "MiB", False)
MEM_VLLM_POOL = _metric(
    "mem/vllm_pool",
    "vLLM's memory pool in sleep mode (its weights and KV cache), left out of the other mem/ figures; "
    "on the device only while vLLM is awake (recorded on CUDA with sleep mode)",
    "MiB",
    None,
)

# Throughput, the figures the speed goals are stated in: what a phase processed per second
# of it (train/phases.py: Phases.count_tokens). Under time/, with the seconds they divide.
ROLLOUT_TOKENS_PER_S = _metric(
    "time/rollout_tokens_per_s",
    "response tokens generated per second of the step's rollout phase (every round of dynamic sampling)",
    "tokens/s",
    True,
)
TRAIN_TOKENS_PER_S = _metric(
    "time/train_tokens_per_s",
    "tokens through the policy's forward and backward passes (prompt and response, no padding; each epoch "
    "again) per second of the step's train phase",
    "tokens/s",
    True,
)
# The phase whose seconds each throughput divides by.
THROUGHPUT_OF_PHASE = {"rollout": ROLLOUT_TOKENS_PER_S, "train": TRAIN_TOKENS_PER_S}

TIME_PREFIX = "time/"
MEM_PREFIX = "mem/"
EVAL_PREFIX = "eval/"

# The phases a GRPO step times (train/step.py); their metrics come from the functions below.
PHASES = ("rollout", "reward", "old_log_probs", "train", "backward", "optimizer", "weight_sync", "eval")


def phase_time(phase: str) -> str:
    """Seconds spent in one phase of the step (`time/rollout`)."""
    return f"{TIME_PREFIX}{phase}"


def mem_peak_after(phase: str) -> str:
    """Peak memory during a phase, MiB: on CUDA PyTorch's allocated bytes less vLLM's pool,
    on CPU the resident set (train/memory.py says exactly what each counts)."""
    return f"{MEM_PREFIX}peak_after_{phase}"


def mem_reserved_after(phase: str) -> str:
    """Memory held at the end of a phase, MiB: on CUDA PyTorch's reserved bytes less vLLM's
    pool, on CPU the resident set."""
    return f"{MEM_PREFIX}reserved_after_{phase}"


def mem_device_free_after(phase: str) -> str:
    """Device memory still free at the end of a phase, by the driver (CUDA) or the system (CPU), MiB."""
    return f"{MEM_PREFIX}device_free_after_{phase}"


# Every per-phase memory series, three per phase: what a lean snapshot leaves out (registry/compressed.py).
PHASE_MEMORY = tuple(name(p) for p in PHASES for name in (mem_peak_after, mem_reserved_after, mem_device_free_after))

for _phase in PHASES:
    _metric(phase_time(_phase), f"seconds in the step's {_phase} phase", "s", False)
    _metric(mem_peak_after(_phase), f"peak memory at the end of the {_phase} phase", "MiB", False)
    _metric(mem_reserved_after(_phase), f"memory held at the end of the {_phase} phase", "MiB", False)
    _metric(mem_device_free_after(_phase), f"device memory free at the end of the {_phase} phase", "MiB", None)


def is_eval(name: str) -> bool:
    """An eval series: a handful of points, one per eval, never one per step."""
    return name.startswith(EVAL_PREFIX)


def is_cost(name: str) -> bool:
    """Seconds, throughput or memory: none says anything about learning (and lower is better
    but for throughput, whose table entries say so)."""
    return name.startswith((TIME_PREFIX, MEM_PREFIX))


def _entry(name: str) -> MetricInfo | None:
    """The table's entry; a pass@k or maj@k of any k, a reward component of any name, and
    either inside an eval set, and a curriculum level's series, is made on first sight (a
    reader may see a name its own process never wrote)."""
    if name in TABLE:
        return TABLE[name]
    eval_set, base = split_eval_set(name)
    if is_sampled_score(base):
        kind, _, k = base.removeprefix(EVAL_PREFIX).partition("@")
        if k.isdigit() and int(k) >= 1:
            (pass_at if kind == "pass" else maj_at)(int(k))
    if eval_set is not None and base in TABLE:
        in_eval_set(eval_set, base)  # a set's figure reads as its unprefixed one
    if name not in TABLE and is_reward_component(name) and NAME_RE.match(name):
        reward_component(name.removeprefix(REWARD_COMPONENT_PREFIX))
    level = split_level_series(name)
    if name not in TABLE and level is not None:
        level_series(*level)
    return TABLE.get(name)


def lower_is_better(name: str) -> bool:
    """How `compare` picks a metric's best point: the table's direction, else by its family."""
    info = _entry(name)
    if info is not None and info.higher_is_better is not None:
        return not info.higher_is_better
    return is_cost(name) or "loss" in name or "grad_norm" in name


def describe(name: str) -> MetricInfo | None:
    """The table's entry for a name, or None for a name no writer of grpoctl's makes."""
    return _entry(name)
