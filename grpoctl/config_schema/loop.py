"""The loop's keys: steps, evals, checkpoints, logging and the runtime.

Part of the config tree; grpoctl/config_schema/__init__.py says how the tree works.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoctl.config_keys import (
    DEVICES,
    SEED_LIMIT,
    key,
    section,
)


@dataclass
class LoopConfig:
    """The inner loop: how the rollouts are trained on."""

    n_grpo_steps: int = key(
        100, "GRPO steps (rollout batches) in the run", range="[1, inf)", aliases=("steps", "n_grpo_steps")
    )
    epochs_per_rollout_batch: int = key(
        1,
        "passes over each rollout batch (more than 1: off-policy)",
        range="[1, inf)",
        aliases=("epochs", "epochs_per_rollout_batch"),
    )
    train_batch_size: int = key(256, "rollouts per optimizer step", range="[1, inf)", aliases=("train_batch_size",))
    gradient_accumulation_steps: int = key(
        8,
        "microbatches per optimizer step (microbatch = train_batch_size / this)",
        range="[1, inf)",
        aliases=("gradient_accumulation_steps",),
    )


@dataclass
class SampledEvalConfig:
    """pass@k and maj@k: n samples per problem on a subset of the eval problems (off while n is 0)."""

    # Off by default: n samples of `subset` problems cost n/eval.subset*subset greedy evals.
    n: int = key(0, "samples per problem; 0 = no sampled eval", range="[0, 1024]", note="0 is off", neutral=True)
    k: list[int] = key(
        [],
        "the k of pass@k and maj@k, each <= n; empty: 1 and n",
        range="[1, 1024]",
        note="each at most eval.sampled.n",
        neutral=True,
    )
    subset: int = key(
        128, "problems sampled, drawn from the eval subset by eval.subset_seed", range="[1, inf)", neutral=True
    )
    every: int = key(
        50,
        "GRPO steps between sampled evals; the last step always has one (0: only it)",
        range="[0, inf)",
        note="0 samples only at the last step",
        neutral=True,
    )
    temperature: float = key(1.0, "sampling temperature", range="(0, inf)", neutral=True)
    top_p: float = key(1.0, "nucleus sampling", range="(0, 1]", neutral=True)


@dataclass
class EvalConfig:
    """Evals on a held-out subset."""

    every: int = key(
        10,
        "GRPO steps between evals; 0 = only at start and end",
        range="[0, inf)",
        note="0 evaluates only at the start and the end",
    )
    subset: int = key(512, "problems in the eval subset", range="[1, inf)")
    subset_seed: int = key(0, "which subset", range=f"[0, {SEED_LIMIT}]")
    batch_size: int = key(
        256, "eval problems per generate call (the GPU presets: the whole subset in one vLLM call)", range="[1, inf)"
    )
    greedy: bool = key(True, "greedy decoding (the tiny default); the GPU presets sample")
    temperature: float = key(
        1.0, "sampling temperature when not greedy", range="(0, inf)", note="eval.greedy=true decodes greedily"
    )
    top_p: float = key(1.0, "nucleus sampling when not greedy", range="(0, 1]")
    max_tokens: int = key(32, "most new tokens", range="[1, inf)")
    at_start: bool = key(True, "also evaluate before the first step (step 0)")
    group_by: list = key(
        [],
        "record fields to break accuracy down by, beside level and subject (which are always broken down "
        "where the data has them)",
        neutral=True,
    )
    sampled: SampledEvalConfig = section(SampledEvalConfig)
    # Each set: {name, source, path, subset, split, question_field, answer_field}; all but
    # the name default to data.eval_* (and eval.subset), so `[{name: math500}]` is today's eval.
    sets: list = key(
        [],
        "several eval sets, each {name, source, path, subset} (data.eval_* and eval.subset fill what is "
        "left out); recorded as eval/NAME/*, the first also as eval/*; empty: the one set of data.eval_*",
        neutral=True,
    )


@dataclass
class CheckpointConfig:
    """Checkpoints and their retention."""

    every: int = key(
        50,
        "GRPO steps between checkpoints; the last step is always saved",
        range="[0, inf)",
        note="0 saves only the last step",
    )
    keep_last: int = key(1, "newest checkpoints kept", range="[1, inf)", note="resume needs the newest")
    keep_best: int = key(1, "best checkpoints kept, by eval accuracy", range="[0, inf)")
    dir: str = key("outputs/runs", "where checkpoints are written", non_empty=True)


@dataclass
class LoggingConfig:
    """What is shown and stored."""

    samples_per_step: int = key(4, "completions stored in the registry per GRPO step", range="[0, inf)")
    live: bool = key(True, "the rich live view; off for sweeps' child processes and CI logs")


@dataclass
class RuntimeConfig:
    """Where and how the run executes (not part of its identity where it changes only its speed)."""

    device: str = key("auto", "auto | cpu | cuda", choices=DEVICES)
    # Not part of a run's identity: it changes how fast a run goes, not what it computes.
    threads: int = key(
        0,
        "torch threads on CPU; 0 = auto: 1 for a model under 50M parameters, else one per core, capped by "
        "$GRPOCTL_THREADS (`sweep --parallel K` sets cores / K per run)",
        range="[0, inf)",
        note="0 is torch's default",
    )
    cache_dir: str = key("outputs/cache", "where the tiny warm-start is built", non_empty=True)
    # The grace period must cover what is left of the step.
    on_signal: str = key(
        "finish_step",
        "what the first SIGINT/SIGTERM does: finish_step (finish the step in flight, then checkpoint) | "
        "checkpoint_now (abandon a step that has not updated the weights, checkpoint the last completed one)",
        choices=("finish_step", "checkpoint_now"),
        neutral=True,
    )
