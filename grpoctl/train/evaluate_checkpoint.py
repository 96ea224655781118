"""`grpoctl eval CKPT_DIR`: one evaluation of a saved model, recorded in the registry.

When the checkpoint was written by a grpoctl run, the result is linked to that run and
its step, so it shows up with the run's own evals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl.config import typed_config
from grpoctl.data.prompt_length import prompt_budget
from grpoctl.data.run_data import load_run_data
from grpoctl.rollout import make_backend
from grpoctl.rules import grader_reward
from grpoctl.train.evaluate import eval_record, eval_sampling, evaluate
from grpoctl.train.sampled_eval import (
    sampled_eval_seed,
    sampled_evaluate,
    sampled_ks,
    sampled_problems,
    sampled_record,
    sampled_sampling,
)
from grpoctl.train.setup import load_policy, pick_device, pick_dtype

if TYPE_CHECKING:
    from grpoctl.config import Config, RunConfig
    from grpoctl.data.run_data import RunData
    from grpoctl.formatting import Say
    from grpoctl.registry import EvalResult, Registry, Run
    from grpoctl.rollout.base import RolloutBackend


def run_eval(
    validated: RunConfig,
    registry: Registry,
    path: Path,
    run: Run | None,
    marker: dict | None,
    say: Say = print,
    data: RunData | None = None,
) -> EvalResult:
    """Evaluate the model at `path` on the headline eval set (the first of eval.sets); `data`
    is the already loaded (and checked) RunData, if any."""
    cfg = typed_config(validated)
    device = pick_device(cfg)
    data = data or load_run_data(cfg, need_train=False, budget=prompt_budget(cfg, str(path)))
    model, tokenizer = load_policy(str(path), device, pick_dtype(cfg, device), gradient_checkpointing=False)
    model.eval()
    backend = make_backend(cfg, model, tokenizer, str(path), say=say)
    if cfg.eval.sampled.n:
        try:
            return _sampled(cfg, registry, path, run, marker, say, data, backend)
        finally:
            backend.close()
    try:
        sampling = eval_sampling(cfg.eval, cfg.rollout.stop)
        say(f"evaluating {path} on {len(data.eval)} problems ({'greedy' if sampling.greedy else 'sampled'})")
        outcome = evaluate(
            backend,
            data.eval,
            data.template,
            grader_reward(cfg.prompt.reward, cfg.prompt.template),
            sampling,
            cfg.eval.batch_size,
            seed=cfg.eval.subset_seed,
        )
    finally:
        backend.close()
    return registry.add_eval(
        run_id=run.id if run else None,
        step=marker["step"] if (run and marker) else None,
        checkpoint_path=str(path.resolve()),
        eval_set=data.sets[0].name if data.sets else "",  # the headline set (eval.sets' first)
        **eval_record(
            outcome,
            group_by=list(cfg.eval.group_by),
            examples=data.eval,
            data_source=data.eval_source,
            data_hash=data.data_hash,
            template_name=data.template_name,
            template=data.template,
            sampling=sampling,
        ),
    )


def sampled_cost(problems: int, n: int, max_tokens: int, ks: list[int]) -> str:
    """What a sampled eval will cost, said before it starts: sequences and tokens to generate,
    and how many k-subsets maj@k averages over."""
    from math import comb

    from grpoctl.analysis.majority import EXHAUSTIVE_LIMIT, RANDOM_SUBSETS

    subsets = sum(comb(n, k) if comb(n, k) <= EXHAUSTIVE_LIMIT else RANDOM_SUBSETS for k in ks)
    return (
        f"estimated cost: {problems * n:,} completions ({problems} problems x {n} samples, {n}x a greedy eval's), "
        f"at most {problems * n * max_tokens:,} new tokens; grading once per distinct answer and problem "
        f"(at most {problems * n:,} against the truth, plus the comparisons between a problem's distinct "
        f"answers that are not plain numbers); maj@k votes over {subsets:,} subsets per problem"
    )


def _sampled(
    cfg: Config,
    registry: Registry,
    path: Path,
    run: Run | None,
    marker: dict | None,
    say: Say,
    data: RunData,
    backend: RolloutBackend,
) -> EvalResult:
    """pass@k and maj@k of the model at `path`, recorded as a sampled eval row."""
    s = cfg.eval.sampled
    problems = sampled_problems(cfg, data.eval)
    ks = sampled_ks(s)
    say(sampled_cost(len(problems), s.n, cfg.eval.max_tokens, ks))
    say(f"sampling {path}: {len(problems)} problems x {s.n} (temperature {s.temperature}, top_p {s.top_p})")
    sampling = sampled_sampling(cfg)
    outcome = sampled_evaluate(
        backend,
        problems,
        data.template,
        grader_reward(cfg.prompt.reward, cfg.prompt.template),
        sampling,
        n=s.n,
        ks=ks,
        seed=sampled_eval_seed(cfg.seed, marker["step"] if (run and marker) else 0),
        batch_size=cfg.eval.batch_size,
    )
    say(f"generation {outcome.generate_s:.1f} s, grading {outcome.grade_s:.1f} s ({outcome.grader_calls} grader calls)")
    return registry.add_eval(
        run_id=run.id if run else None,
        step=marker["step"] if (run and marker) else None,
        checkpoint_path=str(path.resolve()),
        eval_set=data.sets[0].name if data.sets else "",  # the headline set (eval.sets' first)
        **sampled_record(
            outcome,
            examples=problems,
            data_source=data.eval_source,
            data_hash=data.data_hash,
            template_name=data.template_name,
            template=data.template,
            sampling=sampling,
            group_by=list(cfg.eval.group_by),
        ),
    )
