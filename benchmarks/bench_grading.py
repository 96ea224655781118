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
- math500/gamed-17: the patterns of issue 17 around every MATH500 truth that is
  a number (WRONG as above): a thousands separator with a space or a leading 0
  (`2, 500` for 2500, `0,111` for 111), its digits split into a list, the bare
  right-hand side of a relation (`25` for `x^2+y^2=25`, `a^2+b=25`,
  `\\frac{x^2}{a^2}+\\frac{y^2}{b^2}=25`, `x^2=25`), the real part for a complex
  truth written with `\\mathrm{i}` (`3` or `3+T` for `3+T\\mathrm{i}`), the number
  for `T\\mathrm{e}` or `T\\mathrm{i}`, `T\\mathrm{i}` and `T\\mathrm{e}` for T, and
  `T \\neq WRONG` for T. None of them should score;
- hostile: generated junk (nested braces, towers of powers, unbalanced LaTeX,
  long garbage, huge factorials and binomials) against MATH500 truths.

math500/gamed and hostile stand in for the 2,000 adversarial completions of the
bad-input campaign (issue 10): none may crash or hang, and `worst ms` is the
slowest single call (`cpu ms` the largest CPU time of one, which is what the
limits bound; `cpu s` the workload's CPU time, steadier than `sec` on a shared
machine).

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


def gamed_17(truth: str) -> list[tuple[str, str]]:
    """(answer, truth) pairs of issue 17's patterns around a truth that is a whole number;
    none is right."""
    digits = truth.lstrip("-")
    if not digits.isdigit() or len(digits) > 12 or int(digits) == 0:
        return []  # (0 is also 0i and 0e)
    wrong = perturb(truth)
    pairs = [(f"0,{truth}", truth), (f"{truth}, 0", truth), (f"x = {wrong}, {truth}", truth)]
    if len(digits) >= 2:
        sign = truth[: len(truth) - len(digits)]
        for i in sorted({1, max(1, len(digits) - 3)}):
            pairs.append((f"{sign}{digits[:i]}, {digits[i:]}", truth))  # `2, 500` for 2500
        pairs.append((truth, f"{sign}{digits[:1]}, {digits[1:]}"))  # and the other way round
    for relation in ("x^2+y^2", "a^2+b", r"\frac{x^2}{a^2}+\frac{y^2}{b^2}", "x^2", "2x"):
        pairs.append((truth, f"{relation}={truth}"))
    pairs += [(truth, rf"{truth}\mathrm{{i}}"), (truth, rf"{truth}\mathrm{{e}}"), (truth, rf"3+{truth}\mathrm{{i}}")]
    pairs += [("3", rf"3+{truth}\mathrm{{i}}"), (rf"{truth}\mathrm{{i}}", truth), (rf"{truth}\mathrm{{e}}", truth)]
    pairs += [(rf"{truth} \neq {wrong}", truth), (rf"x \neq {truth}", truth)]
    return pairs


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
    worst, worst_cpu, right = 0.0, 0.0, 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for response, truth in pairs:
        t0, c0 = time.perf_counter(), time.process_time()
        if direct:
            right += math_verify_equal(normalize_answer(response), normalize_answer(truth)).equal
        else:
            right += r1_zero_reward(response, truth)["reward"] == 1.0
        worst = max(worst, time.perf_counter() - t0)
        worst_cpu = max(worst_cpu, time.process_time() - c0)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return dict(
        name=name,
        n=len(pairs),
        right=right,
        seconds=seconds,
        cpu=cpu,
        worst=worst,
        worst_cpu=worst_cpu,
        **grading_stats(),
    )


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
    return dict(
        name=name,
        n=len(pairs),
        right=right,
        seconds=seconds,
        cpu=float("nan"),
        worst=float("nan"),
        worst_cpu=float("nan"),
        **grading_stats(),
    )


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'workload':<24} {'n':>5} {'right':>6} {'sec':>7} {'cpu s':>7} {'resp/s':>8} "
        f"{'worst ms':>9} {'cpu ms':>7} {'fast':>5} {'rejected':>8} {'timeouts':>8} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        rate = r["n"] / r["seconds"] if r["seconds"] else float("inf")
        print(
            f"{r['name']:<24} {r['n']:>5} {r['right']:>6} {r['seconds']:>7.2f} {r['cpu']:>7.2f} {rate:>8.0f} "
            f"{r['worst'] * 1000:>9.0f} {r['worst_cpu'] * 1000:>7.0f} {r['fast']:>5} {r['rejected']:>8} "
            f"{r['timeouts']:>8} {r['errors']:>6}"
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
        "math500/gamed-17": [(r1(answer), truth) for t in truths for answer, truth in gamed_17(t)],
        "hostile": [(r1(h), truths[i % len(truths)]) for i, h in enumerate(hostile_strings(args.hostile))],
    }
    rows = [run(name, pairs) for name, pairs in workloads.items()]
    rows.insert(1, run("math500/math-verify", [(t, t) for t in truths], direct=True))
    if args.workers > 0:
        rows += [run_pool(name, pairs, args.workers) for name, pairs in workloads.items()]
    print_table(rows)


if __name__ == "__main__":
    main()
