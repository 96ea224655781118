"""The GRPO recipe: the outer loop over rollout batches and the inner loop of updates.

    for step in 1..n_grpo_steps:
        prompts   <- the next rollout_batch_size / group_size training problems
        rollouts  <- group_size completions per prompt (hf or vLLM backend)
        rewards   <- the reward function on each completion
        advantages<- rewards normalised within each group
        [old log-probs, once, when rollouts are reused off-policy]
        for epoch in 1..epochs_per_rollout_batch:
            for each train batch: accumulate microbatch gradients, clip, optimizer step
        sync the new weights into the rollout backend
        [eval every N steps]; record the step; [checkpoint every M steps]

A "step" is a GRPO step. Figures taken per optimizer step are recorded with their
optimizer-step index and summarised per GRPO step. Each step is committed to the registry
in one transaction, so a crash loses at most the step in flight.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from grpoctl.config import derived_sizes
from grpoctl.grpo import (
    collate_prompt_and_output_ids,
    get_response_log_probs_shared_prompts,
    grpo_microbatch_train_step,
    normalize_group_rewards,
    summarize_group_rewards,
)
from grpoctl.prompts import format_prompt
from grpoctl.rewards import get_reward_fn, grading_stats
from grpoctl.rollout.base import Rollouts, SamplingSettings


class Diverged(Exception):
    """A non-finite loss or gradient: the run stops, keeping its last good checkpoint."""


@dataclass
class RolloutBatch:
    """One GRPO step's rollouts as training tensors, all (batch, seq) or (batch,)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor
    raw_rewards: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    stats: dict = field(default_factory=dict)  # train/* figures of the rollouts
    scores: list[dict] = field(default_factory=list)  # each rollout's reward dict

    @property
    def seq_lengths(self) -> torch.Tensor:
        """(batch,) positions up to and including each row's last response token."""
        positions = torch.arange(self.response_mask.shape[1]).expand_as(self.response_mask)
        return torch.where(self.response_mask, positions + 1, 0).amax(dim=1).clamp(min=1)


def generate_rollouts(backend, prompts: list[str], cfg, step: int) -> Rollouts:
    """group_size completions per prompt; a blown-up policy shows here first, as nan probabilities."""
    try:
        return backend.generate(prompts, cfg.rollout.group_size, rollout_sampling(cfg), seed=cfg.seed * 1_000_003 + step)
    except RuntimeError as exc:
        # torch's sampler refuses nan/inf probabilities with this message; anything else
        # (a CUDA fault, an OOM) is a crash, not a divergence.
        if "probability tensor contains" in str(exc):
            raise Diverged(f"non-finite probabilities while sampling at step {step}: {str(exc).splitlines()[0]}") from exc
        raise


def check_finite_weights(model, step: int) -> None:
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise Diverged(f"non-finite weights in {name} after step {step}")


def rollout_sampling(cfg) -> SamplingSettings:
    r = cfg.rollout
    return SamplingSettings(temperature=r.temperature, top_p=r.top_p, min_tokens=r.min_tokens,
                            max_tokens=r.max_tokens, stop=tuple(r.stop))


def score_rollouts(cfg, rollouts: Rollouts, truths: list[str]) -> tuple[torch.Tensor, torch.Tensor, dict, list[dict]]:
    """Rewards, group-normalised advantages, their summary, and per-rollout scores."""
    reward_fn = get_reward_fn(cfg.prompt.reward)
    scores = [reward_fn(text, truth) for text, truth in zip(rollouts.response_texts, truths)]
    raw = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
    advantages = normalize_group_rewards(raw, cfg.rollout.group_size, cfg.loss.advantage_eps,
                                         cfg.loss.use_std_normalization)
    summary = summarize_group_rewards(
        raw, cfg.rollout.group_size,
        format_rewards=torch.tensor([s["format_reward"] for s in scores]),
        answer_rewards=torch.tensor([s["answer_reward"] for s in scores]),
    )
    return advantages, raw, summary, scores


@torch.inference_mode()
def log_probs_in_batches(model, batch: RolloutBatch, microbatch: int) -> torch.Tensor:
    """Log-probs of the rollout tokens under `model`, without building a graph: (batch, seq)."""
    device = next(model.parameters()).device
    out = []
    for i in range(0, batch.input_ids.shape[0], microbatch):
        rows = slice(i, i + microbatch)
        out.append(get_response_log_probs_shared_prompts(
            model, batch.input_ids[rows].to(device), batch.labels[rows].to(device),
            batch.response_mask[rows].to(device))["log_probs"].float().cpu())
    return torch.cat(out)


def train_on_rollouts(cfg, model, optimizer, scheduler, batch: RolloutBatch, step: int, opt_step: int,
                      memory=None):
    """The inner loop: epochs over the rollout batch in train batches of microbatches.

    Returns (per-optimizer-step metrics, their per-GRPO-step summary, the next opt_step).
    With a MemoryTracker, the summary also holds memory after backward and after the
    optimizer step (the highest over this GRPO step's optimizer steps).
    """
    sizes = derived_sizes(cfg)
    loop, loss_cfg = cfg.loop, cfg.loss
    device = next(model.parameters()).device
    n = batch.input_ids.shape[0]
    per_opt: list[tuple[int, dict]] = []
    mem: dict[str, float] = {}
    entropy_sum = entropy_tokens = 0.0
    generator = torch.Generator().manual_seed(cfg.seed * 100_003 + step)
    for _epoch in range(loop.epochs_per_rollout_batch):
        order = torch.randperm(n, generator=generator) if sizes.off_policy else torch.arange(n)
        for start in range(0, n, loop.train_batch_size):
            micro_stats: list[dict] = []
            batch_tokens = int(batch.response_mask[order[start : start + loop.train_batch_size]].sum())
            for m in range(start, start + loop.train_batch_size, sizes.microbatch_size):
                idx = order[m : m + sizes.microbatch_size]
                # Rows are right-padded to the longest sequence of the whole rollout batch;
                # cut this microbatch to its own longest, so one long rollout does not make
                # every forward pass (and its vocabulary-sized logits) pay for it.
                width = int(batch.seq_lengths[idx].max())
                mask = batch.response_mask[idx, :width].to(device)
                # Each distinct prompt of the microbatch runs once (a GRPO group shares one).
                out = get_response_log_probs_shared_prompts(model, batch.input_ids[idx, :width].to(device),
                                                            batch.labels[idx, :width].to(device), mask,
                                                            return_token_entropy=True)
                entropy_sum += float((out["token_entropy"].float() * mask).sum())
                entropy_tokens += float(mask.sum())
                _, meta = grpo_microbatch_train_step(
                    policy_log_probs=out["log_probs"],
                    response_mask=mask,
                    gradient_accumulation_steps=loop.gradient_accumulation_steps,
                    loss_type=loss_cfg.loss_type,
                    raw_rewards=batch.raw_rewards[idx].unsqueeze(-1).to(device),
                    advantages=batch.advantages[idx].unsqueeze(-1).to(device),
                    # on-policy, the rollout policy is this very forward pass
                    old_log_probs=(out["log_probs"].detach() if batch.old_log_probs is None
                                   else batch.old_log_probs[idx, :width].to(device)),
                    cliprange=loss_cfg.cliprange,
                    length_normalization=loss_cfg.length_normalization,
                    normalize_constant=float(cfg.rollout.max_tokens),
                    cliprange_high=loss_cfg.cliprange_high,
                    importance_level=loss_cfg.importance_level,
                    ref_log_probs=None if batch.ref_log_probs is None else batch.ref_log_probs[idx, :width].to(device),
                    kl_beta=loss_cfg.kl_beta,
                    batch_response_tokens=batch_tokens,
                )
                if not math.isfinite(meta["loss"]):
                    raise Diverged(f"non-finite loss at step {step} (optimizer step {opt_step})")
                micro_stats.append(meta)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optimizer.max_grad_norm))
            if not math.isfinite(grad_norm):
                raise Diverged(f"non-finite gradient norm at step {step} (optimizer step {opt_step})")
            lr = optimizer.param_groups[0]["lr"]
            mem = _max_merge(mem, memory.boundary("backward")) if memory else mem
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            mem = _max_merge(mem, memory.boundary("optimizer")) if memory else mem
            per_opt.append((opt_step, _opt_summary(micro_stats, grad_norm, lr)))
            opt_step += 1
    summary = _mean_over(per_opt)
    summary["train/grad_norm_max"] = max(v["train/grad_norm"] for _, v in per_opt)
    summary["train/token_entropy"] = entropy_sum / max(entropy_tokens, 1.0)
    return per_opt, summary | mem, opt_step


def _max_merge(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: max(a.get(k, float("-inf")), b.get(k, float("-inf"))) for k in a.keys() | b.keys()}


def _opt_summary(micro_stats: list[dict], grad_norm: float, lr: float) -> dict:
    out = {"train/grad_norm": grad_norm, "train/lr": lr}
    for key in ("loss", "clip_fraction", "ratio_mean", "ratio_min", "ratio_max", "kl"):
        values = [s[key] for s in micro_stats if key in s and math.isfinite(s[key])]
        if values:
            agg = min if key == "ratio_min" else max if key == "ratio_max" else lambda v: sum(v) / len(v)
            out[f"train/{key}"] = agg(values)
    return out


def _mean_over(per_opt: list[tuple[int, dict]]) -> dict:
    keys = {k for _, v in per_opt for k in v}
    out = {}
    for key in keys:
        values = [v[key] for _, v in per_opt if key in v]
        if key.endswith("ratio_min"):
            out[key] = min(values)
        elif key.endswith("ratio_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    return out


def add_old_and_ref_log_probs(cfg, model, ref_model, batch: RolloutBatch) -> None:
    """Log-probs of the rollouts under the rollout policy (off-policy only) and the reference.

    On-policy the old policy *is* the current one: its log-probs are the detached ones of
    the training forward pass, so this extra pass is skipped.
    """
    microbatch = derived_sizes(cfg).microbatch_size
    if derived_sizes(cfg).off_policy:
        batch.old_log_probs = log_probs_in_batches(model, batch, microbatch)
    if ref_model is not None:
        batch.ref_log_probs = log_probs_in_batches(ref_model, batch, microbatch)


def make_rollout_batch(cfg, rollouts: Rollouts, truths: list[str], pad_token_id: int) -> RolloutBatch:
    """Rollouts -> training tensors, rewards and advantages."""
    advantages, raw, summary, scores = score_rollouts(cfg, rollouts, truths)
    ids = collate_prompt_and_output_ids(rollouts.prompt_ids, rollouts.response_ids, pad_token_id)
    batch = RolloutBatch(ids["input_ids"], ids["labels"], ids["response_mask"], advantages, raw)
    lengths = [len(r) for r in rollouts.response_ids]
    batch.stats = {
        "train/reward": summary["reward_mean"],
        "train/reward_std": summary["reward_std"],
        "train/format_reward": summary.get("format_reward_mean", 0.0),
        "train/answer_reward": summary.get("answer_reward_mean", 0.0),
        "train/zero_std_group_fraction": summary["zero_std_group_fraction"],
        "train/response_length": sum(lengths) / len(lengths),
        "train/response_clip_fraction": sum(rollouts.truncated) / len(rollouts.truncated),
    }
    batch.scores = scores
    return batch


def step_prompts(cfg, stream, template: str) -> tuple[list[str], list[str], list]:
    """The next batch of prompts, their ground truths repeated group_size times, and examples."""
    examples = stream.next_batch(derived_sizes(cfg).prompts_per_rollout_batch)
    prompts = [format_prompt(template, ex.question) for ex in examples]
    truths = [ex.answer for ex in examples for _ in range(cfg.rollout.group_size)]
    return prompts, truths, examples


@contextmanager
def timed(timings: dict, name: str):
    """Add the block's elapsed seconds to timings[name]."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


def sample_rows(prompts: list[str], rollouts: Rollouts, truths: list[str], scores: list[dict], k: int) -> list[dict]:
    """k completions to store, one per group (rollout i of group i), so a reader sees k problems."""
    group = len(rollouts.response_texts) // max(len(prompts), 1)
    rows = []
    for i in range(min(k, len(prompts))):
        j = i * group + i % group
        rows.append(dict(kind="train", prompt=prompts[i], response=rollouts.response_texts[j], ground_truth=truths[j],
                         reward=scores[j]["reward"], format_reward=scores[j]["format_reward"],
                         answer_reward=scores[j]["answer_reward"]))
    return rows


def grading_timeouts() -> int:
    return grading_stats()["timeouts"]

