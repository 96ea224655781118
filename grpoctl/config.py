"""The whole configuration of a run: structured defaults + a yaml diff + dotted overrides.

Every key has a typed default here, so a yaml file only says what differs (the seed's
lesson: an ablation variant is a minimal diff, easy to read and to reproduce). Key names
follow the seed and CS336 (rollout_batch_size, group_size, loss_type, ...).

The defaults are the embedded default: a tiny model on synthetic arithmetic that learns on
a laptop CPU in minutes. `experiments/rtx4090.yaml` and `experiments/h100.yaml` hold the
seed's GPU configurations for Qwen2.5-Math-1.5B on MATH.

This module imports no torch: the sweep launcher and `--dry-run` resolve configs cheaply.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpoctl.config_checks import validate
from grpoctl.errors import UserError
from grpoctl.rules import is_off_policy

# --------------------------------------------------------------------------- the tree


@dataclass
class TinyModelConfig:
    """The embedded default model: a Qwen2-architecture net with a character tokenizer.

    head_dim = hidden_size / num_attention_heads = 64, which vLLM's CPU kernels accept.
    """

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    intermediate_size: int = 512


@dataclass
class WarmStartConfig:
    """Supervised warm-start of the tiny model on synthetic worked solutions (built once, cached)."""

    steps: int = 1500  # at most: it stops at target_accuracy, usually after 500-900 steps
    batch_size: int = 32
    lr: float = 1e-3
    # Stop early once greedy accuracy on a held-out probe reaches this: GRPO needs a base
    # that is right sometimes (too weak: no reward signal; too strong: nothing to learn).
    target_accuracy: float = 0.36
    check_every: int = 25
    save_steps: list[int] = field(default_factory=lambda: [100, 200])  # extra checkpoints for sft-init


@dataclass
class ModelConfig:
    # "tiny" = the embedded default (built and warm-started by grpoctl itself); anything
    # else is a Hugging Face model directory or hub id, e.g. Qwen/Qwen2.5-Math-1.5B.
    path: str = "tiny"
    dtype: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16
    gradient_checkpointing: bool = False
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)


@dataclass
class SyntheticConfig:
    min_digits: int = 2
    max_digits: int = 2
    ops: list[str] = field(default_factory=lambda: ["+"])
    num_operands: int = 2


@dataclass
class DataConfig:
    # synthetic | math | gsm8k | jsonl | hub
    source: str = "synthetic"
    train_path: str | None = None  # jsonl file, or hub dataset name for source=hub
    eval_path: str | None = None
    train_split: str = "train"
    eval_split: str = "test"
    question_field: str = "problem"
    answer_field: str = "answer"
    train_size: int | None = None  # cap on training examples (synthetic: how many to draw)
    # The eval data's own format, for training on one dataset and evaluating on another
    # (GSM8K, then MATH500); null: the same as source, question_field and answer_field.
    eval_source: str | None = None
    eval_question_field: str | None = None
    eval_answer_field: str | None = None
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)


@dataclass
class PromptConfig:
    # A packaged template (r1_zero, question_only, r1_zero_compact) or a path to a file.
    template: str = "r1_zero_compact"
    reward: str = "r1_zero"  # r1_zero | question_only: must match the template's answer format


@dataclass
class VLLMConfig:
    gpu_memory_utilization: float = 0.3
    enable_prefix_caching: bool = True
    sleep_mode: bool = True  # CUDA only; refused on CPU, so off there with one logged line
    sleep_level: int = 1
    max_model_len: int = 2048
    cpu_kvcache_space_gb: float = 1.0


@dataclass
class RolloutConfig:
    backend: str = "hf"  # auto | vllm | hf
    rollout_batch_size: int = 256  # completions per GRPO step
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    min_tokens: int = 4
    max_tokens: int = 32
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    # transformers backend: sequences per generate call (bounds its KV cache on a GPU)
    generation_batch_size: int = 256
    # DAPO's dynamic sampling: drop groups whose rewards are all equal and draw more prompts
    # until the batch is full, for at most dynamic_sampling_max_rounds rounds
    # (train/dynamic_sampling.py says how a batch still short at the cap is trained).
    dynamic_sampling: bool = False
    dynamic_sampling_max_rounds: int = 10
    vllm: VLLMConfig = field(default_factory=VLLMConfig)


@dataclass
class RewardConfig:
    """Reward shaping before group normalization (grpo/shaping.py); off by default."""

    # DAPO's soft overlong punishment: the last overlong_buffer_len tokens before
    # rollout.max_tokens cost up to overlong_penalty_factor of reward; null = off.
    overlong_buffer_len: int | None = None
    overlong_penalty_factor: float = 1.0


@dataclass
class LossConfig:
    loss_type: str = "grpo_clip"  # no_baseline | reinforce_with_baseline | grpo_clip | grpo_no_clip
    length_normalization: str = "mean"  # mean | constant | microbatch | token (grpo/train_step.py)
    use_std_normalization: bool = True
    advantage_eps: float = 1e-6
    cliprange: float = 0.2
    cliprange_high: float | None = None  # clip-higher (DAPO); None = symmetric
    importance_level: str = "token"  # token | sequence (GSPO)
    kl_beta: float = 0.0  # k3 KL penalty to the initial policy; 0 = off (no reference model kept)
    # Completions cut off at rollout.max_tokens get zero loss weight (they stay in their
    # group's mean and std): DAPO's overlong filtering, TRL's mask_truncated_completions.
    mask_truncated: bool = False
    # An entropy bonus: entropy_coef x token entropy is subtracted from the loss, reduced
    # with the same length normalization as the policy-gradient term; 0 = off.
    entropy_coef: float = 0.0
    # Truncated importance sampling against the sampler/trainer mismatch: each token's
    # policy-gradient loss x min(pi_old / pi_sampler, tis_cap); null = off (TRL uses 2).
    tis_cap: float | None = None


@dataclass
class OptimizerConfig:
    name: str = "adamw"  # adamw | adamw8bit (bitsandbytes, GPU)
    lr: float = 3e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.0
    warmup_steps: int = 10  # linear warm-up, in warmup_unit steps
    # What warmup_steps and the cosine horizon count: optimizer_step (one per update) or
    # grpo_step (one per rollout batch, as the seed counted them).
    warmup_unit: str = "optimizer_step"
    lr_schedule: str = "cosine"  # constant (the seed's GPU runs) | cosine (decay to min_lr_ratio)
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0


@dataclass
class LoopConfig:
    n_grpo_steps: int = 100
    epochs_per_rollout_batch: int = 1
    train_batch_size: int = 256  # rollouts per optimizer step
    gradient_accumulation_steps: int = 8  # microbatch = train_batch_size / this


@dataclass
class EvalConfig:
    every: int = 10  # GRPO steps between evals; 0 = only at start and end
    subset: int = 512
    subset_seed: int = 0
    batch_size: int = 256
    greedy: bool = True  # the tiny default evaluates greedily; the GPU presets sample
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 32
    at_start: bool = True


@dataclass
class CheckpointConfig:
    every: int = 50  # GRPO steps; the last step is always saved
    keep_last: int = 1
    keep_best: int = 1  # by eval accuracy
    dir: str = "outputs/runs"


@dataclass
class LoggingConfig:
    samples_per_step: int = 4  # completions stored in the registry per GRPO step
    live: bool = True  # the rich live view; off for sweeps' child processes and CI logs


@dataclass
class RuntimeConfig:
    device: str = "auto"  # auto | cpu | cuda
    # torch threads on CPU; 0 = grpoctl's rule (grpoctl/train/threads.py): 1 for a model
    # under 50M parameters, else one per core, capped by $GRPOCTL_THREADS. Not part of a
    # run's identity: it changes how fast a run goes, not what it computes.
    threads: int = 0
    cache_dir: str = "outputs/cache"  # the tiny warm-start lives here
    # What the first SIGINT/SIGTERM does: finish_step (finish the step in flight, then
    # checkpoint) | checkpoint_now (abandon a step that has not updated the weights yet,
    # checkpoint the last completed one). The grace period must cover what is left.
    on_signal: str = "finish_step"


@dataclass
class Config:
    name: str | None = None  # run name; generated when unset
    group: str | None = None  # sweep / ablation the run belongs to
    variant: str | None = None
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)


# Short names accepted by `sweep` and on the command line (`lr=1e-5`).
ALIASES = {
    "lr": "optimizer.lr",
    "group_size": "rollout.group_size",
    "rollout_batch_size": "rollout.rollout_batch_size",
    "loss": "loss.loss_type",
    "loss_type": "loss.loss_type",
    "length_normalization": "loss.length_normalization",
    "use_std_normalization": "loss.use_std_normalization",
    "std": "loss.use_std_normalization",
    "advantage_eps": "loss.advantage_eps",
    "cliprange": "loss.cliprange",
    "epochs": "loop.epochs_per_rollout_batch",
    "epochs_per_rollout_batch": "loop.epochs_per_rollout_batch",
    "train_batch_size": "loop.train_batch_size",
    "gradient_accumulation_steps": "loop.gradient_accumulation_steps",
    "steps": "loop.n_grpo_steps",
    "n_grpo_steps": "loop.n_grpo_steps",
    "template": "prompt.template",
    "reward": "prompt.reward",
    "temperature": "rollout.temperature",
    "model": "model.path",
    "backend": "rollout.backend",
    "kl_beta": "loss.kl_beta",
}


# --------------------------------------------------------------------------- loading


@functools.cache
def _key_tree() -> dict:
    """The defaults as plain nested dicts: what resolve_key walks (building the structured
    config costs milliseconds, and a command line may carry dozens of overrides)."""
    return OmegaConf.to_container(OmegaConf.structured(Config))  # type: ignore[return-value]


def resolve_key(key: str) -> str:
    """Map a short alias (`lr`) to its dotted path (`optimizer.lr`); check the path exists."""
    path = ALIASES.get(key, key)
    node: Any = _key_tree()
    seen = []
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(seen) or "the top level"
            valid = ", ".join(node.keys()) if isinstance(node, dict) else "none (not a section)"
            hint = " or a short alias (lr, loss, group_size, ...)" if not seen else ""
            raise UserError(f"unknown config key '{key}': valid keys at {where} are {valid}{hint}")
        node = node[part]
        seen.append(part)
    return path


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise UserError(f"override '{item}' is not key=value")
    key, raw = item.split("=", 1)
    path = resolve_key(key.strip())
    return path, parse_value(raw)


def parse_value(raw: str) -> Any:
    """A config value as a user types it: `train` overrides and `sweep --values` items alike.

    YAML's reading, so `null` is None, `true` a bool, `[a, b]` a list and `{a: 1}` a dict;
    plus one correction: YAML reads `1e-5` (no dot) as a string, and a number is what users
    mean. Anything YAML cannot read stays the string typed.
    """
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in "eE.") else int(value)
        except ValueError:
            return value
    return value


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Defaults, then the yaml diff at `path`, then dotted `key=value` overrides; validated."""
    cfg = OmegaConf.structured(Config)
    if path is not None:
        try:
            cfg = OmegaConf.merge(cfg, _read_yaml(Path(path)))
        except OmegaConfBaseException as exc:
            raise UserError(_one_line(exc)) from None
    return apply_overrides(cfg, overrides)


def apply_overrides(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> DictConfig:
    """Dotted `key=value` overrides on top of `cfg` (a copy), then validation."""
    cfg = cfg.copy()
    try:
        for item in overrides:
            key, value = _parse_override(item)
            OmegaConf.update(cfg, key, value, merge=False)
        OmegaConf.resolve(cfg)  # a yaml's ${...} interpolations: a bad one fails here, in one line
    except OmegaConfBaseException as exc:
        raise UserError(_one_line(exc)) from None
    validate(cfg)
    return cfg


def from_dict(data: dict) -> DictConfig:
    """Rebuild a validated config from a stored resolved config (for --resume and --from)."""
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), data)
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise UserError(_one_line(exc)) from None
    validate(cfg)
    return cfg


def _read_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise UserError(f"no config file at {path}")
    import yaml

    try:
        data = OmegaConf.load(path)
    except yaml.MarkedYAMLError as exc:  # multi-line: keep what is wrong and where
        line = f":{exc.problem_mark.line + 1}" if exc.problem_mark is not None else ""
        raise UserError(f"{path}{line}: invalid yaml ({exc.problem or exc.context})") from None
    except OSError as exc:
        if "Invalid loaded object type" in str(exc):  # OmegaConf's word for a scalar document
            raise UserError(f"{path}: expected a mapping of config keys, got a single value") from None
        raise UserError(f"{path}: cannot read ({exc})") from None
    except Exception as exc:  # bad encodings, recursion in deeply nested documents, ...
        raise UserError(f"{path}: invalid yaml ({(str(exc).splitlines() or [type(exc).__name__])[0]})") from None
    if not isinstance(data, DictConfig):
        raise UserError(f"{path}: expected a mapping of config keys")
    if not data and _is_blank_yaml(path):
        # An empty file is far more often a mistake (a truncated write, the wrong file)
        # than a wish for the defaults, and a run on the wrong config costs hours; `{}`
        # says "no changes" on purpose.
        raise UserError(f"{path} sets no config keys: to run the defaults give no config file, or write {{}} in it")
    # Ablation specs (experiments/*-ablation.yaml) carry base/variants, not config keys.
    if "variants" in data:
        raise UserError(f"{path} is an ablation spec: run it with `grpoctl sweep {path}`")
    return data


def _is_blank_yaml(path: Path) -> bool:
    """Empty, only comments, or a null document (`~`): yaml reads all of them as None."""
    import yaml

    try:
        return yaml.safe_load(path.read_bytes()) is None
    except (yaml.YAMLError, OSError):
        return False


def _one_line(exc: OmegaConfBaseException) -> str:
    msg = str(exc).splitlines()[0]
    key = getattr(exc, "full_key", None)
    if "Key '" in msg and "not in" in msg and key:
        try:
            resolve_key(str(key))
        except UserError as named:
            return str(named)
    if key:
        return f"{key}: {msg}"
    return msg


# --------------------------------------------------------------------------- derived


def to_dict(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def config_diff(cfg: DictConfig) -> dict:
    """The nested keys whose values differ from the defaults: what makes this run this run."""
    return _diff(to_dict(OmegaConf.structured(Config)), to_dict(cfg))


def _diff(default: dict, actual: dict) -> dict:
    out = {}
    for key, value in actual.items():
        base = default.get(key)
        if isinstance(value, dict) and isinstance(base, dict):
            sub = _diff(base, value)
            if sub:
                out[key] = sub
        elif value != base:
            out[key] = value
    return out


@dataclass(frozen=True)
class DerivedSizes:
    prompts_per_rollout_batch: int
    microbatch_size: int
    optimizer_steps_per_grpo_step: int
    off_policy: bool


def derived_sizes(cfg: DictConfig) -> DerivedSizes:
    r, loop = cfg.rollout, cfg.loop
    return DerivedSizes(
        prompts_per_rollout_batch=r.rollout_batch_size // r.group_size,
        microbatch_size=loop.train_batch_size // loop.gradient_accumulation_steps,
        optimizer_steps_per_grpo_step=loop.epochs_per_rollout_batch * r.rollout_batch_size // loop.train_batch_size,
        off_policy=is_off_policy(loop.epochs_per_rollout_batch, loop.train_batch_size, r.rollout_batch_size),
    )
