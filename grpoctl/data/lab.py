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
# The hard levels (issue 37's lab-long variant): up to 10 steps keep every total at most
# 99 + 10 * 9 = 189, inside the lab tokenizer's number tokens 0..NUMBER_MAX (tiny/model.py).
HARD_LEVELS = (6, 7, 8, 9, 10)
ALL_LEVELS = LEVELS + HARD_LEVELS
NUMBER_MAX = 199  # the lab tokenizer's largest number token (tiny/model.py LAB_NUMBER_MAX)
STEP_MAX = 9  # the largest single-digit step
LINE_TOKENS = 6  # a working line and its space, ` 47+8=55`, in lab tokens
LAB_SOURCES = {"lab": LEVELS, "lab-hard": HARD_LEVELS}  # data.source -> the levels its problems have
ANSWER_TOKENS = 4  # ` </think> <answer>59</answer>` (`\boxed{59}` takes 3)
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


def lab_eval_examples(per_level: int = EVAL_PER_LEVEL, levels: tuple[int, ...] = LEVELS) -> list[Example]:
    """The held-out problems: `per_level` distinct ones of each of `levels`, easiest first."""
    rng = random.Random("lab-eval:1234" if levels == LEVELS else f"lab-eval:{levels}:1234")
    out: list[Example] = []
    seen: set[str] = set()
    for level in levels:
        kept = 0
        while kept < per_level:
            problem = draw_problem(rng, "eval", level)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            out.append(_example(problem))
            kept += 1
    return out


def lab_train_examples(n: int = TRAIN_SIZE, seed: int = 0, levels: tuple[int, ...] = LEVELS) -> list[Example]:
    """`n` training problems, `levels` in equal shares, shuffled by `seed`.

    Drawn with replacement (level 1 has only about 1,460 distinct train problems), so an id
    carries the draw's index to stay unique.
    """
    rng = random.Random(f"lab-train:{seed}" if levels == LEVELS else f"lab-train:{levels}:{seed}")
    out = [_example(draw_problem(rng, "train", levels[i % len(levels)]), i) for i in range(n)]
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

    Issue 37's variants add, each off at its default (the lab's mixtures draw as before):
    levels: the levels traces are drawn from, in equal shares.
    p_slip_hard: p_slip on the levels beyond 5 (None: p_slip).
    p_again: chance that a working trace writes its working again, as a check pass; each
      further pass with chance p_more, while the response fits in max_tokens. A pass
      recomputes the chain (its lines slip on their own) and the answer is the last pass's.
    p_r1_format: when set, the answer format is drawn on its own, r1 with this chance,
      whichever the template (p_cross is then unused): the format-poor start.
    """

    p_r1: float
    p_work: tuple[float, ...]
    p_wrong: tuple[float, ...]
    p_slip: float
    p_cross: float
    levels: tuple[int, ...] = LEVELS
    p_slip_hard: float | None = None
    p_again: float = 0.0
    p_more: float = 0.5
    max_tokens: int = 128
    p_r1_format: float | None = None


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
    # -- issue 37's variants (docs/lab-pilots/README.md declares each before its build) --
    # lab-long, phase 1: correct traces of levels 1-10, working as W1 and on every hard
    # level, with check passes (a second pass 0.6 of the time: at 0.25 too few responses made one)
    "X1": Mixture(
        p_r1=0.5, p_work=(0.5, 0.5) + (1.0,) * 8, p_wrong=(0.0,) * 10, p_slip=0.0, p_cross=0.0,
        levels=ALL_LEVELS, p_again=0.6,
    ),
    # lab-long, phase 2: S5Lh on levels 1-5; on levels 6-10 most traces work and their
    # lines slip often, so a sampled chain is rarely right all the way
    "S5Lx": Mixture(
        p_r1=0.5, p_work=(0.5, 0.5, 0.5, 0.4, 0.3) + (0.8,) * 5, p_wrong=(0.03, 0.1, 0.1, 0.1, 0.1) + (0.5,) * 5,
        p_slip=0.05, p_cross=0.05, levels=ALL_LEVELS, p_slip_hard=0.30, p_again=0.6,
    ),
    # lab-direct@N: direct answers only (r1_zero, correct): working must be rediscovered
    "direct": Mixture(p_r1=1.0, p_work=(0.0,) * 5, p_wrong=(0.0,) * 5, p_slip=0.0, p_cross=0.0),
    # lab-boxed: S5Lh's working and noise, answered in \\boxed{} 95% of the time whichever the
    # template, so working appears at equal rates in both formats
    "boxed": Mixture(
        p_r1=0.5, p_work=(0.5, 0.5, 0.5, 0.4, 0.3), p_wrong=(0.03, 0.1, 0.1, 0.1, 0.1), p_slip=0.05, p_cross=0.0,
        p_r1_format=0.05,
    ),
}  # fmt: skip


def _off_by(rng: random.Random, x: int) -> int:
    y = x + rng.choice([1, 1, 2, 10, -1, -1, -2, -10, 3, -3])
    return y if y >= 0 and y != x else x + 1


def working_lines(problem: LabProblem, rng: random.Random, p_slip: float) -> tuple[list[str], int]:
    """The working (`47+8=55` per step) and the value it ends on; each line slips with p_slip."""
    total, lines = problem.operands[0], []
    for i, (op, value) in enumerate(zip(problem.operators, problem.operands[1:], strict=True)):
        exact = total + value if op == "+" else total - value
        result = exact
        if p_slip and rng.random() < p_slip:
            result = _off_by(rng, exact)
            # An upward slip from which the rest of the chain could leave the number tokens
            # goes down instead (never on levels 1-5: their chains stay below 195).
            if result + STEP_MAX * (problem.level - 1 - i) > NUMBER_MAX:
                result = 2 * exact - result
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


def response_tokens(n_lines: int) -> int:
    """Tokens of an r1_zero response with `n_lines` lines of working (the longer of the two formats)."""
    return LINE_TOKENS * n_lines + ANSWER_TOKENS


def _check_passes(
    problem: LabProblem, rng: random.Random, mixture: Mixture, p_slip: float, lines: list[str], final: int
) -> tuple[list[str], int]:
    """The working written again, pass after pass, while a draw says so and it fits."""
    chance = mixture.p_again
    while response_tokens(len(lines) + problem.level) <= mixture.max_tokens and rng.random() < chance:
        again, final = working_lines(problem, rng, p_slip)
        lines = lines + again
        chance = mixture.p_more
    return lines, final


def draw_trace(rng: random.Random, mixture: Mixture) -> Trace:
    """One warm-start trace on a training problem, drawn from `mixture`."""
    level = rng.choices(mixture.levels, weights=[1] * len(mixture.levels))[0]
    problem = draw_problem(rng, "train", level)
    working = rng.random() < mixture.p_work[level - 1]
    wrong = rng.random() < mixture.p_wrong[level - 1]
    if working:
        p_slip = mixture.p_slip if level in LEVELS or mixture.p_slip_hard is None else mixture.p_slip_hard
        lines, final = working_lines(problem, rng, p_slip)
        if mixture.p_again:
            lines, final = _check_passes(problem, rng, mixture, p_slip, lines, final)
    else:
        lines, final = [], (_off_by(rng, problem.answer) if wrong else problem.answer)
    template = "r1" if rng.random() < mixture.p_r1 else "qo"
    if mixture.p_r1_format is not None:
        fmt = "r1" if rng.random() < mixture.p_r1_format else "qo"
    else:
        fmt = template if rng.random() >= mixture.p_cross else ("qo" if template == "r1" else "r1")
    prompt = (R1_PROMPT if template == "r1" else QO_PROMPT).replace("{question}", problem.question)
    return Trace(prompt, completion(fmt, lines, final), level, working, final == problem.answer)
