"""grpoctl against TRL's GRPOTrainer on identical work, one core, one thread, alternating rounds.

Both sides start from the same model directory and get the same prompts in the same
order (grpoctl's prompt stream for seed 0) of a workload: `addition` (the default) is the
embedded tiny default's warm-started model and 2-digit additions, 16 prompts x 8
completions of at most 32 tokens per step; `lab` is the lab's base model and training
prompts (experiments/lab.yaml, docs/lab.md), 8 prompts x 8 of at most 96 tokens. Either
way: at least 4 tokens, sampled at temperature 1, ending at EOS (TRL's generate path has
no stop strings, so grpoctl's are off too), graded by grpoctl's r1_zero reward,
group-normalised advantages, on-policy, the per-sequence mean loss (TRL loss_type=grpo,
grpoctl length_normalization=mean), microbatches of 32 (4 accumulation steps on addition,
2 on the lab), AdamW lr 1e-4 constant with betas 0.9/0.95, grad clip 1.0, no KL.

Each round runs every side once as its own process, pinned to one core (taskset) with
one torch thread, in an order that alternates between rounds. Prints, in wall and in CPU
seconds (CPU time is far steadier on a machine other jobs share), the per-phase medians
(rollout = generation + grading, train = the rest of the step), the sum over all steps
with the first included, the whole process, the generated token counts (asserted to
agree within 2%), and the grpoctl/TRL ratio of median step times per round.

    bash benchmarks/make_trl_env.sh                  # once: TRL's own venv in .venv-trl/
    python benchmarks/bench_vs_trl.py --rounds 3 --steps 20 [--core 1] [--workload lab]
    python benchmarks/bench_vs_trl.py --baseline-src /path/to/older/checkout  # adds that grpoctl as a side
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS, GROUP, MICRO, MIN_TOKENS, LR, SEED = 20, 8, 32, 4, 1e-4, 0


@dataclass(frozen=True)
class Workload:
    config: Path | None  # the grpoctl config both sides load, before the overrides (None: the defaults)
    prompts: int  # per step, GROUP completions each
    max_tokens: int

    @property
    def accum(self) -> int:
        return self.prompts * GROUP // MICRO


WORKLOADS = {"addition": Workload(None, 16, 32), "lab": Workload(REPO / "experiments" / "lab.yaml", 8, 96)}


def model_dir_of(workload: str, cache_dir: Path) -> Path:
    """The workload's base model: the tiny default's warm-start (final checkpoint), or the
    lab's shipped base; built or found in cache_dir."""
    from grpoctl.config import load_config
    from grpoctl.warmstart.lab import resolve_lab_model
    from grpoctl.warmstart.tiny import resolve_tiny_model

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    if workload == "lab":
        return resolve_lab_model("lab", cache_dir, log=log)
    return resolve_tiny_model(load_config(None, [f"runtime.cache_dir={cache_dir}"]), log=log)


def grpoctl_overrides(model_dir: str, steps: int, w: Workload) -> list[str]:
    return [
        f"model.path={model_dir}",
        f"seed={SEED}",
        f"loop.n_grpo_steps={steps}",
        f"rollout.rollout_batch_size={w.prompts * GROUP}",
        f"rollout.group_size={GROUP}",
        f"rollout.max_tokens={w.max_tokens}",
        f"rollout.min_tokens={MIN_TOKENS}",
        "rollout.stop=[]",
        f"loop.train_batch_size={w.prompts * GROUP}",
        f"loop.gradient_accumulation_steps={w.accum}",
        f"optimizer.lr={LR}",
        "optimizer.warmup_steps=0",
        "optimizer.lr_schedule=constant",
        "loss.length_normalization=mean",
        "loss.loss_type=grpo_clip",
        "eval.at_start=false",
        "eval.every=0",
        "eval.subset=16",
        "checkpoint.every=0",
        "runtime.threads=1",
        "logging.live=false",
    ]


# --------------------------------------------------------------------------- children


class Clock:
    """Wall and CPU seconds of a block. CPU time is what a step costs this process: on a
    machine shared with other jobs it varies far less than wall time, so both are kept."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def child_grpoctl(model_dir: str, steps: int, w: Workload) -> dict:
    """`grpoctl train` (its CLI, in this process, in a fresh directory), each step timed."""
    from grpoctl import cli
    from grpoctl.train import step as grpo
    from grpoctl.train import trainer

    records: list[dict] = []

    def timed(fn, phase):
        def wrapper(*args, **kwargs):
            clock = Clock()
            try:
                return fn(*args, **kwargs)
            finally:
                wall, cpu = clock.elapsed()
                rec = records[-1] if records else {}
                rec[phase] = tuple(a + b for a, b in zip(rec.get(phase, (0.0, 0.0)), (wall, cpu), strict=True))

        return wrapper

    one_step, score = trainer.grpo_step, grpo.score_rollouts

    def step(run, i):
        records.append({})
        timed(one_step, "total")(run, i)

    def counting_score(run, rollouts, *args, **kwargs):
        records[-1]["tokens"] = sum(len(r) for r in rollouts.response_ids)
        return score(run, rollouts, *args, **kwargs)

    grpo.score_rollouts = counting_score
    for name in ("generate_rollouts", "score_rollouts", "add_old_and_ref_log_probs"):
        setattr(grpo, name, timed(getattr(grpo, name), "rollout"))
    trainer.grpo_step = step
    grpo.evaluate_policy = timed(grpo.evaluate_policy, "eval")  # the last step evaluates; TRL does not: left out

    os.chdir(tempfile.mkdtemp(prefix="bench-vs-trl-grpoctl-"))
    config = [str(w.config)] if w.config else []
    sys.argv = ["grpoctl", "train", *config, *grpoctl_overrides(model_dir, steps, w), "name=bench"]
    try:
        cli.main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    out = []
    for rec in records:
        none = (0.0, 0.0)
        row = {"tokens": rec["tokens"]}
        for i, clock in enumerate(("wall", "cpu")):
            total = rec["total"][i] - rec.get("eval", none)[i]
            row[clock] = {"rollout": rec["rollout"][i], "train": total - rec["rollout"][i], "total": total}
        out.append(row)
    return {"steps": out}


def child_trl(model_dir: str, steps: int, w: Workload) -> dict:
    """TRL's GRPOTrainer on the same model, prompts, sampling, loss and optimizer."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpoctl.config import derived_sizes, load_config
    from grpoctl.data import PromptStream
    from grpoctl.data.run_data import load_run_data
    from grpoctl.prompts import format_prompt
    from grpoctl.rewards import get_reward_fn

    torch.set_num_threads(1)
    cfg = load_config(w.config, grpoctl_overrides(model_dir, steps, w))
    data = load_run_data(cfg)
    stream = PromptStream(data.train, seed=cfg.seed)
    rows = []
    for _ in range(steps):  # the prompts grpoctl's steps draw (train/step.py: next_prompts)
        examples = stream.next_batch(derived_sizes(cfg).prompts_per_rollout_batch)
        rows += [{"prompt": format_prompt(data.template, ex.question), "answer": ex.answer} for ex in examples]
    reward_fn = get_reward_fn("r1_zero")
    tokens = []

    def r1_zero(prompts, completions, answer, completion_ids, **_):
        tokens.append(sum(len(c) for c in completion_ids))
        return [reward_fn(c, a)["reward"] for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-vs-trl-trl-"),
        use_cpu=True,
        seed=SEED,
        max_steps=steps,
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=w.accum,
        num_generations=GROUP,
        max_completion_length=w.max_tokens,
        generation_kwargs={"min_new_tokens": MIN_TOKENS},
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        shuffle_dataset=False,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.95,
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type="grpo",
        beta=0.0,
        num_iterations=1,
        scale_rewards="group",
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        bf16=False,
        model_init_kwargs={"dtype": torch.float32},
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=r1_zero,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )

    phases: list[dict] = []
    generate = trainer._generate_and_score_completions

    def timed_generate(*a, **k):
        clock = Clock()
        try:
            return generate(*a, **k)
        finally:
            phases[-1]["rollout"] = [x + y for x, y in zip(phases[-1]["rollout"], clock.elapsed(), strict=True)]

    trainer._generate_and_score_completions = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            phases.append({"rollout": [0.0, 0.0], "clock": Clock()})

        def on_step_end(self, *a, **k):
            phases[-1]["total"] = phases[-1].pop("clock").elapsed()

    trainer.add_callback(StepTimer())
    trainer.train()
    out = []
    for p, n in zip(phases, tokens, strict=True):
        row = {"tokens": n}
        for i, clock in enumerate(("wall", "cpu")):
            row[clock] = {"rollout": p["rollout"][i], "train": p["total"][i] - p["rollout"][i], "total": p["total"][i]}
        out.append(row)
    return {"steps": out}


# --------------------------------------------------------------------------- orchestration


def run_side(side: str, python: str, model_dir: Path, workload: str, steps: int, core: int, src: str | None) -> dict:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_OFFLINE="1",
        PYTHONWARNINGS="ignore",
    )
    # Both sides import this checkout's grpoctl (prompts, reward), whatever the TRL venv has installed.
    env["PYTHONPATH"] = src or str(REPO)
    cmd = [
        "taskset",
        "-c",
        str(core),
        python,
        str(Path(__file__).resolve()),
        "--child",
        "trl" if side == "trl" else "grpoctl",
        "--model",
        str(model_dir),
        "--workload",
        workload,
        "--steps",
        str(steps),
    ]
    before, started = os.times(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    after = os.times()
    if out.returncode != 0:
        raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # The whole process: interpreter start, imports, model load, every step, the end.
    result["process"] = {
        "wall": time.perf_counter() - started,
        "cpu": (after.children_user + after.children_system) - (before.children_user + before.children_system),
    }
    return result


def median(rows: list[dict], clock: str, phase: str) -> float:
    """Median over the steps after the first (whose one-off costs show in the sums instead)."""
    return statistics.median(r[clock][phase] for r in rows[1:] or rows)


def report(results: dict[str, list[dict]], clock: str) -> None:
    names = list(results)
    print(f"\n{clock} seconds: medians over steps 2..N; 'sum' = all steps, the first included")
    print(f"{'side':<9}{'round':>6}{'rollout':>9}{'train':>8}{'total':>8}{'sum':>8}{'process':>9}{'tokens':>8}")
    for name in names:
        for r, res in enumerate(results[name]):
            s = res["steps"]
            print(
                f"{name:<9}{r + 1:>6}{median(s, clock, 'rollout'):>9.3f}{median(s, clock, 'train'):>8.3f}"
                f"{median(s, clock, 'total'):>8.3f}{sum(x[clock]['total'] for x in s):>8.2f}"
                f"{res['process'][clock]:>9.1f}{sum(x['tokens'] for x in s):>8}"
            )

    def ratios(a: str, b: str, phase: str) -> list[float]:
        return [
            median(x["steps"], clock, phase) / median(y["steps"], clock, phase)
            for x, y in zip(results[a], results[b], strict=True)
        ]

    total = ratios("grpoctl", "trl", "total")
    print(
        f"grpoctl/TRL ({clock}) per round: {', '.join(f'{x:.2f}' for x in total)}; median {statistics.median(total):.2f}"
        f" (rollout {statistics.median(ratios('grpoctl', 'trl', 'rollout')):.2f},"
        f" train {statistics.median(ratios('grpoctl', 'trl', 'train')):.2f})"
    )
    if "baseline" in results:
        base = ratios("grpoctl", "baseline", "total")
        print(
            f"grpoctl/baseline ({clock}) median {statistics.median(base):.2f}"
            f" (rollout {statistics.median(ratios('grpoctl', 'baseline', 'rollout')):.2f},"
            f" train {statistics.median(ratios('grpoctl', 'baseline', 'train')):.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--workload", choices=list(WORKLOADS), default="addition")
    parser.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--trl-python", default=str(REPO / ".venv-trl" / "bin" / "python"))
    parser.add_argument("--cache-dir", type=Path, default=REPO / "outputs" / "cache")
    parser.add_argument("--baseline-src", default=None, help="another grpoctl source tree, run as side 'baseline'")
    parser.add_argument("--child", choices=["grpoctl", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = (child_trl if args.child == "trl" else child_grpoctl)(args.model, args.steps, WORKLOADS[args.workload])
        print(json.dumps(result))
        return
    if not Path(args.trl_python).exists():
        raise SystemExit(f"no TRL environment at {args.trl_python}: run bash benchmarks/make_trl_env.sh first")

    w = WORKLOADS[args.workload]
    model_dir = model_dir_of(args.workload, args.cache_dir)
    sides = {"grpoctl": (sys.executable, None), "trl": (args.trl_python, None)}
    if args.baseline_src:
        sides["baseline"] = (sys.executable, args.baseline_src)
    names = list(sides)
    results: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            python, src = sides[name]
            res = run_side(name, python, model_dir, args.workload, args.steps, args.core, src)
            results[name].append(res)
            print(
                f"round {r + 1}: {name:<8} median step {median(res['steps'], 'wall', 'total'):.3f} s wall, "
                f"{median(res['steps'], 'cpu', 'total'):.3f} s cpu",
                flush=True,
            )

    print(
        f"\n{args.workload}: {args.steps} steps x {w.prompts} prompts x {GROUP} completions <= {w.max_tokens} tokens, "
        f"1 torch thread pinned to core {args.core}, {args.rounds} alternating rounds"
    )
    for clock in ("wall", "cpu"):
        report(results, clock)
    tok = {n: sum(sum(x["tokens"] for x in res["steps"]) for res in results[n]) for n in names}
    gap = abs(tok["grpoctl"] - tok["trl"]) / tok["trl"]
    print(f"\ngenerated tokens, all rounds: grpoctl {tok['grpoctl']}, TRL {tok['trl']} ({gap:.1%} apart)")
    assert gap <= 0.02, f"generated token counts differ by {gap:.1%} (> 2%): the two sides did not do the same work"


if __name__ == "__main__":
    main()
