"""The lab task: chains of + and - where the policy chooses how much to write.

A problem is a two-digit number followed by `level` single-digit steps, e.g. level 3 is
`47+8-5+9`; every partial result stays >= 0, so the largest answer is 99 + 5 * 9 = 144.
It can be answered two ways after the r1_zero prompt's `<think>`:

- directly: ` </think> <answer>59</answer>` (4 tokens with the lab tokenizer), or
- with working, one line per partial result: ` 47+8=55 55-5=50 50+9=59 </think> <answer>59</answer>`.

A tiny model can add one digit to a number in one token (it learns a lookup per line) but
not five in its head, so working pays on the hard levels and costs length on every level:
how long to write is the policy's choice, which is what the seed's length findings are
about. ("The seed" is the user's account of the system grpoctl builds, shared/seed/.)

The same problems are asked in both of the real workload's formats: r1_zero (the answer in
`<answer>` tags, graded by `r1_zero_reward`) and question_only (just the question, the
answer in `\\boxed{}`, graded by `question_only_reward`).

The train/eval split is the synthetic task's hash of the question (`split_of`), so no eval
problem is ever a training prompt or a warm-start trace, whatever the seed.

Warm-start traces come from a `Mixture`: which share of traces writes working, how often a
working line slips (the chain goes on from the wrong value, as a person's would) or a
direct answer is off, and how often a trace answers in the other template's format. The
base model (tiny/lab_warmstart.py) is trained on such a mixture, so at step 0 it writes
working some of the time, is right some of the time, and has something for GRPO to learn.
The draws below keep the order of the lab's pilots (docs/lab-pilots/), so a given seed
gives the pilots' exact traces.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from grpoctl.data.examples import Example
from grpoctl.data.synthetic import split_of

LEVELS = (1, 2, 3, 4, 5)  # single-digit steps after the first operand
R1_PROMPT = "User: {question}\nAssistant: <think>"  # the r1_zero_compact template
QO_PROMPT = "{question}"  # the question_only template
EVAL_PER_LEVEL = 128  # 640 held-out problems, the same for every run
TRAIN_SIZE = 4000  # training problems drawn per run (levels equal, with replacement)
LAB_TASK_VERSION = 1  # the eval data's identity (its data_hash): bump if the generator changes


@dataclass(frozen=True)
class LabProblem:
    question: str
    operands: tuple[int, ...]
    operators: tuple[str, ...]
    answer: int
    level: int


def make_problem(rng: random.Random, level: int) -> LabProblem:
    """A random problem of `level` steps; a `-` that would go below 0 becomes `+`."""
    values = [rng.randint(10, 99)]
    operators: list[str] = []
    total = values[0]
    for _ in range(level):
        value = rng.randint(1, 9)
        op = rng.choice("+-")
        if op == "-" and total - value < 0:
            op = "+"
        total = total + value if op == "+" else total - value
        operators.append(op)
        values.append(value)
    question = str(values[0]) + "".join(o + str(v) for o, v in zip(operators, values[1:], strict=True))
    return LabProblem(question, tuple(values), tuple(operators), total, level)


def draw_problem(rng: random.Random, split: str, level: int) -> LabProblem:
    """A random problem of `level` from `split` ("train" or "eval")."""
    while True:
        problem = make_problem(rng, level)
        if split_of(problem.question) == split:
            return problem


def _example(problem: LabProblem, index: int | None = None) -> Example:
    suffix = "" if index is None else f"#{index}"
    return Example(
        id=f"lab:L{problem.level}:{problem.question}{suffix}",
        question=problem.question,
        answer=str(problem.answer),
        level=problem.level,
    )


def lab_eval_examples(per_level: int = EVAL_PER_LEVEL) -> list[Example]:
    """The held-out problems: `per_level` distinct ones of each level, easiest first."""
    rng = random.Random("lab-eval:1234")
    out: list[Example] = []
    seen: set[str] = set()
    for level in LEVELS:
        kept = 0
        while kept < per_level:
            problem = draw_problem(rng, "eval", level)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            out.append(_example(problem))
            kept += 1
    return out


def lab_train_examples(n: int = TRAIN_SIZE, seed: int = 0) -> list[Example]:
    """`n` training problems, levels in equal shares, shuffled by `seed`.

    Drawn with replacement (level 1 has only about 1,460 distinct train problems), so an id
    carries the draw's index to stay unique.
    """
    rng = random.Random(f"lab-train:{seed}")
    out = [_example(draw_problem(rng, "train", LEVELS[i % len(LEVELS)]), i) for i in range(n)]
    rng.shuffle(out)
    return out


def writes_working(response: str) -> bool:
    """Whether a response writes working: an `=` before its answer."""
    return "=" in response.split("</think>")[0].split("\\boxed")[0]


# -- warm-start traces -------------------------------------------------------------------


@dataclass(frozen=True)
class Mixture:
    """What the warm-start traces look like; each per-level tuple is indexed by level - 1.

    p_r1: share of traces with the r1_zero prompt (the rest: question_only).
    p_work: share that writes working.
    p_wrong: share of direct answers that are off (by 1, 2, 3 or 10).
    p_slip: chance that each working line is off; the chain continues from the slip.
    p_cross: share answered in the other template's format.
    """

    p_r1: float
    p_work: tuple[float, ...]
    p_wrong: tuple[float, ...]
    p_slip: float
    p_cross: float


MIXTURES = {
    # correct only; working on every trace of levels 3-5 and on half of levels 1 and 2
    "W1": Mixture(p_r1=0.5, p_work=(0.5, 0.5, 1.0, 1.0, 1.0), p_wrong=(0.0,) * 5, p_slip=0.0, p_cross=0.0),
    # half working, half direct; lines slip at 5%, direct answers off 10% (3% on level 1,
    # whose all-right groups GRPO also needs), 5% cross-format
    "S5L": Mixture(p_r1=0.5, p_work=(0.5,) * 5, p_wrong=(0.03, 0.1, 0.1, 0.1, 0.1), p_slip=0.05, p_cross=0.05),
    # S5L with fewer working traces on levels 4 and 5: the base is unsure whether to work
    # exactly where working pays most (the lab's base; pilots' round 4)
    "S5Lh": Mixture(
        p_r1=0.5, p_work=(0.5, 0.5, 0.5, 0.4, 0.3), p_wrong=(0.03, 0.1, 0.1, 0.1, 0.1), p_slip=0.05, p_cross=0.05
    ),
    # the narrow SFT traces: one style only (r1_zero with working), correct only
    "narrow": Mixture(p_r1=1.0, p_work=(1.0,) * 5, p_wrong=(0.0,) * 5, p_slip=0.0, p_cross=0.0),
}


def _off_by(rng: random.Random, x: int) -> int:
    y = x + rng.choice([1, 1, 2, 10, -1, -1, -2, -10, 3, -3])
    return y if y >= 0 and y != x else x + 1


def working_lines(problem: LabProblem, rng: random.Random, p_slip: float) -> tuple[list[str], int]:
    """The working (`47+8=55` per step) and the value it ends on; each line slips with p_slip."""
    total, lines = problem.operands[0], []
    for op, value in zip(problem.operators, problem.operands[1:], strict=True):
        result = total + value if op == "+" else total - value
        if p_slip and rng.random() < p_slip:
            result = _off_by(rng, result)
        lines.append(f"{total}{op}{value}={result}")
        total = result
    return lines, total


def completion(fmt: str, lines: list[str], answer: int) -> str:
    """The text after the prompt: working (if any), then the answer in `fmt` ("r1" or "qo")."""
    work = (" " + " ".join(lines)) if lines else ""
    return f"{work} </think> <answer>{answer}</answer>" if fmt == "r1" else f"{work} \\boxed{{{answer}}}"


@dataclass(frozen=True)
class Trace:
    prompt: str
    completion: str
    level: int
    working: bool
    right: bool


def draw_trace(rng: random.Random, mixture: Mixture) -> Trace:
    """One warm-start trace on a training problem, drawn from `mixture`."""
    level = rng.choices(LEVELS, weights=[1] * len(LEVELS))[0]
    problem = draw_problem(rng, "train", level)
    working = rng.random() < mixture.p_work[level - 1]
    wrong = rng.random() < mixture.p_wrong[level - 1]
    if working:
        lines, final = working_lines(problem, rng, mixture.p_slip)
    else:
        lines, final = [], (_off_by(rng, problem.answer) if wrong else problem.answer)
    template = "r1" if rng.random() < mixture.p_r1 else "qo"
    fmt = template if rng.random() >= mixture.p_cross else ("qo" if template == "r1" else "r1")
    prompt = (R1_PROMPT if template == "r1" else QO_PROMPT).replace("{question}", problem.question)
    return Trace(prompt, completion(fmt, lines, final), level, working, final == problem.answer)
