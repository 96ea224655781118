"""What a GRPO step leaves behind: its stored completions, its eval, its checkpoint.

The end of train/step.py's `grpo_step`, kept apart so that the step reads as the algorithm;
`evaluate_before_training` is step 0's eval, and `checkpoint` is also what the trainer calls
when a run stops between steps.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl import metrics
from grpoctl.evals.on_set import evaluate_set
from grpoctl.evals.sampled import sampled_eval_due
from grpoctl.rollout.base import Rollouts
from grpoctl.train.checkpoint import SavedTrainer, capture_rng, save_checkpoint, select_for_deletion
from grpoctl.train.context import RunContext
from grpoctl.train.phases import Phases

if TYPE_CHECKING:
    from grpoctl.config import Config
    from grpoctl.data.run_data import RunData


def sample_rows(prompts: list[str], rollouts: Rollouts, truths: list[str], scores: list[dict], k: int) -> list[dict]:
    """k completions to store, one per group (rollout i of group i), so a reader sees k problems."""
    group = len(rollouts.response_texts) // max(len(prompts), 1)
    rows = []
    for i in range(min(k, len(prompts))):
        j = i * group + i % group
        rows.append(
            dict(
                kind="train",
                prompt=prompts[i],
                response=rollouts.response_texts[j],
                ground_truth=truths[j],
                reward=scores[j]["reward"],
                format_reward=scores[j]["format_reward"],
                answer_reward=scores[j]["answer_reward"],
            )
        )
    return rows


def dropped_metrics(data: RunData) -> dict:
    """The count of training problems dropped for their length, recorded with every step
    when there were any (data/prompt_length.py), so a run's rows say what it trained on."""
    return {metrics.OVERLONG_TRAIN_DROPPED: data.overlong_train_dropped} if data.overlong_train_dropped else {}


def eval_due(cfg: Config, step: int) -> bool:
    """The headline eval: every eval.every steps and at the last."""
    return bool(cfg.eval.every and step % cfg.eval.every == 0) or step == cfg.loop.n_grpo_steps


def evaluate_policy(run: RunContext, step: int) -> tuple[dict, list[dict], list[dict]]:
    """The evals due at `step`, on every eval set (eval.sets; the headline set first): the
    headline eval on its subset (eval.every) and the sampled one (eval.sampled.*). Returns
    (eval/* metrics, stored completions, eval rows). Only the headline set's headline
    accuracy picks the best checkpoints."""
    figures: dict = {}
    samples: list[dict] = []
    rows: list[dict] = []
    due = ((False, step == 0 or eval_due(run.cfg, step)), (True, sampled_eval_due(run.cfg, step)))
    for index, eval_set in enumerate(run.data.sets):
        headline = index == 0
        for sampled in (kind for kind, is_due in due if is_due):
            done = evaluate_set(
                run.backend, run.cfg, eval_set, run.data.template_name, run.data.template, sampled=sampled, step=step
            )
            if headline and not sampled:
                run.state.record_eval(step, done.outcome.accuracy)
                samples += done.samples  # the headline set's completions are stored
            figures |= _named(done.figures, eval_set.name, headline)
            rows.append(done.row | {"eval_set": eval_set.name, "headline": headline})  # migration 0008
    return figures, samples, rows


def _named(figures: dict, eval_set: str, headline: bool) -> dict:
    """A set's eval/* figures under its own names (eval/SET/accuracy); the headline set's
    also under the unprefixed names, so runs with and without eval.sets compare."""
    if not eval_set:
        return figures
    named = {metrics.in_eval_set(eval_set, name): value for name, value in figures.items()}
    return (figures | named) if headline else named


def evaluate_before_training(run: RunContext) -> None:
    """Step 0: the policy before any update, evaluated and recorded (eval.at_start)."""
    phases = Phases(run.memory)
    with phases("eval"):
        figures, samples, rows = evaluate_policy(run, 0)
    run.registry.log_step(run.run_id, 0, figures | phases.metrics, samples=samples, eval=rows)


def checkpoint_due(cfg: Config, step: int) -> bool:
    return bool(cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == cfg.loop.n_grpo_steps


def checkpoint(run: RunContext) -> None:
    """Save the run at run.state.step (weights, tokenizer, state), then apply retention."""
    cfg, state, row, run_id = run.cfg, run.state, run.row, run.run_id
    saved = SavedTrainer(
        replace(state, last_checkpoint_step=state.step),
        optimizer=run.optimizer.state_dict(),
        scheduler=run.scheduler.state_dict(),
        rng=capture_rng(),
    )
    # Renew the claim first: no other process can take the run over while the files are
    # written (the lease outlasts any save), so a fenced-out trainer never overwrites them.
    run.registry.heartbeat(run_id)
    path = save_checkpoint(Path(str(row.output_dir)) / f"step-{state.step}", run.model, run.tokenizer, saved, row.name)
    run.registry.add_checkpoint(run_id, state.step, str(path), eval_accuracy=state.accuracy_at(state.step))
    state.last_checkpoint_step = state.step
    for old in select_for_deletion(
        run.registry.checkpoints(run_id), cfg.checkpoint.keep_last, cfg.checkpoint.keep_best
    ):
        # Recorded (a fenced commit) before the files go: a trainer that lost its claim
        # stops there, and never deletes a checkpoint its successor may be resuming from.
        run.registry.mark_checkpoint_deleted(old.id)
        shutil.rmtree(old.path, ignore_errors=True)
