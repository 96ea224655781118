"""The lab task (grpoctl/data/lab.py): its problems, its split, its warm-start traces, and
how grpoctl's own reward functions grade its completions.

A problem is `47+8-5+9`: a two-digit number and `level` single-digit steps, every partial
result >= 0. Eval problems are never training problems (the synthetic task's split_of);
the eval set is fixed, the training draw follows the seed. Traces are drawn from a
Mixture, whose shares the draws must reproduce.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from conftest import REPO

from grpoctl.config import load_config
from grpoctl.data import lab
from grpoctl.data.lab import (
    HARD_LEVELS,
    LEVELS,
    MIXTURES,
    NUMBER_MAX,
    QO_PROMPT,
    R1_PROMPT,
    LabProblem,
    Mixture,
    completion,
    draw_problem,
    draw_trace,
    lab_eval_examples,
    lab_train_examples,
    make_problem,
    response_tokens,
    working_lines,
    writes_working,
)
from grpoctl.data.load import load_examples
from grpoctl.data.synthetic import split_of
from grpoctl.rewards import question_only_reward, r1_zero_reward

LAB_YAML = REPO / "experiments" / "lab.yaml"
LINE = re.compile(r"^(-?\d+)([+-])(\d)=(-?\d+)$")  # a slip may take the chain below 0


def _tokens(question: str) -> tuple[list[int], list[str]]:
    """The question read back from its text: operands and operators."""
    parts = re.findall(r"\d+|[+-]", question)
    assert "".join(parts) == question, question  # nothing but digits, + and -
    return [int(p) for p in parts[0::2]], parts[1::2]


def _partials(question: str) -> list[int]:
    """Every partial result, left to right (+ and - only: no precedence to get wrong)."""
    operands, operators = _tokens(question)
    total, out = operands[0], []
    for op, value in zip(operators, operands[1:], strict=True):
        total = total + value if op == "+" else total - value
        out.append(total)
    return out


def _question_of(prompt: str) -> str:
    if prompt.startswith("User: "):
        return prompt.removeprefix("User: ").removesuffix("\nAssistant: <think>")
    return prompt


@pytest.fixture(scope="module")
def eval_set():
    return lab_eval_examples()


# --------------------------------------------------------------------------- problems


def test_make_problem_is_a_chain_of_level_single_digit_steps_that_never_goes_below_zero():
    rng = random.Random(0)
    for level in LEVELS:
        for _ in range(400):
            p = make_problem(rng, level)
            operands, operators = _tokens(p.question)
            assert p.level == level == len(p.operators) == len(operators)
            assert list(p.operands) == operands and list(p.operators) == operators
            assert 10 <= operands[0] <= 99 and all(1 <= v <= 9 for v in operands[1:])
            partials = _partials(p.question)
            assert partials[-1] == p.answer
            assert min(partials) >= 0, p
            assert p.answer <= 99 + 9 * level


def test_draw_problem_keeps_to_its_split():
    rng = random.Random(1)
    for split in ("train", "eval"):
        for level in LEVELS:
            assert all(split_of(draw_problem(rng, split, level).question) == split for _ in range(50))


def test_eval_set_is_640_distinct_problems_of_every_level_easiest_first(eval_set):
    assert len(eval_set) == 640 == len(LEVELS) * lab.EVAL_PER_LEVEL
    assert len({ex.question for ex in eval_set}) == 640 and len({ex.id for ex in eval_set}) == 640
    assert Counter(ex.level for ex in eval_set) == {level: 128 for level in LEVELS}
    assert [ex.level for ex in eval_set] == sorted(ex.level for ex in eval_set)
    for ex in eval_set:
        assert split_of(ex.question) == "eval"
        assert ex.level == len(_tokens(ex.question)[1])  # Example.level is the problem's own
        assert ex.answer == str(_partials(ex.question)[-1])
        assert min(_partials(ex.question)) >= 0
        assert ex.id == f"lab:L{ex.level}:{ex.question}"


def test_eval_set_is_deterministic(eval_set):
    again = lab_eval_examples()
    assert [(ex.id, ex.answer) for ex in again] == [(ex.id, ex.answer) for ex in eval_set]
    smaller = lab_eval_examples(per_level=4)
    assert len(smaller) == 20 and Counter(ex.level for ex in smaller) == {level: 4 for level in LEVELS}


def test_train_problems_follow_the_seed_and_never_hold_an_eval_problem(eval_set):
    held_out = {ex.question for ex in eval_set}
    draws = {seed: lab_train_examples(seed=seed) for seed in (0, 1, 2)}
    for seed, train in draws.items():
        assert len(train) == lab.TRAIN_SIZE == 4000
        assert len({ex.id for ex in train}) == 4000  # drawn with replacement, ids still unique
        assert Counter(ex.level for ex in train) == {level: 800 for level in LEVELS}
        assert not held_out & {ex.question for ex in train}, seed
        assert all(split_of(ex.question) == "train" for ex in train)
        for ex in train[:200]:
            assert ex.level == len(_tokens(ex.question)[1]) and ex.answer == str(_partials(ex.question)[-1])
    assert [ex.id for ex in lab_train_examples(seed=1)] == [ex.id for ex in draws[1]]
    assert [ex.id for ex in draws[0]] != [ex.id for ex in draws[1]]
    assert {ex.question for ex in draws[0]} != {ex.question for ex in draws[1]}
    assert len(lab_train_examples(n=7, seed=3)) == 7


def test_data_source_lab_loads_through_the_packages_loaders(eval_set):
    from grpoctl.data.run_data import load_run_data

    assert [ex.id for ex in load_examples("lab", split="eval")] == [ex.id for ex in eval_set]
    assert [ex.id for ex in load_examples("lab", split="train", n=50, seed=4)] == [
        ex.id for ex in lab_train_examples(50, 4)
    ]
    cfg = load_config(LAB_YAML, ["eval.subset=32", "data.train_size=100", "seed=5"])
    data = load_run_data(cfg)
    assert data.data_hash == f"lab:v{lab.LAB_TASK_VERSION}" and data.template_name == "r1_zero_compact"
    assert len(data.eval) == 32 and {ex.id for ex in data.eval} <= {ex.id for ex in eval_set}
    assert [ex.id for ex in data.train] == [ex.id for ex in lab_train_examples(100, 5)]
    assert not {ex.question for ex in data.train} & {ex.question for ex in eval_set}


# --------------------------------------------------------------------------- working


def _check_line(line: str) -> tuple[int, str, int, int]:
    m = LINE.match(line)
    assert m, line
    a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
    return a, op, b, c


def test_working_without_slips_is_right_line_by_line_and_ends_on_the_answer():
    rng = random.Random(2)
    for level in LEVELS:
        for _ in range(100):
            p = make_problem(rng, level)
            lines, final = working_lines(p, rng, 0.0)
            assert len(lines) == level and final == p.answer
            previous = p.operands[0]
            for line, op, value in zip(lines, p.operators, p.operands[1:], strict=True):
                a, line_op, b, c = _check_line(line)
                assert (a, line_op, b) == (previous, op, value)  # the chain goes on from the last line
                assert c == (a + b if op == "+" else a - b)
                previous = c
            assert lines[-1].endswith(f"={p.answer}")


def test_working_with_certain_slips_is_off_on_every_line_and_goes_on_from_the_slip():
    rng = random.Random(3)
    for level in LEVELS:
        for _ in range(100):
            p = make_problem(rng, level)
            lines, final = working_lines(p, rng, 1.0)
            assert len(lines) == level
            previous = p.operands[0]
            for line, op, value in zip(lines, p.operators, p.operands[1:], strict=True):
                a, line_op, b, c = _check_line(line)
                assert (a, line_op, b) == (previous, op, value)
                assert c != (a + b if op == "+" else a - b), line
                previous = c
            assert final == previous


def test_only_a_slip_takes_the_working_below_zero_and_rarely():
    """A slip goes on from the wrong value, so a later `-` can go below 0 (`2-3=-1`): not in
    correct working, and in about 1 S5L trace in 3,000 (0.035% of 20,000 drawn)."""
    rng = random.Random(8)
    negative = 0
    for _ in range(3000):
        t = draw_trace(rng, MIXTURES["S5L"])
        values = [int(v) for v in re.findall(r"(?:^|[ ={>])(-?\d+)", t.completion)]
        if min(values) < 0:
            negative += 1
            assert not t.right and t.working
    assert negative <= 6, negative


def test_working_lines_draw_nothing_when_they_cannot_slip():
    rng = random.Random(4)
    p = make_problem(rng, 5)
    state = rng.getstate()
    working_lines(p, rng, 0.0)
    assert rng.getstate() == state  # p_slip=0 keeps the pilots' random stream as it was


def test_completion_formats_and_writes_working():
    p = LabProblem("47+8-5+9", (47, 8, 5, 9), ("+", "-", "+"), 59, 3)
    lines, final = working_lines(p, random.Random(0), 0.0)
    assert lines == ["47+8=55", "55-5=50", "50+9=59"] and final == 59
    assert completion("r1", lines, 59) == " 47+8=55 55-5=50 50+9=59 </think> <answer>59</answer>"
    assert completion("r1", [], 59) == " </think> <answer>59</answer>"
    assert completion("qo", lines, 59) == " 47+8=55 55-5=50 50+9=59 \\boxed{59}"
    assert completion("qo", [], 59) == " \\boxed{59}"
    assert writes_working(completion("r1", lines, 59)) and writes_working(completion("qo", lines, 59))
    assert not writes_working(completion("r1", [], 59)) and not writes_working(completion("qo", [], 59))
    # an `=` after the answer's start is not working
    assert not writes_working(" </think> <answer>x=59</answer>") and not writes_working(" \\boxed{x=59}")
    assert R1_PROMPT.replace("{question}", p.question) == "User: 47+8-5+9\nAssistant: <think>"
    assert QO_PROMPT.replace("{question}", p.question) == "47+8-5+9"


# --------------------------------------------------------------------------- rewards


def test_the_packages_rewards_grade_lab_completions():
    rng = random.Random(5)
    for level in LEVELS:
        for _ in range(6):
            p = draw_problem(rng, "eval", level)
            truth = str(p.answer)
            right_lines, _ = working_lines(p, rng, 0.0)
            slipped, wrong = working_lines(p, rng, 1.0)
            for lines, answer, reward in (
                ([], p.answer, 1.0),
                (right_lines, p.answer, 1.0),
                ([], p.answer + 1, 0.0),
                (slipped, wrong, float(wrong == p.answer)),  # slips can cancel out
            ):
                r1 = r1_zero_reward(completion("r1", lines, answer), truth)
                qo = question_only_reward(completion("qo", lines, answer), truth)
                assert r1 == {"format_reward": 1.0, "answer_reward": reward, "reward": reward}, (lines, answer)
                assert qo == {"format_reward": 1.0, "answer_reward": reward, "reward": reward}, (lines, answer)
                # an answer in the other template's format scores nothing, even when right
                assert r1_zero_reward(completion("qo", lines, answer), truth)["reward"] == 0.0
                assert question_only_reward(completion("r1", lines, answer), truth)["reward"] == 0.0
            # working that is right but an answer that is not: the answer is what is graded
            assert r1_zero_reward(completion("r1", right_lines, p.answer + 10), truth)["reward"] == 0.0


def test_traces_are_graded_as_they_say_by_the_packages_rewards():
    rng = random.Random(6)
    traces = [draw_trace(rng, MIXTURES["S5L"]) for _ in range(300)]
    seen = Counter()
    for t in traces:
        truth = str(_partials(_question_of(t.prompt))[-1])
        fmt = "r1" if t.completion.endswith("</answer>") else "qo"
        reward = (r1_zero_reward if fmt == "r1" else question_only_reward)(t.completion, truth)
        assert reward["format_reward"] == 1.0
        assert reward["reward"] == float(t.right), t
        assert writes_working(t.completion) == t.working
        seen[(fmt, t.working, t.right)] += 1
    assert len(seen) == 8  # every kind of trace is among these 300


# --------------------------------------------------------------------------- mixtures


def _shares(traces):
    n = len(traces)
    return {
        "working": sum(t.working for t in traces) / n,
        "right": sum(t.right for t in traces) / n,
        "r1_prompt": sum(t.prompt.startswith("User: ") for t in traces) / n,
        "cross": sum(t.prompt.startswith("User: ") != t.completion.endswith("</answer>") for t in traces) / n,
    }


def _expected(m: Mixture) -> dict[str, float]:
    """The shares a mixture's draws must reproduce (a trace's answer is its last pass's)."""
    k = len(m.levels)
    work = [m.p_work[level - 1] for level in m.levels]
    slip = [m.p_slip if level in LEVELS or m.p_slip_hard is None else m.p_slip_hard for level in m.levels]
    right_direct = sum((1 - work[i]) * (1 - m.p_wrong[level - 1]) for i, level in enumerate(m.levels)) / k
    right_working = sum(work[i] * (1 - slip[i]) ** level for i, level in enumerate(m.levels)) / k
    cross = m.p_cross if m.p_r1_format is None else m.p_r1 * (1 - m.p_r1_format) + (1 - m.p_r1) * m.p_r1_format
    return {"working": sum(work) / k, "right": right_direct + right_working, "r1_prompt": m.p_r1, "cross": cross}


@pytest.mark.parametrize("name", sorted(MIXTURES))
def test_trace_shares_match_their_mixture(name):
    mixture = MIXTURES[name]
    rng = random.Random(f"shares:{name}")
    traces = [draw_trace(rng, mixture) for _ in range(2000)]
    got, want = _shares(traces), _expected(mixture)
    for key in want:  # 2,000 draws: a share's standard error is at most 0.011
        assert got[key] == pytest.approx(want[key], abs=0.04), (key, got, want)
    levels = Counter(t.level for t in traces)
    share = 2000 / len(mixture.levels)
    assert set(levels) == set(mixture.levels) and all(0.75 * share <= c <= 1.25 * share for c in levels.values())
    for t in traces:
        question = _question_of(t.prompt)
        assert split_of(question) == "train"  # warm-start traces never see an eval problem
        assert t.level == len(_tokens(question)[1])
        assert t.prompt in (R1_PROMPT.replace("{question}", question), QO_PROMPT.replace("{question}", question))


def test_s5l_is_half_working_and_narrow_is_one_style_only():
    rng = random.Random(7)
    s5l = [draw_trace(rng, MIXTURES["S5L"]) for _ in range(2000)]
    assert 0.46 <= _shares(s5l)["working"] <= 0.54
    assert 0.85 <= _shares(s5l)["right"] <= 0.93  # ~0.89: 5% slips per line, 3-10% wrong direct answers
    narrow = [draw_trace(rng, MIXTURES["narrow"]) for _ in range(500)]
    assert all(t.prompt.startswith("User: ") and t.completion.endswith("</answer>") for t in narrow)
    assert all(t.working and t.right for t in narrow)
    w1 = [draw_trace(rng, MIXTURES["W1"]) for _ in range(500)]
    assert all(t.right for t in w1) and all(t.working for t in w1 if t.level >= 3)
    assert any(not t.working for t in w1 if t.level <= 2)


def test_draw_trace_is_deterministic_for_a_seeded_stream():
    rng_a, rng_b = random.Random("y"), random.Random("y")
    assert [draw_trace(rng_a, MIXTURES["S5L"]) for _ in range(50)] == [
        draw_trace(rng_b, MIXTURES["S5L"]) for _ in range(50)
    ]


# --------------------------------------------------------------------------- issue 37's variants


def _passes(t, question: str) -> list[list[str]]:
    """A working trace's lines cut into passes of `level` lines, each a chain from the question's first operand."""
    lines = t.completion.split(" </think>")[0].split(" \\boxed{")[0].split()
    level = t.level
    assert len(lines) % level == 0, t
    passes = [lines[i : i + level] for i in range(0, len(lines), level)]
    first, operators = _tokens(question)[0][0], _tokens(question)[1]
    for chain in passes:
        previous = first
        for line, op in zip(chain, operators, strict=True):
            a, line_op, _, c = _check_line(line)
            assert (a, line_op) == (previous, op), (t, chain)
            previous = c
    return passes


def test_check_passes_write_the_chain_again_within_the_token_limit():
    """X1 (correct only): a working trace is 1 or more passes of the same chain; a second pass
    comes with p_again where it fits, and no response passes max_tokens."""
    rng = random.Random(11)
    mixture = MIXTURES["X1"]
    traces = [draw_trace(rng, mixture) for _ in range(1500)]
    repeated = Counter()
    for t in traces:
        if not t.working:
            continue
        passes = _passes(t, _question_of(t.prompt))
        assert all(chain == passes[0] for chain in passes)  # no slips in X1: every pass is the same
        assert response_tokens(t.level * len(passes)) <= mixture.max_tokens and t.right
        repeated[len(passes) > 1] += 1
    share = repeated[True] / sum(repeated.values())
    assert abs(share - mixture.p_again) <= 0.06, share  # a second pass fits on every level up to 10 at 128 tokens
    assert {len(_passes(t, _question_of(t.prompt))) for t in traces if t.working and t.level == 1} >= {1, 2, 3}


def test_a_pass_slips_on_its_own_and_the_answer_is_the_last_passs():
    rng = random.Random(12)
    mixture = Mixture(p_r1=1.0, p_work=(1.0,) * 5, p_wrong=(0.0,) * 5, p_slip=0.3, p_cross=0.0, p_again=1.0, p_more=0.0)
    differ = 0
    for _ in range(300):
        t = draw_trace(rng, mixture)
        passes = _passes(t, _question_of(t.prompt))
        assert len(passes) == 2  # p_again 1, p_more 0
        differ += passes[0] != passes[1]
        truth = _partials(_question_of(t.prompt))[-1]
        last = _check_line(passes[-1][-1])[3]
        assert t.completion.endswith(f"<answer>{last}</answer>") and t.right == (last == truth)
    assert differ > 100  # 0.3 a line: most pairs of passes differ somewhere


def test_hard_levels_keep_every_number_inside_the_lab_tokens():
    """Levels 6-10 end at most at 189; a slip that could take the chain past NUMBER_MAX goes down."""
    rng = random.Random(13)
    assert max(make_problem(rng, 10).answer for _ in range(500)) <= 99 + 10 * 9 < NUMBER_MAX
    steepest = LabProblem("99" + "+9" * 10, (99,) + (9,) * 10, ("+",) * 10, 189, 10)
    top = 0
    for _ in range(200):  # every line slips, most of them up: the chain presses on the limit
        lines, final = working_lines(steepest, rng, 1.0)
        values = [v for line in lines for v in (_check_line(line)[0], _check_line(line)[3])]
        assert max(values) <= NUMBER_MAX and final == _check_line(lines[-1])[3]
        top = max(top, *values)
    assert top > 189  # past the exact chain's largest value, yet inside


def test_s5lx_is_hard_on_levels_6_to_10_and_the_lab_mixture_on_1_to_5():
    rng = random.Random(14)
    traces = [draw_trace(rng, MIXTURES["S5Lx"]) for _ in range(2000)]
    hard = [t for t in traces if t.level in HARD_LEVELS]
    assert {t.level for t in traces} == set(LEVELS) | set(HARD_LEVELS)
    assert 0.75 <= sum(t.working for t in hard) / len(hard) <= 0.85
    right_working = sum(t.right for t in hard if t.working) / sum(t.working for t in hard)
    assert 0.08 <= right_working <= 0.18  # 0.7 ** 6..10 is 0.03-0.12; slips that cancel lift it to about 0.13


def test_direct_traces_never_work_and_are_right():
    rng = random.Random(15)
    traces = [draw_trace(rng, MIXTURES["direct"]) for _ in range(500)]
    assert all(not t.working and t.right and t.prompt.startswith("User: ") for t in traces)
    assert all(not writes_working(t.completion) and t.completion.endswith("</answer>") for t in traces)


def test_boxed_answers_in_boxed_whichever_the_template_and_works_alike_in_both_formats():
    rng = random.Random(16)
    traces = [draw_trace(rng, MIXTURES["boxed"]) for _ in range(4000)]
    r1 = [t for t in traces if t.completion.endswith("</answer>")]
    qo = [t for t in traces if not t.completion.endswith("</answer>")]
    assert 0.03 <= len(r1) / len(traces) <= 0.07  # a few percent use the r1 tags
    assert all("<answer>" not in t.completion and t.completion.endswith("}") for t in qo)
    r1_prompts = [t for t in traces if t.prompt.startswith("User: ")]
    assert sum(t.completion.endswith("}") for t in r1_prompts) / len(r1_prompts) > 0.9  # boxed after <think> too
    working = [sum(t.working for t in ts) / len(ts) for ts in (r1, qo)]
    assert abs(working[0] - working[1]) <= 0.1, working  # working at equal rates in both formats


def test_lab_hard_is_levels_6_to_10_split_as_the_lab_is():
    held_out = load_examples("lab-hard", split="eval")
    assert len(held_out) == 640 == len({ex.question for ex in held_out})
    assert Counter(ex.level for ex in held_out) == dict.fromkeys(HARD_LEVELS, 128)
    assert all(split_of(ex.question) == "eval" for ex in held_out)
    train = load_examples("lab-hard", split="train", n=500, seed=3)
    assert {ex.level for ex in train} == set(HARD_LEVELS) and all(split_of(ex.question) == "train" for ex in train)
    for ex in held_out[::50]:
        assert int(ex.answer) == _partials(ex.question)[-1] and len(_tokens(ex.question)[1]) == ex.level
    assert [ex.question for ex in load_examples("lab", split="eval")] == [ex.question for ex in lab_eval_examples()]
