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
from grpoctl.evals.on_set import evaluate_set
from grpoctl.evals.sampled import SampledOutcome, sampled_cost, sampled_ks, sampled_problems
from grpoctl.rewards import configure_grading
from grpoctl.rollout import make_backend
from grpoctl.train.lora import adapter_base
from grpoctl.train.setup import load_policy, pick_device, pick_dtype

if TYPE_CHECKING:
    from grpoctl.config import RunConfig
    from grpoctl.data.run_data import RunData
    from grpoctl.formatting import Say
    from grpoctl.registry import EvalResult, Registry, Run


def run_eval(
    validated: RunConfig,
    registry: Registry,
    path: Path,
    run: Run | None,
    marker: dict | None,
    say: Say = print,
    data: RunData | None = None,
) -> EvalResult:
    """Evaluate the model at `path` on the headline eval set (the first of eval.sets), the
    sampled eval when eval.sampled.n is set; `data` is the already loaded (and checked)
    RunData, if any."""
    cfg = typed_config(validated)
    configure_grading(workers=cfg.reward.grading_workers)
    device = pick_device(cfg)
    # A LoRA checkpoint is its adapter alone: the model, the tokenizer and vLLM's first
    # weights come from the base it names, and the merged adapter is synced in.
    base = adapter_base(path)
    model_dir = base or str(path)
    data = data or load_run_data(cfg, need_train=False, budget=prompt_budget(cfg, model_dir))
    model, tokenizer = load_policy(str(path), device, pick_dtype(cfg, device), gradient_checkpointing=False)
    model.eval()
    backend = make_backend(cfg, model, tokenizer, model_dir, say=say)
    if base is not None:
        backend.sync_weights(model)
    eval_set, sampled, step = data.sets[0], bool(cfg.eval.sampled.n), marker["step"] if (run and marker) else 0
    if sampled:
        s = cfg.eval.sampled
        problems = sampled_problems(cfg, eval_set.examples)
        say(sampled_cost(len(problems), s.n, cfg.eval.max_tokens, sampled_ks(s)))
        say(f"sampling {path}: {len(problems)} problems x {s.n} (temperature {s.temperature}, top_p {s.top_p})")
    else:
        say(f"evaluating {path} on {len(eval_set.examples)} problems ({'greedy' if cfg.eval.greedy else 'sampled'})")
    try:
        done = evaluate_set(backend, cfg, eval_set, data.template_name, data.template, sampled=sampled, step=step)
    finally:
        backend.close()
    if isinstance(done.outcome, SampledOutcome):
        o = done.outcome
        say(f"generation {o.generate_s:.1f} s, grading {o.grade_s:.1f} s ({o.grader_calls} grader calls)")
    return registry.add_eval(
        run_id=run.id if run else None,
        step=marker["step"] if (run and marker) else None,
        checkpoint_path=str(path.resolve()),
        eval_set=eval_set.name,  # the headline set (eval.sets' first)
        **done.row,
    )
