"""One GRPO step, top to bottom: `grpo_step`, then its helpers in the order it calls them.

    prompts     <- the next rollout_batch_size / group_size training problems (drawn by
                   level with data.curriculum, which notes each level's grades and
                   updates its weights when the step is recorded: data/curriculum.py)
    rollouts    <- group_size completions per prompt (hf or vLLM backend)
    rewards     <- the reward function on each completion (and any overlong penalty), or the
                   weighted sum of reward.components, plugins included (rewards/plugins.py);
                   with dynamic sampling, rounds of these until enough groups have signal
                   (train/dynamic_sampling.py)
    advantages  <- rewards normalised within each group
    old log-probs, once, when rollouts are reused off-policy (and the KL reference's)
    inner loop: for each epoch, for each train batch: accumulate microbatch gradients,
                clip, optimizer step
    weight sync <- the new weights into the rollout backend
    eval        <- every eval.every steps and at the last
    record      <- the step's metrics, samples and eval, in one registry transaction
    checkpoint  <- every checkpoint.every steps and at the last

A "step" is a GRPO step; figures taken per optimizer step are recorded with their
optimizer-step index and summarised per GRPO step. The math is grpoctl/grpo/ (CS336's
functions); rewards, advantages and the training tensors are train/scoring.py; eval,
record and checkpoint are train/eval_and_checkpoint.py; the outer loop
over steps, and a run's start and end, are train/trainer.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

from grpoctl import metrics
from grpoctl.config import Config, derived_sizes
from grpoctl.data import Example
from grpoctl.evals.sampled import sampled_eval_due
from grpoctl.grpo import (
    get_response_log_probs_shared_prompts,
)
from grpoctl.prompts import format_prompt
from grpoctl.rollout.base import Rollouts, SamplingSettings
from grpoctl.train.context import RunContext
from grpoctl.train.dynamic_sampling import sample_informative_groups
from grpoctl.train.eval_and_checkpoint import (
    checkpoint,
    checkpoint_due,
    dropped_metrics,
    eval_due,
    evaluate_policy,
    sample_rows,
)
from grpoctl.train.faults import fault_point
from grpoctl.train.graded import Graded
from grpoctl.train.phases import Phases
from grpoctl.train.scoring import RolloutBatch, grade_rollouts, rollout_batch, score_rollouts
from grpoctl.train.stop import abortable


class Diverged(Exception):
    """A non-finite loss or gradient: the run stops, keeping its last good checkpoint."""


def grpo_step(run: RunContext, step: int) -> None:
    """GRPO step `step` (1-based): sample, score, update the policy, record, checkpoint.

    Until the inner loop starts nothing has touched the weights, the optimizer or the
    scheduler, so a stop request may abandon the step there (`abortable`: the outer loop
    then rewinds the data and the RNG). Each phase is timed and its memory measured. The
    helpers hold the fault points where the fault tests stop or kill the process
    (train/faults.py): step-start, step-rollouts, step-train, step-record, in that order.
    """
    cfg, state = run.cfg, run.state
    phases = Phases(run.memory)
    with phases.step():
        with abortable(run.stop):
            # Prompts, rollouts, rewards and advantages.
            prompts, rollouts, truths, batch = sample_and_score(run, step, phases)
            # Old log-probs, once, when the rollouts are reused off-policy (and the KL reference's).
            with phases("old_log_probs"):
                add_old_and_ref_log_probs(run, batch)
        per_opt_step, token_entropy, sampler_gap = train_on_rollouts(run, batch, step, phases)
        check_finite_weights(run.model, step)
        # The new weights into the rollout backend (a no-op for hf, which samples from the policy).
        with phases("weight_sync"):
            run.backend.sync_weights(run.model)
        figures = {
            **batch.stats,
            **step_metrics(per_opt_step, token_entropy),
            **sampler_gap,
            **dropped_metrics(run.data),
        }
        figures |= curriculum_metrics(run)
        samples = sample_rows(prompts, rollouts, truths, batch.scores, cfg.logging.samples_per_step)
        eval_rows: list[dict] = []
        if eval_due(cfg, step) or sampled_eval_due(cfg, step):
            with phases("eval"):
                eval_metrics, eval_samples, eval_rows = evaluate_policy(run, step)
            figures |= eval_metrics
            samples += eval_samples
    figures |= phases.metrics
    record_step(run, step, figures, opt_metrics=per_opt_step, samples=samples, eval=eval_rows)
    if checkpoint_due(cfg, step):
        checkpoint(run)
    run.progress.update(step, figures, state.last_accuracy)


# --------------------------------------------------------------------------- prompts and rollouts


def sample_and_score(run: RunContext, step: int, phases: Phases) -> tuple[list[str], Rollouts, list[str], RolloutBatch]:
    """The step's prompts, their rollouts and ground truths, and the rollouts as a scored
    RolloutBatch; with dynamic sampling, rounds of them until enough groups carry signal."""
    cfg = run.cfg
    fault_point("step-start", step)
    if cfg.rollout.dynamic_sampling:
        prompts, graded, sampling_stats = sample_informative_groups(
            lambda round: draw_round(run, step, round, phases),
            cfg.rollout.group_size,
            derived_sizes(cfg).prompts_per_rollout_batch,
            cfg.rollout.dynamic_sampling_max_rounds,
        )
        fault_point("step-rollouts", step)
        run.backend.before_training()
        batch = rollout_batch(run, graded)
        batch.stats |= sampling_stats
        return prompts, graded.rollouts, graded.truths, batch
    # group_size completions for each of the next problems.
    with phases("rollout"):
        prompts, truths, examples = next_prompts(run)
        rollouts = generate_rollouts(run, prompts, step)
        phases.count_tokens("rollout", response_tokens(rollouts))
    fault_point("step-rollouts", step)
    run.backend.before_training()  # vLLM sleep mode frees its memory for the backward passes
    # Rewards, and advantages: each reward against the others of its group.
    with phases("reward"):
        batch = score_rollouts(run, rollouts, truths, examples)
    observe_levels(run, examples, batch.scores)
    return prompts, rollouts, truths, batch


def next_prompts(run: RunContext) -> tuple[list[str], list[str], list[Example]]:
    """The next batch of prompts, their ground truths repeated group_size times (one per
    rollout), and their problems (what a reward plugin is given)."""
    examples = run.stream.next_batch(derived_sizes(run.cfg).prompts_per_rollout_batch)
    prompts = [format_prompt(run.data.template, ex.question) for ex in examples]
    truths = [ex.answer for ex in examples for _ in range(run.cfg.rollout.group_size)]
    return prompts, truths, examples


def rollout_seed(seed: int, step: int, round: int = 0) -> int:
    """The sampling seed of a step's rollouts; dynamic sampling's further rounds get their own."""
    return seed * 1_000_003 + step + round * 1_000_000_007


def generate_rollouts(run: RunContext, prompts: list[str], step: int, round: int = 0) -> Rollouts:
    """group_size completions per prompt; a blown-up policy shows here first, as nan probabilities."""
    cfg = run.cfg
    try:
        return run.backend.generate(
            prompts, cfg.rollout.group_size, rollout_sampling(cfg), seed=rollout_seed(cfg.seed, step, round)
        )
    except RuntimeError as exc:
        # torch's sampler refuses nan/inf probabilities with this message; anything else
        # (a CUDA fault, an OOM) is a crash, not a divergence.
        if "probability tensor contains" in str(exc):
            raise Diverged(
                f"non-finite probabilities while sampling at step {step}: {str(exc).splitlines()[0]}"
            ) from exc
        raise


def response_tokens(rollouts: Rollouts) -> int:
    """Tokens the backend generated for `rollouts` (what rollout throughput counts)."""
    return sum(len(ids) for ids in rollouts.response_ids)


def draw_round(run: RunContext, step: int, round: int, phases: Phases) -> tuple[list[str], Graded]:
    """One round of dynamic sampling: the next prompts, their rollouts and their grades."""
    with phases("rollout"):
        prompts, truths, examples = next_prompts(run)
        rollouts = generate_rollouts(run, prompts, step, round=round)
        phases.count_tokens("rollout", response_tokens(rollouts))
    with phases("reward"):
        graded = grade_rollouts(run, rollouts, truths, examples)
    observe_levels(run, examples, graded.scores)
    return prompts, graded


def observe_levels(run: RunContext, examples: list[Example], scores: list[dict]) -> None:
    """The curriculum notes how each level's rollouts did (their answer grades); no-op without one."""
    if run.curriculum is not None:
        run.curriculum.observe(examples, [min(max(float(s["answer_reward"]), 0.0), 1.0) for s in scores])


def curriculum_metrics(run: RunContext) -> dict:
    """The step's figures per level of the curriculum: each level's weight when the step drew,
    and the problems drawn and sampled accuracy of each level it drew; none without one."""
    curriculum = run.curriculum
    if curriculum is None:
        return {}
    out = {metrics.level_series(level, "weight"): weight for level, weight in curriculum.weights().items()}
    for level, (accuracy, prompts) in curriculum.step_outcomes().items():
        out[metrics.level_series(level, "accuracy")] = accuracy
        out[metrics.level_series(level, "prompts")] = prompts
    return out


def rollout_sampling(cfg: Config) -> SamplingSettings:
    r = cfg.rollout
    return SamplingSettings(
        temperature=r.temperature, top_p=r.top_p, min_tokens=r.min_tokens, max_tokens=r.max_tokens, stop=tuple(r.stop)
    )


# --------------------------------------------------------------------------- old log-probs


def add_old_and_ref_log_probs(run: RunContext, batch: RolloutBatch) -> None:
    """Log-probs of the rollouts under the rollout policy (off-policy only) and the KL reference.

    On-policy the old policy *is* the current one: its log-probs are the detached ones of
    the training forward pass, so this extra pass is skipped.
    """
    sizes, chunk = derived_sizes(run.cfg), run.cfg.model.logprob_chunk_tokens
    if sizes.off_policy:
        batch.old_log_probs = log_probs_in_batches(run.model, batch, sizes.microbatch_size, run.autocast, chunk)
    if run.ref_model is not None:
        batch.ref_log_probs = log_probs_in_batches(run.ref_model, batch, sizes.microbatch_size, run.autocast, chunk)


@torch.inference_mode()
def log_probs_in_batches(
    model: torch.nn.Module,
    batch: RolloutBatch,
    microbatch: int,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    chunk_tokens: int = 0,
) -> torch.Tensor:
    """Log-probs of the rollout tokens under `model`, without building a graph: (batch, seq).
    Under `autocast` and with the same `chunk_tokens` (model.logprob_chunk_tokens) as the
    training forward runs, so that the ratio to them is 1 where the weights have not moved."""
    device = next(model.parameters()).device
    out = []
    for i in range(0, batch.input_ids.shape[0], microbatch):
        rows = slice(i, i + microbatch)
        with autocast():
            log_probs = get_response_log_probs_shared_prompts(
                model,
                batch.input_ids[rows].to(device),
                batch.labels[rows].to(device),
                batch.response_mask[rows].to(device),
                chunk_tokens=chunk_tokens,
            )["log_probs"]
        out.append(log_probs.float().cpu())
    return torch.cat(out)


# --------------------------------------------------------------------------- the inner loop


def train_on_rollouts(
    run: RunContext, batch: RolloutBatch, step: int, phases: Phases
) -> tuple[list[tuple[int, dict]], float, dict]:
    """The inner loop: epochs over the rollouts, in train batches of microbatches, one
    optimizer step per train batch. Returns each optimizer step's index and figures, the
    token entropy over every response token trained on, and the sampler/trainer log-prob
    gap's figures (sampler_gap_metrics; none when the sampler reports no log-probs)."""
    cfg, state, sizes = run.cfg, run.state, derived_sizes(run.cfg)
    fault_point("step-train", step)
    per_opt_step: list[tuple[int, dict]] = []
    micro_stats: list[dict] = []
    entropy_sum, entropy_tokens = 0.0, 0.0
    generator = torch.Generator().manual_seed(shuffle_seed(cfg.seed, step))
    with phases("train"):
        for _epoch in range(cfg.loop.epochs_per_rollout_batch):
            n = batch.input_ids.shape[0]
            order = torch.randperm(n, generator=generator) if sizes.off_policy else torch.arange(n)
            for rows in order.split(cfg.loop.train_batch_size):
                tokens = int(batch.loss_mask(rows).sum())  # length_normalization=token divides by these
                phases.count_tokens("train", int(batch.seq_lengths[rows].sum()))
                losses: list[dict] = []
                with phases("backward"):
                    for idx in rows.split(sizes.microbatch_size):
                        stats, entropy, entropy_count = train_microbatch(run, batch, idx, tokens, step)
                        losses.append(stats)
                        micro_stats.append(stats)
                        entropy_sum, entropy_tokens = entropy_sum + entropy, entropy_tokens + entropy_count
                    grad_norm = clip_gradients(run, step)
                    lr = run.optimizer.param_groups[0]["lr"]
                with phases("optimizer"):
                    run.optimizer.step()
                    run.scheduler.step()
                    run.optimizer.zero_grad(set_to_none=True)
                per_opt_step.append((state.opt_step, optimizer_step_metrics(losses, grad_norm, lr)))
                state.opt_step += 1
    return per_opt_step, entropy_sum / max(entropy_tokens, 1.0), sampler_gap_metrics(micro_stats)


def shuffle_seed(seed: int, step: int) -> int:
    """The seed of the order in which an off-policy step's inner loop visits the rollouts."""
    return seed * 100_003 + step


def train_microbatch(
    run: RunContext, batch: RolloutBatch, idx: torch.Tensor, train_batch_tokens: int, step: int
) -> tuple[dict, float, float]:
    """Forward and backward of the rollouts `idx` (of a train batch of `train_batch_tokens`
    response tokens); its loss figures, its token entropy summed over its response tokens,
    and their count."""
    device = next(run.model.parameters()).device
    # Rows are right-padded to the longest sequence of the whole rollout batch; cut this
    # microbatch to its own longest, so one long rollout does not make every forward pass
    # (and its vocabulary-sized logits) pay for it.
    width = int(batch.seq_lengths[idx].max())
    mask = batch.response_mask[idx, :width].to(device)
    # Each distinct prompt of the microbatch runs once (a GRPO group shares one). The
    # entropy is a diagnostic without gradient, unless an entropy bonus trains on it.
    # The forward under bf16 autocast for model.dtype=bf16-mixed; its backward (in the loss
    # step below) outside it, as torch.autocast asks.
    with run.autocast():
        out = get_response_log_probs_shared_prompts(
            run.model,
            batch.input_ids[idx, :width].to(device),
            batch.labels[idx, :width].to(device),
            mask,
            return_token_entropy=True,
            entropy_with_grad=run.loss.entropy_coef > 0,
            chunk_tokens=run.cfg.model.logprob_chunk_tokens,
        )
    # On-policy, the rollout policy is this very forward pass; its weights are those last synced.
    old_log_probs = (
        out["log_probs"].detach() if batch.old_log_probs is None else batch.old_log_probs[idx, :width].to(device)
    )
    sampled = None if batch.sampled_log_probs is None else batch.sampled_log_probs[idx, :width].to(device)
    _, stats = run.loss.microbatch_train_step(
        out["log_probs"],
        batch.loss_mask(idx)[:, :width].to(device),  # without masked (truncated) rows
        run.cfg.loop.gradient_accumulation_steps,
        raw_rewards=batch.raw_rewards[idx].unsqueeze(-1).to(device),
        advantages=batch.advantages[idx].unsqueeze(-1).to(device),
        old_log_probs=old_log_probs,
        ref_log_probs=None if batch.ref_log_probs is None else batch.ref_log_probs[idx, :width].to(device),
        batch_response_tokens=train_batch_tokens,
        token_entropy=out["token_entropy"] if run.loss.entropy_coef > 0 else None,
        sampled_log_probs=sampled,
    )
    if sampled is not None:
        stats |= sampler_gap_sums(old_log_probs, sampled, mask)
    if not math.isfinite(stats["loss"]):
        raise Diverged(f"non-finite loss at step {step} (optimizer step {run.state.opt_step})")
    return stats, float((out["token_entropy"].detach().float() * mask).sum()), float(mask.sum())


def sampler_gap_sums(old_log_probs: torch.Tensor, sampled_log_probs: torch.Tensor, mask: torch.Tensor) -> dict:
    """|trainer - sampler| log-probs over a microbatch's response tokens (all (batch, seq)):
    their sum, count and largest, for sampler_gap_metrics to combine."""
    gap = (old_log_probs.detach().float() - sampled_log_probs.float()).abs()[mask.bool()]
    return {
        "sampler_gap_sum": float(gap.sum()),
        "sampler_gap_tokens": int(gap.numel()),
        "sampler_gap_max": float(gap.max()) if gap.numel() else 0.0,
    }


def sampler_gap_metrics(micro_stats: list[dict]) -> dict:
    """The step's sampler/trainer gap (metrics.SAMPLER_GAP_MEAN, _MAX) from its microbatches'
    sums; {} when the sampler reported no log-probs. Off-policy, every epoch sees the same
    old log-probs, so repeating them leaves the mean and the largest as they are."""
    parts = [s for s in micro_stats if "sampler_gap_sum" in s]
    tokens = sum(s["sampler_gap_tokens"] for s in parts)
    if not tokens:
        return {}
    return {
        metrics.SAMPLER_GAP_MEAN: sum(s["sampler_gap_sum"] for s in parts) / tokens,
        metrics.SAMPLER_GAP_MAX: max(s["sampler_gap_max"] for s in parts),
    }


def clip_gradients(run: RunContext, step: int) -> float:
    """Scale the accumulated gradient down to optimizer.max_grad_norm; its norm before."""
    grad_norm = float(torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.optimizer.max_grad_norm))
    if not math.isfinite(grad_norm):
        raise Diverged(f"non-finite gradient norm at step {step} (optimizer step {run.state.opt_step})")
    return grad_norm


def optimizer_step_metrics(micro_stats: list[dict], grad_norm: float, lr: float) -> dict:
    """One optimizer step's figures from its microbatches' (means; the ratio's extremes)."""
    out = {metrics.GRAD_NORM: grad_norm, metrics.LR: lr}
    for key, name in metrics.LOSS_STATISTICS.items():
        values = [s[key] for s in micro_stats if key in s and math.isfinite(s[key])]
        if values:
            agg = min if key.endswith("_min") else max if key.endswith("_max") else lambda v: sum(v) / len(v)
            out[name] = agg(values)
    return out


def check_finite_weights(model: torch.nn.Module, step: int) -> None:
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise Diverged(f"non-finite weights in {name} after step {step}")


def step_metrics(per_opt_step: list[tuple[int, dict]], token_entropy: float) -> dict:
    """The GRPO step's summary of its optimizer steps (means; extremes for *_min and *_max;
    the highest gradient norm), with `token_entropy`, the step's over every response token trained on."""
    keys = {k for _, v in per_opt_step for k in v}
    out = {}
    for key in keys:
        values = [v[key] for _, v in per_opt_step if key in v]
        if key.endswith("_min"):  # the ratio's extremes, the largest log-prob mismatch
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            out[key] = sum(values) / len(values)
    out[metrics.GRAD_NORM_MAX] = max(v[metrics.GRAD_NORM] for _, v in per_opt_step)
    out[metrics.TOKEN_ENTROPY] = token_entropy
    return out


# --------------------------------------------------------------------------- record


def record_step(run: RunContext, step: int, figures: dict, **rows: list) -> None:
    """One transaction: the step's metrics and its `rows` (opt_metrics, samples, eval) are
    all recorded, or none is; then the run's state is at this step."""
    fault_point("step-record", step)
    run.registry.log_step(run.run_id, step, figures, **rows)
    run.state.step, run.state.data_position = step, run.stream.position
    if run.curriculum is not None:  # the step's outcomes move the weights from the next step on
        run.curriculum.commit()
        run.state.curriculum = run.curriculum.state()
