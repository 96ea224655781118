"""What one sampled eval costs: seconds of generation and of grading, at n = 8 and n = 16.

    taskset -c 0 python benchmarks/bench_eval.py [--problems 128] [--data ../shared/data]

- lab: the lab's base model (`model.path=lab`, hf backend, one torch thread) samples n
  completions of `--problems` held-out lab problems (the lab config's eval.max_tokens,
  96), as a run's sampled eval does (evals/sampled.py); generation and grading
  (answer classes, pass@k, maj@k at k = 1, 4, n) are timed apart, in CPU and wall seconds.
- math500: no model here answers MATH, so the grading side alone, on MATH500's answers:
  per problem n r1_zero responses, a mix of the truth written three ways (as given, in
  `\\boxed{}`, with `x = ` before it), two plausible wrong answers and an unformatted
  response, drawn by a seeded generator. This is the grader's share of a sampled eval of
  a real model on MATH500, whose generation is the GPU's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def lab_rows(problems: int, ns: list[int]) -> list[dict]:
    import torch

    from grpoctl.config import load_config
    from grpoctl.data.run_data import load_run_data
    from grpoctl.evals.sampled import generate_samples, sampled_problems, sampled_sampling, score_samples
    from grpoctl.rollout import make_backend
    from grpoctl.train.setup import load_policy, resolve_model_dir

    torch.set_num_threads(1)
    rows = []
    for n in ns:
        cfg = load_config("lab", [f"eval.sampled.n={n}", f"eval.sampled.subset={problems}"])
        data = load_run_data(cfg, need_train=False)
        model_dir = resolve_model_dir(cfg, say=lambda *_: None)
        model, tokenizer = load_policy(model_dir, torch.device("cpu"), torch.float32, gradient_checkpointing=False)
        model.eval()
        backend = make_backend(cfg, model, tokenizer, model_dir, say=lambda *_: None)
        examples = sampled_problems(cfg, data.eval)
        ks = sorted({1, 4, n})
        sampling = sampled_sampling(cfg)
        (texts, _), gen_wall, gen_cpu = timed(generate_samples, backend, examples, data.template, sampling, n, 256, 1)
        (_, _, calls), grade_wall, grade_cpu = timed(score_samples, examples, texts, "r1_zero", ks, 1)
        backend.close()
        rows.append(
            dict(workload="lab", n=n, problems=len(examples), generate_cpu_s=gen_cpu, generate_wall_s=gen_wall,
                 grade_cpu_s=grade_cpu, grade_wall_s=grade_wall, grader_calls=calls)
        )  # fmt: skip
    return rows


def math500_rows(path: Path, problems: int, ns: list[int]) -> list[dict]:
    from grpoctl.data.files import load_math_jsonl
    from grpoctl.evals.sampled import score_samples
    from grpoctl.rewards import reset_grading_stats

    examples = load_math_jsonl(path)[:problems]
    rows = []
    for n in ns:
        rng = random.Random(f"bench-eval:{n}")
        texts = []
        for i, ex in enumerate(examples):
            other = examples[(i + 1) % len(examples)].answer
            pool = [ex.answer, f"\\boxed{{{ex.answer}}}", f"x = {ex.answer}", other, f"{other}+1", None]
            picks = [rng.choice(pool) for _ in range(n)]
            texts.append(["no answer here" if p is None else f" work </think> <answer>{p}</answer>" for p in picks])
        reset_grading_stats()
        (_, _, calls), wall, cpu = timed(score_samples, examples, texts, "r1_zero", sorted({1, 4, n}), 1)
        rows.append(
            dict(workload="math500 answers", n=n, problems=len(examples), generate_cpu_s=None,
                 generate_wall_s=None, grade_cpu_s=cpu, grade_wall_s=wall, grader_calls=calls)
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=128, help="problems per sampled eval (eval.sampled.subset)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    ns = [8, 16]
    rows = lab_rows(args.problems, ns) + math500_rows(args.data / "math500_test.jsonl", args.problems, ns)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'workload':<16} {'n':>3} {'problems':>8} {'gen cpu s':>10} {'gen wall s':>10} {'grade cpu s':>11} "
          f"{'grade wall s':>12} {'grader calls':>12}")  # fmt: skip
    for r in rows:
        gen = [
            f"{r[key]:10.2f}" if r[key] is not None else f"{'-':>10}" for key in ("generate_cpu_s", "generate_wall_s")
        ]
        print(f"{r['workload']:<16} {r['n']:>3} {r['problems']:>8} {gen[0]} {gen[1]} {r['grade_cpu_s']:11.2f} "
              f"{r['grade_wall_s']:12.2f} {r['grader_calls']:>12}")  # fmt: skip


if __name__ == "__main__":
    main()
