"""How fast is grading, and how bad is its worst case?

    python benchmarks/bench_grading.py [--data ../shared/data] [--hostile 1000] [--workers 0]

Workloads, each as r1_zero responses graded by `r1_zero_reward` in this thread
(the trainer's situation), with grading caches cleared before each:

- math500/self: every MATH500 answer against itself (the string fast path);
- math500/math-verify: every answer against itself again, but forced through
  math-verify (called directly, not through the reward function): what a pair
  the fast path cannot settle costs. The truths are parsed beforehand, as in
  training where a group's rollouts share one truth, so the row times parsing
  the prediction and comparing;
- math500/wrong: the answer with its first digit changed (or `+1` appended): a
  plausible wrong answer, mostly through math-verify;
- math500/gamed: answers that try to game the grader with the truth in them:
  `WRONG=TRUTH`, `x=WRONG=TRUTH`, `TRUTH=WRONG`, `x=WRONG, y=TRUTH`, `TRUTH or
  WRONG` (WRONG as in math500/wrong). None of them should score;
- hostile: generated junk (nested braces, towers of powers, unbalanced LaTeX,
  long garbage, huge factorials and binomials) against MATH500 truths.

math500/gamed and hostile stand in for the 2,000 adversarial completions of the
bad-input campaign (issue 10): none may crash or hang, and `worst ms` is the
slowest single call.

With --workers N the same pairs are also graded by a `Grader(workers=N)` pool
with grade_many, to show the pool's overhead and parallel throughput.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
from pathlib import Path

from grpoctl.rewards import Grader, grading_stats, r1_zero_reward
from grpoctl.rewards.equivalence import _parse_truth, math_verify_equal
from grpoctl.rewards.normalize import normalize_answer

REPO = Path(__file__).resolve().parents[1]


def r1(answer: str) -> str:
    return f" reasoning </think> <answer>{answer}</answer>"


def perturb(answer: str) -> str:
    """A near miss: the first digit changed, or `+1` when there is no digit."""
    for i in range(len(answer)):
        if answer[i].isdigit():
            return answer[:i] + str((int(answer[i]) + 1) % 10) + answer[i + 1 :]
    return answer + "+1"


def gamed(truth: str) -> list[str]:
    """Answers that carry the truth next to a wrong value, hoping to be read as it."""
    wrong = perturb(truth)
    return [
        f"{wrong}={truth}",
        f"x={wrong}={truth}",
        f"{truth}={wrong}",
        f"x={wrong}, y={truth}",
        rf"{truth} \text{{ or }} {wrong}",
    ]


def hostile_strings(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    tokens = [r"\frac{", r"\sqrt{", r"\left(", r"\right]", "}", "{", "^{", "_", "&", "x", "1"]
    tokens += [r"\begin{pmatrix}", r"\\", r"\end{"]

    def braces() -> str:
        depth = rng.choice([20, 100, 1000, 10_000, 50_000])
        return rng.choice(["{", r"\frac{1}{", r"\sqrt{"]) * depth + "x" + "}" * depth

    def tower() -> str:
        levels = [str(rng.randint(2, 99)) for _ in range(rng.randint(2, 5))]
        text = levels[-1]
        for base in reversed(levels[:-1]):
            text = f"{base}^{{{text}}}"
        return text

    def unbalanced() -> str:
        return "".join(rng.choice(tokens) for _ in range(rng.randint(5, 200)))

    def garbage() -> str:
        return "".join(rng.choice(string.printable) for _ in range(rng.choice([50, 500, 5000, 100_000])))

    def big_number() -> str:
        k = rng.randint(3, 12)
        return rng.choice([f"{10**k}!", f"(10^{{{k}}})!", rf"\binom{{10^{{{k}}}}}{{10^{{{k - 1}}}}}"])

    kinds = [(braces, 0.25), (tower, 0.25), (unbalanced, 0.25), (garbage, 0.2), (big_number, 0.05)]
    out = []
    for make, share in kinds:
        out += [make() for _ in range(round(n * share))]
    return out[:n]


def run(name: str, pairs: list[tuple[str, str]], direct: bool = False) -> dict:
    """Grade (response, truth) pairs one at a time in this thread; direct=True
    sends each (answer, truth) straight to math-verify instead."""
    math_verify_equal.cache_clear()
    _parse_truth.cache_clear()
    if direct:
        # Pre-parse the truths; math-verify's own LaTeX cache keeps only the
        # last 20, so the predictions below are parsed afresh.
        for _, truth in pairs:
            _parse_truth(normalize_answer(truth))
    grading_stats(reset=True)
    worst, right = 0.0, 0
    started = time.perf_counter()
    for response, truth in pairs:
        t0 = time.perf_counter()
        if direct:
            right += math_verify_equal(normalize_answer(response), normalize_answer(truth)).equal
        else:
            right += r1_zero_reward(response, truth)["reward"] == 1.0
        worst = max(worst, time.perf_counter() - t0)
    seconds = time.perf_counter() - started
    return dict(name=name, n=len(pairs), right=right, seconds=seconds, worst=worst, **grading_stats())


def run_pool(name: str, pairs: list[tuple[str, str]], workers: int) -> dict:
    """Grade the same answers with a worker pool's grade_many (start-up not timed)."""
    answers = [(response.split("<answer>")[-1].replace("</answer>", ""), truth) for response, truth in pairs]
    grading_stats(reset=True)
    with Grader(workers=workers, timeout_s=5.0) as grader:
        grader.grade("x", "x + 0")  # wait for the workers to start
        grading_stats(reset=True)
        started = time.perf_counter()
        right = sum(grader.grade_many(answers))
        seconds = time.perf_counter() - started
    name = f"{name} [pool {workers}]"
    return dict(name=name, n=len(pairs), right=right, seconds=seconds, worst=float("nan"), **grading_stats())


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'workload':<24} {'n':>5} {'right':>6} {'sec':>7} {'resp/s':>8} "
        f"{'worst ms':>9} {'fast':>5} {'rejected':>8} {'timeouts':>8} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        rate = r["n"] / r["seconds"] if r["seconds"] else float("inf")
        print(
            f"{r['name']:<24} {r['n']:>5} {r['right']:>6} {r['seconds']:>7.2f} {rate:>8.0f} "
            f"{r['worst'] * 1000:>9.0f} {r['fast']:>5} {r['rejected']:>8} {r['timeouts']:>8} {r['errors']:>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--hostile", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=0, help="also grade with a pool of this many workers")
    args = parser.parse_args()

    records = [json.loads(line) for line in (args.data / "math500_test.jsonl").open()]
    truths = [r["answer"] for r in records]
    workloads = {
        "math500/self": [(r1(t), t) for t in truths],
        "math500/wrong": [(r1(perturb(t)), t) for t in truths],
        "math500/gamed": [(r1(answer), t) for t in truths for answer in gamed(t)],
        "hostile": [(r1(h), truths[i % len(truths)]) for i, h in enumerate(hostile_strings(args.hostile))],
    }
    rows = [run(name, pairs) for name, pairs in workloads.items()]
    rows.insert(1, run("math500/math-verify", [(t, t) for t in truths], direct=True))
    if args.workers > 0:
        rows += [run_pool(name, pairs, args.workers) for name, pairs in workloads.items()]
    print_table(rows)


if __name__ == "__main__":
    main()
