"""The GRPO engine: pure tensor functions, named and shaped as in Stanford CS336 (2025) assignment 5.

Start with reference.py: the default step in one function of plain torch. Then, for
the engine's version with every ablation, read in this order: tokenization (sequences
-> shifted ids and a response mask), logprobs (model -> per-token log p and entropy), advantages (rewards -> group-relative
advantages), masked (reductions over the response only), losses (per-token
policy-gradient losses), plugins (a loss or estimator named by the config, built-in or
a user's), train_step (per-token loss -> scalar -> backward).
"""

from .advantages import (
    ADVANTAGE_FUNCTIONS,
    AdvantageInputs,
    compute_group_normalized_rewards,
    normalize_group_rewards,
    success_count_shares,
    summarize_group_rewards,
)
from .logprobs import compute_entropy, get_response_log_probs, get_response_log_probs_shared_prompts
from .losses import (
    IMPORTANCE_LEVELS,
    LOSS_FUNCTIONS,
    LOSS_TYPES,
    LossInputs,
    add_kl_penalty,
    compute_cispo_loss,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_importance_ratio,
    compute_k3_kl,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
)
from .masked import masked_mean, masked_mean_or_zero, masked_min_max, masked_normalize
from .tokenization import collate_prompt_and_output_ids, tokenize_prompt_and_output
from .train_step import (
    LENGTH_NORMALIZATIONS,
    PolicyGradientLoss,
    grpo_microbatch_train_step,
    sft_microbatch_train_step,
    token_mean_loss,
)

__all__ = [
    "ADVANTAGE_FUNCTIONS",
    "IMPORTANCE_LEVELS",
    "LENGTH_NORMALIZATIONS",
    "LOSS_FUNCTIONS",
    "LOSS_TYPES",
    "AdvantageInputs",
    "LossInputs",
    "PolicyGradientLoss",
    "add_kl_penalty",
    "collate_prompt_and_output_ids",
    "compute_cispo_loss",
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_importance_ratio",
    "compute_k3_kl",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "get_response_log_probs",
    "get_response_log_probs_shared_prompts",
    "grpo_microbatch_train_step",
    "masked_mean",
    "masked_mean_or_zero",
    "masked_min_max",
    "masked_normalize",
    "normalize_group_rewards",
    "sft_microbatch_train_step",
    "success_count_shares",
    "summarize_group_rewards",
    "token_mean_loss",
    "tokenize_prompt_and_output",
]
