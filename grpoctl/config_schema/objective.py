"""The update's keys: the reward, the loss and advantages, and the optimizer.

Part of the config tree; grpoctl/config_schema/__init__.py says how the tree works.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoctl.config_keys import (
    ADAMW_LR_NOTE,
    ADVANTAGE_ESTIMATORS,
    IMPORTANCE_LEVELS,
    LENGTH_NORMALIZATIONS,
    LOSS_TYPES,
    key,
)


@dataclass
class LossConfig:
    """The policy-gradient loss (grpoctl/grpo/)."""

    loss_type: str = key(
        "grpo_clip",
        "grpo_clip | grpo_no_clip | reinforce_with_baseline | no_baseline | cispo, or a loss plugin: "
        "package.module:function or path/to/file.py:function (docs/loss-plugins.md)",
        choices=LOSS_TYPES,
        aliases=("loss", "loss_type"),
        plugin=True,
    )
    length_normalization: str = key(
        "mean",
        "mean | constant | microbatch | token = DAPO's token-mean over each train batch (grpo/train_step.py)",
        choices=LENGTH_NORMALIZATIONS,
        aliases=("length_normalization",),
    )
    use_std_normalization: bool = key(
        True,
        "divide the advantages by a std: the group's (batch_std: the rollout batch's)",
        aliases=("use_std_normalization", "std"),
    )
    advantage_estimator: str = key(
        "group_mean",
        "each reward's baseline: group_mean | rloo (the mean of the other answers of its group) | batch_std "
        "(group mean, divided by the rollout batch's std), or an advantage plugin (docs/loss-plugins.md)",
        choices=ADVANTAGE_ESTIMATORS,
        aliases=("advantage_estimator", "estimator"),
        neutral=True,
        plugin=True,
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
    # MiniMax-M1's CISPO caps pi / pi_old and stops its gradient; as TRL (epsilon_high under
    # loss_type=cispo) and ScaleRL (epsilon_max) write it, the cap is on the ratio itself.
    cispo_ratio_max: float = key(
        5.0,
        "cispo: the importance ratio's cap (TRL's epsilon_high for cispo, ScaleRL's epsilon_max)",
        range="(0, inf)",
        neutral=True,
    )
    # MiniMax-M1 set no lower bound (a large epsilon_low), and TRL has none.
    cispo_ratio_min: float | None = key(
        None,
        "cispo: the importance ratio's floor; null: none",
        range="[0, inf)",
        note="null for no floor",
        nullable=True,
        neutral=True,
    )
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
