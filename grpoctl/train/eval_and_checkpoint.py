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
from grpoctl.data.run_data import EvalSet
from grpoctl.rollout.base import Rollouts
from grpoctl.rules import grader_reward
from grpoctl.train.checkpoint import SavedTrainer, capture_rng, save_checkpoint, select_for_deletion
from grpoctl.train.context import RunContext
from grpoctl.train.evaluate import eval_record, eval_sampling, evaluate
from grpoctl.train.phases import Phases
from grpoctl.train.sampled_eval import (
    sampled_eval_due,
    sampled_eval_seed,
    sampled_evaluate,
    sampled_ks,
    sampled_problems,
    sampled_record,
    sampled_sampling,
)

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
    greedy eval on its subset (eval.every) and the sampled one (eval.sampled.*). Returns
    (eval/* metrics, stored completions, eval rows)."""
    figures: dict = {}
    samples: list[dict] = []
    rows: list[dict] = []
    for index, eval_set in enumerate(run.data.sets):
        headline = index == 0
        if step == 0 or eval_due(run.cfg, step):
            set_figures, set_samples, row = headline_eval(run, step, eval_set, headline)
            figures |= _named(set_figures, eval_set.name, headline)
            samples += set_samples if headline else []  # the headline set's completions are stored
            rows.append(_of_set(row, eval_set.name, headline))
        if sampled_eval_due(run.cfg, step):
            sampled_figures, row = sampled_eval(run, step, eval_set)
            figures |= _named(sampled_figures, eval_set.name, headline)
            rows.append(_of_set(row, eval_set.name, headline))
    return figures, samples, rows


def _named(figures: dict, eval_set: str, headline: bool) -> dict:
    """A set's eval/* figures under its own names (eval/SET/accuracy); the headline set's
    also under the unprefixed names, so runs with and without eval.sets compare."""
    if not eval_set:
        return figures
    named = {metrics.in_eval_set(eval_set, name): value for name, value in figures.items()}
    return (figures | named) if headline else named


def _of_set(row: dict, eval_set: str, headline: bool) -> dict:
    """An eval row with its set's name and whether it is the headline set's (migration 0008)."""
    return row | {"eval_set": eval_set, "headline": headline}


def headline_eval(
    run: RunContext, step: int, eval_set: EvalSet | None = None, headline: bool = True
) -> tuple[dict, list[dict], dict]:
    """The policy on an eval set's subset (default: the headline set): (eval/* metrics,
    stored completions, the eval row to record). Only the headline set's accuracy picks
    the best checkpoints."""
    cfg, data = run.cfg, run.data
    eval_set = eval_set or data.sets[0]
    sampling = eval_sampling(cfg.eval, cfg.rollout.stop)
    outcome = evaluate(
        run.backend,
        eval_set.examples,
        data.template,
        grader_reward(cfg.prompt.reward, cfg.prompt.template),
        sampling,
        cfg.eval.batch_size,
        n_samples=cfg.logging.samples_per_step,
        seed=cfg.eval.subset_seed,
    )
    if headline:
        run.state.record_eval(step, outcome.accuracy)
    figures = outcome.metrics()
    if eval_set.overlong_dropped:
        figures[metrics.OVERLONG_EVAL_DROPPED] = eval_set.overlong_dropped
    row = eval_record(
        outcome,
        examples=eval_set.examples,
        data_source=eval_set.source,
        data_hash=eval_set.data_hash,
        template_name=data.template_name,
        template=data.template,
        sampling=sampling,
        group_by=list(cfg.eval.group_by),
    )
    return figures, outcome.samples, row


def sampled_eval(run: RunContext, step: int, eval_set: EvalSet | None = None) -> tuple[dict, dict]:
    """pass@k and maj@k of the policy on an eval set (default: the headline set), from its
    own seed: (eval/* metrics, the eval row)."""
    cfg, data = run.cfg, run.data
    eval_set = eval_set or data.sets[0]
    problems = sampled_problems(cfg, eval_set.examples)
    sampling = sampled_sampling(cfg)
    outcome = sampled_evaluate(
        run.backend,
        problems,
        data.template,
        grader_reward(cfg.prompt.reward, cfg.prompt.template),
        sampling,
        n=cfg.eval.sampled.n,
        ks=sampled_ks(cfg.eval.sampled),
        seed=sampled_eval_seed(cfg.seed, step),
        batch_size=cfg.eval.batch_size,
    )
    row = sampled_record(
        outcome,
        examples=problems,
        data_source=eval_set.source,
        data_hash=eval_set.data_hash,
        template_name=data.template_name,
        template=data.template,
        sampling=sampling,
        group_by=list(cfg.eval.group_by),
    )
    return outcome.metrics(), row


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
