"""The default GRPO step in plain torch: start reading here.

This is what `grpoctl train` computes in one GRPO step with the default loss settings
(loss.loss_type=grpo_clip, loss.length_normalization=mean, loss.use_std_normalization=true),
written as one function. With one train batch and one epoch (the default) the step is
on-policy. With several train batches or epochs it is off-policy: every optimizer step
after the first trains on rollouts sampled by older weights, so the old log-probs are
taken once, first, and PPO's ratio and clip do real work.
The engine (train/step.py over grpoctl/grpo/) computes the same numbers, split into
CS336's functions, with the ablations as config keys, faster forward passes, metrics,
fault handling and a registry; tests/test_reference_step.py checks that both give the
same losses, the same gradients and the same weights on the same rollouts.

Shapes: B rollouts (B = n_prompts * group_size, each group contiguous), L the longest
prompt + response, V the vocabulary.
"""

from __future__ import annotations

import torch

from grpoctl.rules import is_off_policy


def reference_grpo_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    rewards: torch.Tensor,
    *,
    group_size: int,
    pad_token_id: int,
    train_batch_size: int,
    gradient_accumulation_steps: int,
    epochs: int = 1,
    shuffle_seed: int = 0,
    cliprange: float = 0.2,
    advantage_eps: float = 1e-6,
    max_grad_norm: float = 1.0,
) -> list[float]:
    """Update `model` on one rollout batch; returns each optimizer step's loss.

    prompt_ids[b], response_ids[b]: the token ids of rollout b, as sampled by `model`'s
    current weights. rewards: (B,) the reward of each rollout (1.0 right, 0.0 wrong, ...).
    shuffle_seed: the seed of the order in which an off-policy step visits the rollouts.
    """
    # 1. Advantages: each reward against its own group's (no critic).
    grouped = rewards.float().reshape(-1, group_size)  # (n_prompts, group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    advantages = centered / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    # A group whose rewards are all equal teaches nothing: exactly 0, never 0 / eps noise.
    flat = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    advantages = torch.where(flat, torch.zeros_like(advantages), advantages).reshape(-1)  # (B,)

    # 2. The rollouts as one right-padded batch. Position t predicts token t + 1, so the
    #    inputs drop the last position and the labels the first.
    lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
    ids = torch.full((len(lengths), max(lengths)), pad_token_id, dtype=torch.long)  # (B, L)
    is_response = torch.zeros(ids.shape, dtype=torch.bool)  # (B, L)
    for b, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        ids[b, : len(p) + len(r)] = torch.tensor(p + r)
        is_response[b, len(p) : len(p) + len(r)] = True
    input_ids, labels, mask = ids[:, :-1], ids[:, 1:], is_response[:, 1:]  # each (B, L - 1)
    device = next(model.parameters()).device

    def response_log_probs(rows: torch.Tensor) -> torch.Tensor:
        """(b,) row indices -> (b, L - 1): log p(label) under the current weights, 0 off the response."""
        logits = model(input_ids[rows].to(device)).logits.float()  # (b, L - 1, V)
        y = labels[rows].to(device).unsqueeze(-1)
        # log p(label) = its logit - logsumexp over the vocabulary, in float32.
        log_probs = logits.gather(-1, y).squeeze(-1) - logits.logsumexp(-1)
        # Pads hold anything; zeroing them keeps exp() below finite (0 * inf = nan).
        return torch.where(mask[rows].to(device), log_probs, torch.zeros_like(log_probs))

    # 3. The old log-probs: the rollouts under the policy that sampled them, so taken once,
    #    before any optimizer step moves the weights. Every ratio below compares with them,
    #    not with the weights of the moment.
    microbatch_size = train_batch_size // gradient_accumulation_steps
    rows_in_order = torch.arange(len(lengths))
    with torch.no_grad():
        old_log_probs = torch.cat([response_log_probs(rows) for rows in rows_in_order.split(microbatch_size)])

    # 4. The inner loop: for each epoch, one optimizer step per train batch, its gradient
    #    accumulated over microbatches. Dividing each microbatch's loss by their count makes
    #    the accumulated gradient that of the train batch's mean loss. Off-policy, each epoch
    #    visits the rollouts in a fresh random order.
    shuffle = torch.Generator().manual_seed(shuffle_seed)
    off_policy = is_off_policy(epochs, train_batch_size, len(lengths))
    step_losses = []
    for _epoch in range(epochs):
        order = torch.randperm(len(lengths), generator=shuffle) if off_policy else rows_in_order
        for train_rows in order.split(train_batch_size):
            step_loss = 0.0
            for rows in train_rows.split(microbatch_size):
                log_probs = response_log_probs(rows)  # (b, L - 1), with its graph
                m = mask[rows].to(device)  # (b, L - 1)
                a = advantages[rows].to(device).unsqueeze(-1)  # (b, 1): one advantage per sequence

                # grpo_clip: PPO's clipped surrogate. On the first optimizer step the weights are
                # the sampling ones, so the ratio is 1 in value and its gradient that of log p;
                # later it drifts, and the clip stops a token's ratio from moving past 1 +- cliprange.
                ratio = torch.exp(log_probs - old_log_probs[rows])  # (b, L - 1)
                clipped = torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
                per_token = -torch.minimum(ratio * a, clipped * a)  # (b, L - 1)

                # Length normalization "mean": each sequence's mean over its response tokens,
                # then the mean over sequences.
                per_sequence = (per_token * m).sum(-1) / m.sum(-1).clamp_min(1)  # (b,)
                loss = per_sequence.mean() / gradient_accumulation_steps  # scalar
                loss.backward()
                step_loss += float(loss.detach())

            # 5. Clip the accumulated gradient's norm, then step.
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_losses.append(step_loss)
    return step_losses
