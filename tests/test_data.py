"""Tests for grpoctl.data: loaders on real MATH500/GSM8K files, answer extraction,
one-line errors, the synthetic task and its train/eval split, eval subsets,
hashes, the resumable prompt stream, and the hub loader against a fake `datasets`."""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path

import pytest

from grpoctl.data import (
    DataError,
    Example,
    PromptStream,
    eval_subset,
    file_hash,
    last_boxed,
    load_examples,
    load_gsm8k_jsonl,
    load_hub_dataset,
    load_jsonl,
    load_math_jsonl,
    split_of,
    subset_hash,
    synthetic_examples,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MATH500 = DATA / "math500_test.jsonl"
GSM8K = DATA / "gsm8k_test.jsonl"
needs_math500 = pytest.mark.skipif(not MATH500.exists(), reason=f"{MATH500} not available")
needs_gsm8k = pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not available")


def write_jsonl(path: Path, lines: list) -> Path:
    """Lines are dicts (written as JSON) or raw strings (written as they are)."""
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(text + "\n")
    return path


# --- real data -------------------------------------------------------------


@needs_math500
def test_loads_all_of_math500():
    examples = load_math_jsonl(MATH500)
    assert len(examples) == 500
    assert len({e.id for e in examples}) == 500
    first = examples[0]
    assert first.id == "test/precalculus/807.json"
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.solution and "\\boxed" in first.solution
    assert first.question.startswith("Convert the point $(0,3)$")


@needs_math500
def test_boxed_answers_of_math500_solutions_match_their_answer_field():
    records = [json.loads(line) for line in MATH500.read_text().splitlines()]
    matches = sum(last_boxed(r["solution"]) == r["answer"] for r in records)
    rate = matches / len(records)
    assert rate >= 0.95, f"boxed extraction matched the answer field on {rate:.1%} of MATH500"


@needs_math500
def test_math500_answers_from_solutions_only(tmp_path):
    # The full MATH release has no answer field: loading with answer_key="solution"
    # must give the same answers as the separate field does here.
    with_field = load_math_jsonl(MATH500)
    from_solution = load_math_jsonl(MATH500, answer_key="solution")
    same = sum(a.answer == b.answer for a, b in zip(with_field, from_solution, strict=True))
    assert same / len(with_field) >= 0.95


@needs_gsm8k
def test_loads_all_of_gsm8k():
    examples = load_gsm8k_jsonl(GSM8K)
    assert len(examples) == 1319
    first = examples[0]
    assert first.answer == "18"
    assert first.id == "gsm8k_test:1"
    assert first.solution.startswith("Janet sells 16 - 3 - 4")
    assert "####" not in first.solution
    # Every GSM8K final answer is a plain number once thousands commas are gone.
    for example in examples:
        assert example.answer.lstrip("-").replace(".", "", 1).isdigit(), example


@needs_gsm8k
def test_gsm8k_thousands_commas_are_removed():
    raw = [json.loads(line)["answer"] for line in GSM8K.read_text().splitlines()]
    with_commas = [i for i, answer in enumerate(raw) if "," in answer.rpartition("####")[2]]
    assert with_commas, "expected some GSM8K answers written like 1,600"
    examples = load_gsm8k_jsonl(GSM8K)
    for i in with_commas:
        assert "," not in examples[i].answer
        assert examples[i].answer == raw[i].rpartition("####")[2].strip().replace(",", "")


# --- answer extraction -----------------------------------------------------


@pytest.mark.parametrize(
    "solution, answer",
    [
        ("so $\\boxed{5}$.", "5"),
        ("first \\boxed{1}, finally \\boxed{2}", "2"),
        ("$\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("$\\boxed{\\{1,2\\}}$", "\\{1,2\\}"),
        ("\\fbox{x^{2}+1}", "x^{2}+1"),
        ("\\boxed {7}", "7"),
        ("no box here", None),
        ("\\boxed{1} then broken \\boxed{2", "1"),
    ],
)
def test_last_boxed(solution, answer):
    assert last_boxed(solution) == answer


def test_boxed_fallback_when_records_have_only_a_solution(tmp_path):
    path = write_jsonl(
        tmp_path / "only_solutions.jsonl",
        [
            {"problem": "Half?", "solution": "It is $\\boxed{\\frac{1}{2}}$."},
            {"problem": "Sum?", "solution": "Try \\boxed{3}, no: \\boxed{\\sqrt{x^{2}}}"},
            {"problem": "Box?", "solution": "\\fbox{42}"},
        ],
    )
    examples = load_math_jsonl(path)
    assert [e.answer for e in examples] == ["\\frac{1}{2}", "\\sqrt{x^{2}}", "42"]
    assert [e.id for e in examples] == ["only_solutions:1", "only_solutions:2", "only_solutions:3"]
    assert examples[0].solution == "It is $\\boxed{\\frac{1}{2}}$."


def test_generic_jsonl_with_other_keys_and_numeric_answers(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"q": "1+1", "a": 2, "id": 7}, "", {"q": "2*3", "a": "6"}])
    examples = load_jsonl(path, "q", "a")
    assert examples == [Example("7", "1+1", "2"), Example("mine:3", "2*3", "6")]


# --- one-line errors -------------------------------------------------------


def assert_one_line_error(exc_info, *parts):
    message = str(exc_info.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, message


def test_error_missing_key_names_file_and_line(tmp_path):
    records = [{"problem": "a", "answer": "1"}] * 16 + [{"answer": "2"}]
    path = write_jsonl(tmp_path / "math500.jsonl", records)
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(path)
    assert_one_line_error(exc_info, "math500.jsonl:17: missing key 'problem'")


def test_error_no_answer_and_no_box(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"problem": "a", "solution": "no box"}])
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(path)
    assert_one_line_error(exc_info, "x.jsonl:1: missing key 'answer'", "boxed")


def test_error_invalid_json(tmp_path):
    lines = [{"problem": "a", "answer": "1"}, "", '{"problem": "b" "answer": 1}']
    path = write_jsonl(tmp_path / "x.jsonl", lines)
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(path)
    assert_one_line_error(exc_info, "x.jsonl:3: invalid JSON (Expecting ',' delimiter)")


def test_error_empty_file(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(path)
    assert_one_line_error(exc_info, "x.jsonl: empty file")


def test_error_missing_file(tmp_path):
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(tmp_path / "x.jsonl")
    assert_one_line_error(exc_info, "x.jsonl: no such file")
    with pytest.raises(DataError, match="x.jsonl: no such file"):
        file_hash(tmp_path / "x.jsonl")


def test_error_gsm8k_without_marker_and_not_an_object(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "just 5"}])
    with pytest.raises(DataError) as exc_info:
        load_gsm8k_jsonl(path)
    assert_one_line_error(exc_info, "g.jsonl:1:", "####")
    path = write_jsonl(tmp_path / "l.jsonl", ["[1, 2]"])
    with pytest.raises(DataError) as exc_info:
        load_jsonl(path, "q", "a")
    assert_one_line_error(exc_info, "l.jsonl:1: expected a JSON object, got list")


def test_error_duplicate_ids(tmp_path):
    record = {"problem": "a", "answer": "1", "unique_id": "same"}
    path = write_jsonl(tmp_path / "d.jsonl", [record, record])
    with pytest.raises(DataError) as exc_info:
        load_math_jsonl(path)
    assert_one_line_error(exc_info, "d.jsonl:2: duplicate id 'same' (first on line 1)")


# --- synthetic task --------------------------------------------------------


def test_synthetic_is_deterministic_by_seed():
    a = synthetic_examples("train", 50, seed=3)
    assert a == synthetic_examples("train", 50, seed=3)
    assert a != synthetic_examples("train", 50, seed=4)


def test_synthetic_question_answer_and_solution_format():
    examples = synthetic_examples("train", 200, seed=0)
    for example in examples:
        left, right = example.question.split("+")
        assert len(left) == len(right) == 2 and " " not in example.question
        assert example.answer == str(int(left) + int(right))
        assert example.id == f"add:{example.question}"
        q, a = example.question, example.answer
        assert example.solution == f" {q}={a} </think> <answer>{a}</answer>"
    assert len({e.id for e in examples}) == 200  # without replacement
    assert all(e.solution is None for e in synthetic_examples("train", 5, 0, with_solution=False))


@pytest.mark.parametrize(
    "knobs",
    [
        dict(min_digits=1, max_digits=1, ops=("-",)),
        dict(min_digits=3, max_digits=3, ops=("*",)),
        dict(min_digits=1, max_digits=3, ops=("+", "-", "*"), num_operands=3),
        dict(min_digits=2, max_digits=4, ops=("-", "*"), num_operands=4),
    ],
)
def test_synthetic_knobs_and_exact_answers(knobs):
    examples = synthetic_examples("train", 100, seed=1, **knobs)
    assert len(examples) == 100
    for example in examples:
        numbers = example.question.replace("+", " ").replace("-", " ").replace("*", " ").split()
        operators = [c for c in example.question if c in "+-*"]
        assert len(numbers) == knobs.get("num_operands", 2)
        assert all(knobs["min_digits"] <= len(x) <= knobs["max_digits"] for x in numbers)
        assert set(operators) <= set(knobs["ops"])
        # Python's own arithmetic is the reference for the exact answer.
        assert example.answer == str(eval(example.question))  # noqa: S307 (digits and + - * only)


def test_synthetic_negative_answers_are_plain_integers():
    examples = synthetic_examples("train", 300, seed=0, ops=("-",))
    negatives = [e for e in examples if e.answer.startswith("-")]
    assert negatives and all(e.answer == str(int(e.answer)) for e in negatives)


@pytest.mark.parametrize("knobs", [dict(), dict(min_digits=1, max_digits=3, ops=("+", "*"), num_operands=3)])
def test_synthetic_train_and_eval_are_disjoint_across_seeds_and_sizes(knobs):
    eval_questions = set()
    for seed in (0, 1, 7):
        eval_questions |= {e.question for e in synthetic_examples("eval", 300, seed, **knobs)}
    for seed, n in [(0, 10), (1, 1000), (2, 3000), (123, 7000)]:
        train = synthetic_examples("train", n, seed, **knobs)
        assert not eval_questions & {e.question for e in train}
    assert all(split_of(q) == "eval" for q in eval_questions)


def test_synthetic_split_sizes_and_limits():
    train = synthetic_examples("train", None, 0)
    eval_ = synthetic_examples("eval", None, 0)
    assert len(train) + len(eval_) == 90 * 90
    assert 0.08 < len(eval_) / 8100 < 0.12
    assert not {e.question for e in train} & {e.question for e in eval_}
    # More than the train pool: every problem repeats, none left out.
    big = synthetic_examples("train", 2 * len(train) + 5, 0)
    assert {e.question for e in big} == {e.question for e in train}
    with pytest.raises(ValueError, match="eval split has only"):
        synthetic_examples("eval", len(eval_) + 1, 0)


def test_synthetic_rejects_bad_knobs():
    for bad in [dict(split="test"), dict(ops=("/",)), dict(num_operands=1), dict(min_digits=3, max_digits=2)]:
        args = dict(split="train", n=5, seed=0) | bad
        with pytest.raises(ValueError):
            synthetic_examples(**args)


# --- subsets and hashes ----------------------------------------------------


def test_eval_subset_is_deterministic_and_order_independent():
    examples = synthetic_examples("eval", 500, seed=0)
    shuffled = examples[:]
    random.Random(9).shuffle(shuffled)
    picked = eval_subset(examples, 64, seed=1)
    assert len(picked) == 64
    assert picked == eval_subset(shuffled, 64, seed=1)
    assert picked != eval_subset(examples, 64, seed=2)
    everything = eval_subset(shuffled, 10_000, seed=1)
    assert everything == sorted(examples, key=lambda e: e.id)


def test_subset_and_file_hashes(tmp_path):
    examples = synthetic_examples("eval", 50, seed=0)
    assert subset_hash(examples) == subset_hash(list(reversed(examples)))
    assert subset_hash(examples) != subset_hash(examples[1:])
    a = write_jsonl(tmp_path / "a.jsonl", [{"problem": "p", "answer": "1"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"problem": "p", "answer": "2"}])
    assert file_hash(a) == file_hash(a) and file_hash(a) != file_hash(b)
    assert len(file_hash(a)) == len(subset_hash(examples)) == 12


# --- prompt stream ---------------------------------------------------------


def test_prompt_stream_covers_each_epoch_and_reshuffles():
    examples = synthetic_examples("train", 10, seed=0)
    stream = PromptStream(examples, seed=5)
    first, second = stream.next_batch(10), stream.next_batch(10)
    assert sorted(e.id for e in first) == sorted(e.id for e in examples)
    assert sorted(e.id for e in second) == sorted(e.id for e in examples)
    assert first != second
    assert stream.position == 20 and stream.epoch == 2


def test_prompt_stream_seek_resumes_exactly():
    examples = synthetic_examples("train", 37, seed=0)
    uninterrupted = PromptStream(examples, seed=11)
    reference = [uninterrupted.next_batch(8) for _ in range(12)]  # spans several epochs
    for stop in (1, 4, 5, 9):
        resumed = PromptStream(examples, seed=11)
        resumed.seek(stop * 8)
        assert [resumed.next_batch(8) for _ in range(12 - stop)] == reference[stop:]
    assert PromptStream(examples, seed=11, position=40).next_batch(8) == reference[5]
    assert PromptStream(examples, seed=12).next_batch(8) != reference[0]


# --- dispatcher ------------------------------------------------------------


def test_load_examples_dispatches(tmp_path):
    assert load_examples("synthetic", split="eval", n=5, seed=2) == synthetic_examples("eval", 5, 2)
    assert len(load_examples("synthetic", n=5, ops=("*",), num_operands=3)) == 5
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": f"p{i}", "answer": str(i)} for i in range(20)])
    assert len(load_examples("math", path=path)) == 20
    assert load_examples("math", path=path, n=5, seed=1) == load_examples("math", path=path, n=5, seed=1)
    assert len(load_examples("jsonl", path=path, question_key="problem", answer_key="answer", n=3)) == 3
    evals = load_examples("lab", split="eval", n=4, seed=0)
    assert len(evals) == 4 and all(ex.level in (1, 2, 3, 4, 5) for ex in evals)
    assert len(load_examples("lab", split="train", n=7, seed=3)) == 7
    with pytest.raises(ValueError, match="synthetic, lab, lab-hard, math, gsm8k, jsonl, hub"):
        load_examples("csv", path=path)
    with pytest.raises(ValueError, match="needs path"):
        load_examples("math")


@needs_gsm8k
def test_load_examples_gsm8k():
    assert len(load_examples("gsm8k", path=GSM8K)) == 1319


# --- hub loader (no network: a fake `datasets` module) -----------------------


def fake_datasets(rows_by_split: dict, calls: list) -> types.ModuleType:
    module = types.ModuleType("datasets")

    def load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        if split not in rows_by_split:
            raise ValueError(f'Unknown split "{split}".\nShould be one of {list(rows_by_split)}.')
        return list(rows_by_split[split])

    module.load_dataset = load_dataset
    return module


def test_hub_loader_with_fake_datasets(monkeypatch):
    rows = {
        "train": [
            {"problem": "1+1?", "solution": "It is $\\boxed{2}$.", "level": "Level 1"},
            {"problem": "Half?", "solution": "$\\boxed{\\frac{1}{2}}$", "level": "Level 2"},
        ],
        "test": [{"question": "q", "answer": "Work: 3*4=12\n#### 1,200"}],
    }
    calls: list = []
    monkeypatch.setitem(sys.modules, "datasets", fake_datasets(rows, calls))

    math = load_hub_dataset("someone/MATH", "train", "problem", "solution", config="all")
    assert calls[-1] == ("someone/MATH", "all", "train")
    assert [e.answer for e in math] == ["2", "\\frac{1}{2}"]
    assert math[0].solution == "It is $\\boxed{2}$."
    assert math[1].id == "someone/MATH/all:train:1"

    gsm = load_examples("hub", path="openai/gsm8k", split="test", question_field="question", answer_field="answer")
    assert gsm == [Example("openai/gsm8k:test:0", "q", "1200", "Work: 3*4=12")]

    with pytest.raises(DataError) as exc_info:
        load_hub_dataset("someone/MATH", "train", "question", "solution")
    assert_one_line_error(exc_info, "someone/MATH [train] row 0: missing key 'question'")
    with pytest.raises(DataError) as exc_info:
        load_hub_dataset("someone/MATH", "validation", "problem", "solution")
    assert_one_line_error(exc_info, "someone/MATH [validation]", "Unknown split")


def test_hub_loader_without_datasets_says_how_to_install(monkeypatch):
    # None in sys.modules makes `import datasets` raise ImportError.
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'grpoctl\[hub\]'"):
        load_hub_dataset("someone/MATH", "train", "problem", "answer")


# --------------------------------------------------------------------------- a run's train and eval data


def run_config(*overrides):
    from grpoctl.config import load_config

    return load_config(None, list(overrides))


def test_train_and_eval_data_in_different_formats(tmp_path):
    """Train on a GSM8K-shaped file, evaluate on a MATH-shaped one, each with its own field
    names; a problem in both is held out of training, whatever format each came in."""
    from grpoctl.data.run_data import load_run_data
    from grpoctl.errors import UserError

    train = write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"},
            {"question": "What is 7*6?", "answer": "7*6=42\n#### 42"},
            {"question": "What is $1+1$?", "answer": "#### 2"},  # also an eval problem
        ],
    )
    evals = write_jsonl(
        tmp_path / "eval.jsonl",
        [
            {"problem": "What is $1+1$?", "solution": "$1+1=\\boxed{2}$", "answer": "2"},
            {"problem": "Find $x$ if $x^2=9$, $x>0$.", "solution": "\\boxed{3}", "answer": "3"},
        ],
    )
    base = [
        "data.source=jsonl",
        "data.question_field=question",
        "data.answer_field=answer",
        f"data.train_path={train}",
        f"data.eval_path={evals}",
    ]
    data = load_run_data(run_config(*base, "data.eval_source=jsonl", "data.eval_question_field=problem"))
    assert [ex.answer for ex in data.train] == ["5", "42"]  # GSM8K style: after the marker
    assert sorted(ex.question for ex in data.eval) == ["Find $x$ if $x^2=9$, $x>0$.", "What is $1+1$?"]
    assert data.eval_source == "jsonl" and data.data_hash == file_hash(evals)
    math = load_run_data(run_config(*base, "data.eval_source=math", "data.eval_question_field=problem"))
    assert sorted(ex.answer for ex in math.eval) == ["2", "3"] and math.eval_source == "math"
    # Without the eval field names, the eval file is read with the train file's: refused in one line.
    with pytest.raises(UserError, match=r"eval\.jsonl:1: missing key 'question'"):
        load_run_data(run_config(*base, "data.eval_source=jsonl"))
    # An eval of a checkpoint reads only the eval data (the train file may be gone by then).
    train.unlink()
    only_eval = load_run_data(
        run_config(*base, "data.eval_source=math", "data.eval_question_field=problem"), need_train=False
    )
    assert only_eval.train == [] and len(only_eval.eval) == 2


def test_synthetic_training_with_a_file_to_evaluate_on(tmp_path):
    from grpoctl.data.run_data import load_run_data

    evals = write_jsonl(tmp_path / "eval.jsonl", [{"problem": "What is $12+30$?", "answer": "42"}])
    data = load_run_data(run_config("data.eval_source=math", f"data.eval_path={evals}"))
    assert len(data.train) > 1000 and [ex.answer for ex in data.eval] == ["42"]
    assert data.eval_source == "math" and data.data_hash == file_hash(evals)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["data.eval_source=csv"],
            "data.eval_source='csv' is not one of: synthetic, lab, lab-hard, math, gsm8k, jsonl, hub "
            "(or null: the same as data.source)",
        ),
        (["data.eval_question_field=''"], "data.eval_question_field must not be empty"),
    ],
)
def test_eval_data_settings_are_checked(overrides, message):
    from grpoctl.errors import UserError

    with pytest.raises(UserError) as info:
        run_config(*overrides)
    assert str(info.value).startswith(message)


def test_an_eval_source_without_its_file_is_named():
    from grpoctl.data.run_data import load_run_data
    from grpoctl.errors import UserError

    with pytest.raises(UserError, match=r"^data\.eval_source=math needs data\.eval_path"):
        load_run_data(run_config("data.eval_source=math"))
