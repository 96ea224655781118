"""The configuration tree: every key with its type, its default and its help, once.

Every key has a typed default here, so a yaml file only says what differs (the seed's
lesson: an ablation variant is a minimal diff, easy to read and to reproduce). Key names
follow the seed and CS336 (rollout_batch_size, group_size, loss_type, ...).

The defaults are the addition task (`grpoctl train addition`): a tiny model on synthetic
2-digit addition that learns on a laptop CPU in minutes. `grpoctl train`'s own default is
the lab, a yaml diff from these (grpoctl/configs/lab.yaml). `experiments/rtx4090.yaml` and `experiments/h100.yaml` hold the
seed's GPU configurations for Qwen2.5-Math-1.5B on MATH.

Each key's help is its `help` metadata, and docs/configuration.md's table of keys is made
from it (`python scripts/config_table.py --write`; tests/test_config_table.py fails when
the two drift). Comments here say why a default is what it is. Changing a default
changes the hash of every run that did not set the key: see run_identity.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpoctl.config_keys import (
    ADAMW_LR_NOTE,
    BACKENDS,
    DATA_SOURCES,
    DEVICES,
    DTYPES,
    IMPORTANCE_LEVELS,
    LENGTH_NORMALIZATIONS,
    LOSS_TYPES,
    SEED_LIMIT,
    key,
    key_rules,
    section,
)


@dataclass
class TinyModelConfig:
    """The embedded default model: a Qwen2-architecture net with a character tokenizer.

    head_dim = hidden_size / num_attention_heads = 64, which vLLM's CPU kernels accept.
    """

    hidden_size: int = key(128, "tiny model width", range="[1, inf)")
    num_hidden_layers: int = key(2, "tiny model depth", range="[1, inf)")
    num_attention_heads: int = key(2, "attention heads (head_dim = hidden_size / heads)", range="[1, inf)")
    num_key_value_heads: int = key(1, "key/value heads (grouped-query attention)", range="[1, inf)")
    intermediate_size: int = key(512, "MLP width", range="[1, inf)")


@dataclass
class WarmStartConfig:
    """Supervised warm-start of the tiny model on synthetic worked solutions (built once, cached)."""

    # At most: it stops at target_accuracy, usually after 500-900 steps.
    steps: int = key(1500, "at most this many supervised steps", range="[1, inf)")
    batch_size: int = key(32, "warm-start batch size", range="[1, inf)")
    lr: float = key(1e-3, "warm-start learning rate", range="(0, 1]", note=ADAMW_LR_NOTE)
    # GRPO needs a base that is right sometimes (too weak: no reward signal; too strong:
    # nothing to learn).
    target_accuracy: float = key(0.36, "stop once greedy accuracy on a held-out probe reaches this", range="(0, 1]")
    check_every: int = key(25, "steps between probe checks", range="[1, inf)")
    save_steps: list[int] = key(
        [100, 200], "extra checkpoints kept (`tiny@N` starts from step N: sft-init)", range="[1, inf)"
    )


@dataclass
class ModelConfig:
    """The policy."""

    path: str = key(
        "tiny",
        "`tiny` = the addition task's model (built and warm-started by grpoctl); `tiny@N` = its warm-start at "
        "step N; `lab` = the lab's base, `lab-sft@N` = it after N narrow SFT steps (100, 400, 800); "
        "else a Hugging Face directory or hub id, e.g. Qwen/Qwen2.5-Math-1.5B",
        non_empty=True,
        aliases=("model",),
    )
    # Pure bf16 (auto's choice on a GPU) rounds most small updates away; bf16-mixed keeps
    # float32 master weights and AdamW states for 2x the memory of both (rules.MIXED_PRECISION).
    dtype: str = key(
        "auto",
        "auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16 | bf16-mixed (fp32 weights and AdamW states, "
        "forward passes under bf16 autocast)",
        choices=DTYPES,
    )
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass (the 24 GB preset)")
    # Off by default: the addition task and the lab keep their recorded numbers bit for bit.
    # At Qwen's 151,936-entry vocabulary the full fp32 logits are ~0.6 GB per 1k tokens, in
    # forward and again as their gradient; the GPU presets chunk them.
    logprob_chunk_tokens: int = key(
        0,
        "apply the LM head and log-softmax this many positions at a time, in forward and backward, so the "
        "full (tokens x vocabulary) logits never exist; 0 = off",
        range="[0, inf)",
        note="0 is off",
        neutral=True,
    )
    tiny: TinyModelConfig = section(TinyModelConfig)
    warmstart: WarmStartConfig = section(WarmStartConfig)


@dataclass
class SyntheticConfig:
    """The synthetic arithmetic task."""

    min_digits: int = key(2, "fewest digits per operand", range="[1, 18]")
    max_digits: int = key(2, "most digits per operand", range="[1, 18]")
    ops: list[str] = key(["+"], "operators drawn from")
    num_operands: int = key(2, "operands per problem", range="[2, 16]")


@dataclass
class DataConfig:
    """Training and eval problems."""

    source: str = key(
        "synthetic",
        "synthetic | lab (graded + and - chains, data/lab.py) | math | gsm8k | jsonl | hub",
        choices=DATA_SOURCES,
    )
    train_path: str | None = key(None, "jsonl file, or hub dataset name for source=hub", non_empty=True)
    eval_path: str | None = key(None, "jsonl file, or hub dataset name for source=hub", non_empty=True)
    train_split: str = key("train", "the hub dataset's split to train on (source=hub)", non_empty=True)
    eval_split: str = key("test", "the hub dataset's split to evaluate on (source=hub)", non_empty=True)
    question_field: str = key("problem", "the record's key holding the question", non_empty=True)
    answer_field: str = key("answer", "the record's key holding the answer", non_empty=True)
    train_size: int | None = key(
        None,
        "cap on training examples (synthetic: how many to draw)",
        range="[1, inf)",
        note="null for all of them",
        nullable=True,
    )
    # For training on one dataset and evaluating on another (GSM8K, then MATH500).
    eval_source: str | None = key(
        None,
        "the eval data's own format; null: the same as source",
        choices=DATA_SOURCES,
        null_means="the same as data.source",
        neutral=True,
    )
    eval_question_field: str | None = key(
        None, "the eval data's question key; null: question_field", non_empty=True, neutral=True
    )
    eval_answer_field: str | None = key(
        None, "the eval data's answer key; null: answer_field", non_empty=True, neutral=True
    )
    synthetic: SyntheticConfig = section(SyntheticConfig)


@dataclass
class PromptConfig:
    """The prompt template and its reward."""

    template: str = key(
        "r1_zero_compact",
        "a packaged template (r1_zero_compact, r1_zero, question_only) or a path to a file",
        non_empty=True,
        aliases=("template",),
    )
    reward: str = key(
        "r1_zero",
        "r1_zero | question_only (must match the template's answer format), or a reward plugin: "
        "package.module:function or path/to/file.py:function (grpoctl/reward_specs.py)",
        aliases=("reward",),
    )


@dataclass
class VLLMConfig:
    """The vLLM rollout backend."""

    gpu_memory_utilization: float = key(0.3, "share of the GPU vLLM may take", range="(0, 1]")
    enable_prefix_caching: bool = key(True, "reuse a group's shared prompt")
    sleep_mode: bool = key(True, "free vLLM's memory during training (CUDA only; off on CPU, with one logged line)")
    # Level 2 is safe for grpoctl: every wake-up is followed by a push of every parameter
    # (VLLMRolloutBackend.sync_weights), and vLLM restores its buffers itself.
    sleep_level: int = key(
        1,
        "1: offload the weights to host memory while asleep; 2: discard them (grpoctl pushes every parameter "
        "after waking), which saves their size in host memory (the GPU presets)",
        range="[1, 2]",
    )
    max_model_len: int = key(
        2048,
        "longest prompt + response; a problem whose prompt leaves no room is dropped at load (counted in runs show)",
        range="[1, inf)",
    )
    cpu_kvcache_space_gb: float = key(1.0, "KV cache size on CPU", range="(0, inf)")
    # torch.compile at engine start costs ~22 s on CPU even for the tiny models (9 s when
    # its cache is warm), against ~2 s eager; steps then run eager. The tests' engines use it.
    enforce_eager: bool = key(
        False, "skip torch.compile and CUDA graphs: the engine starts in seconds, steps may be slower", neutral=True
    )


@dataclass
class RolloutConfig:
    """Sampling the rollouts."""

    backend: str = key("hf", "hf | vllm | auto (vllm when installed)", choices=BACKENDS, aliases=("backend",))
    rollout_batch_size: int = key(256, "completions per GRPO step", range="[1, inf)", aliases=("rollout_batch_size",))
    group_size: int = key(
        8,
        "completions per prompt",
        range="[2, inf)",
        note="advantages compare the rollouts of a group, so at least 2",
        aliases=("group_size",),
    )
    temperature: float = key(1.0, "sampling temperature", range="(0, inf)", aliases=("temperature",))
    top_p: float = key(1.0, "nucleus sampling", range="(0, 1]")
    min_tokens: int = key(4, "fewest new tokens", range="[0, inf)")
    max_tokens: int = key(32, "most new tokens", range="[1, inf)")
    stop: list[str] = key(["</answer>"], "stop strings (kept in the response)", non_empty=True)
    # Bounds the transformers backend's KV cache on a GPU.
    generation_batch_size: int = key(256, "sequences per generate call (hf backend)", range="[1, inf)")
    # train/dynamic_sampling.py says how a batch still short at the cap is trained.
    dynamic_sampling: bool = key(
        False,
        "DAPO's dynamic sampling: drop groups whose rewards are all equal, draw more prompts to fill the batch",
        neutral=True,
    )
    dynamic_sampling_max_rounds: int = key(
        10, "at most this many rounds of prompts per step (dynamic_sampling)", range="[1, inf)", neutral=True
    )
    # vLLM releases monthly; grpoctl reads and tests a range of them (rules.VLLM_RANGE).
    allow_untested_vllm: bool = key(
        False,
        "run a vLLM newer than the tested range (pyproject.toml's gpu extra); an older one is always refused",
        neutral=True,
    )
    vllm: VLLMConfig = section(VLLMConfig)


@dataclass
class LossConfig:
    """The policy-gradient loss (grpoctl/grpo/)."""

    loss_type: str = key(
        "grpo_clip",
        "grpo_clip | grpo_no_clip | reinforce_with_baseline | no_baseline",
        choices=LOSS_TYPES,
        aliases=("loss", "loss_type"),
    )
    length_normalization: str = key(
        "mean",
        "mean | constant | microbatch | token = DAPO's token-mean over each train batch (grpo/train_step.py)",
        choices=LENGTH_NORMALIZATIONS,
        aliases=("length_normalization",),
    )
    use_std_normalization: bool = key(
        True, "divide group advantages by the group's std", aliases=("use_std_normalization", "std")
    )
    advantage_eps: float = key(1e-6, "added to the std before dividing", range="[0, inf)", aliases=("advantage_eps",))
    cliprange: float = key(
        0.2, "PPO clip range", range="(0, 1)", note="the lower clip is 1 - cliprange", aliases=("cliprange",)
    )
    cliprange_high: float | None = key(
        None,
        "upper clip bound (DAPO's clip-higher); null: cliprange",
        range="(0, inf)",
        note="null for symmetric clipping",
        nullable=True,
    )
    importance_level: str = key("token", "token | sequence (GSPO)", choices=IMPORTANCE_LEVELS)
    # No reference model is kept at 0.
    kl_beta: float = key(0.0, "k3 KL penalty to the initial policy; 0: off", range="[0, inf)", aliases=("kl_beta",))
    # They stay in their group's mean and std: TRL's mask_truncated_completions.
    mask_truncated: bool = key(False, "completions cut off at rollout.max_tokens get zero loss weight", neutral=True)
    entropy_coef: float = key(
        0.0,
        "entropy bonus: coef x token entropy subtracted, length-normalised like the loss; 0: off",
        range="[0, inf)",
        note="0 turns the entropy bonus off",
        neutral=True,
    )
    # TRL uses 2.
    tis_cap: float | None = key(
        None,
        "truncated importance sampling: each token's loss x min(pi_old / pi_sampler, cap); null: off",
        range="[1, inf)",
        note="null turns TIS off; a cap below 1 would down-weight agreeing tokens",
        nullable=True,
        neutral=True,
    )


@dataclass
class RewardConfig:
    """The reward's weighted components and plugins (reward_specs.py), and its shaping before group normalization (grpo/shaping.py)."""

    overlong_buffer_len: int | None = key(
        None,
        "DAPO's soft overlong punishment over the last N tokens before rollout.max_tokens; null: off",
        range="[1, inf)",
        note="null turns the soft overlong punishment off",
        nullable=True,
        neutral=True,
    )
    overlong_penalty_factor: float = key(
        1.0, "the punishment at rollout.max_tokens, in reward", range="[0, inf)", neutral=True
    )
    # A control, not a recipe: if the policy still gains, the gain is not the reward's.
    shuffled_control: bool = key(
        False, "learn from rewards permuted within each rollout batch (train/reward logs the true ones)", neutral=True
    )
    # Each component is recorded per step as train/reward/<name>; prompt.reward stays the
    # grader of the evals and of train/answer_reward.
    components: list = key(
        [],
        "weighted rewards summed into the reward: a list of {name, spec, weight}, each spec a built-in "
        "reward or a plugin; empty: prompt.reward alone",
        neutral=True,
    )
    # CPU time, so that a busy machine does not fail a plugin (rewards/pool.py).
    timeout_s: float = key(
        5.0,
        "CPU seconds a reward plugin may take per response, in its worker process; over it scores 0",
        range="(0, inf)",
        note="CPU seconds per plugin call",
        neutral=True,
    )
    # In-process grading has no start-up or pickling cost, which suits the tiny tasks; a
    # step's 256 MATH answers (or an eval's 1024) grade several times faster on N cores.
    grading_workers: int = key(
        0,
        "worker processes that grade answers with math-verify, each batch spread over them; 0: in the trainer's "
        "main thread",
        range="[0, 1024]",
        note="0 grades in the main thread",
        neutral=True,
    )


@dataclass
class OptimizerConfig:
    """The optimizer and the learning-rate schedule."""

    name: str = key("adamw", "adamw | adamw8bit (bitsandbytes, GPU)", choices=("adamw", "adamw8bit"))
    # Bounded: an AdamW step moves each weight by about lr, so above 1 a value can only be
    # a typo, and near float32's limit (lr=1e38) torch's step overflows with a traceback.
    lr: float = key(3e-4, "peak learning rate", range="(0, 1]", note=ADAMW_LR_NOTE, aliases=("lr",))
    betas: list[float] = key([0.9, 0.95], "AdamW betas", range="[0, 1)", length=2)
    weight_decay: float = key(0.0, "AdamW weight decay", range="[0, inf)")
    warmup_steps: int = key(10, "linear warm-up, in warmup_unit steps", range="[0, inf)")
    warmup_unit: str = key(
        "optimizer_step",
        "what warmup_steps and the cosine horizon count: optimizer_step | grpo_step (as the seed counted them)",
        choices=("optimizer_step", "grpo_step"),
        neutral=True,
    )
    lr_schedule: str = key(
        "cosine", "cosine (decay to min_lr_ratio) | constant (the seed's GPU runs)", choices=("constant", "cosine")
    )
    min_lr_ratio: float = key(0.1, "the cosine's floor, as a share of lr", range="[0, 1]")
    max_grad_norm: float = key(
        1.0, "gradient clipping", range="(0, inf)", note="gradients are scaled down to this norm"
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


@dataclass
class Config:
    """A run's whole configuration."""

    name: str | None = key(None, "run name; generated when unset")
    group: str | None = key(None, "sweep / ablation the run belongs to")
    variant: str | None = key(None, "the run's variant within its group")
    seed: int = key(0, "seed of sampling, shuffling and initialisation", range=f"[0, {SEED_LIMIT}]")
    model: ModelConfig = section(ModelConfig)
    data: DataConfig = section(DataConfig)
    prompt: PromptConfig = section(PromptConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    reward: RewardConfig = section(RewardConfig)
    loss: LossConfig = section(LossConfig)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    loop: LoopConfig = section(LoopConfig)
    eval: EvalConfig = section(EvalConfig)
    checkpoint: CheckpointConfig = section(CheckpointConfig)
    logging: LoggingConfig = section(LoggingConfig)
    runtime: RuntimeConfig = section(RuntimeConfig)


KEY_RULES = {k.path: k for k in key_rules(Config)}


def documented_keys() -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) of every key, in the tree's order."""
    return [(k.path, k.default, k.help) for k in key_rules(Config)]
