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
from grpoctl.train.evaluate import eval_record, eval_sampling, evaluate
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
    """Evaluate the model at `path`; `data` is the already loaded (and checked) RunData, if any."""
    cfg = typed_config(validated)
    device = pick_device(cfg)
    data = data or load_run_data(cfg, need_train=False, budget=prompt_budget(cfg, str(path)))
    model, tokenizer = load_policy(str(path), device, pick_dtype(cfg, device), gradient_checkpointing=False)
    model.eval()
    backend = make_backend(cfg, model, tokenizer, str(path), say=say)
    try:
        sampling = eval_sampling(cfg.eval, cfg.rollout.stop)
        say(f"evaluating {path} on {len(data.eval)} problems ({'greedy' if sampling.greedy else 'sampled'})")
        outcome = evaluate(
            backend,
            data.eval,
            data.template,
            cfg.prompt.reward,
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
        **eval_record(
            outcome,
            examples=data.eval,
            data_source=data.eval_source,
            data_hash=data.data_hash,
            template_name=data.template_name,
            template=data.template,
            sampling=sampling,
        ),
    )
