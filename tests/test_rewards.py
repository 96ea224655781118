"""Prompt templates, reward format rules, answer extraction, and the time bound on
grading (in-process and in the worker pool)."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
from math_verify.errors import TimeoutException

from grpoctl.prompts import available_templates, format_prompt, load_template, template_hash
from grpoctl.rewards import (
    REWARD_FNS,
    WRITES_WORKING,
    Grader,
    close_default_grader,
    equivalence,
    get_reward_fn,
    grader_info,
    grading_stats,
    last_boxed,
    pool,
    question_only_reward,
    r1_zero_answer,
    r1_zero_reward,
)
from grpoctl.rewards.cputime import cpu_time_limit

R1_ZERO = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with the "
    "answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>.\nUser: {question}\nAssistant: <think>"
)

# Answers that would make a naive grader spin or blow up; all must count as wrong.
HOSTILE = [
    "{" * 50_000 + "}" * 50_000,  # 100 KB of nested braces
    "9^{9^{9^{9}}}",
    "10^{10^{10}}",
    "99999999999^{99999999999}",
    r"\frac{1}{",
    r"\left( \right",
    "}{" * 200,
    "1000000!",
    "(10^{100})!",
    r"\sqrt{" * 30 + "2" + "}" * 30,
    "x" * 100_000,
    r"\binom{10^{9}}{5*10^8}",
    "(10^{10})^{10^{10}}",  # passes the guards; math-verify's timeout stops it
]

# ---------------------------------------------------------------------- prompts


def test_r1_zero_template_is_exact():
    assert load_template("r1_zero") == R1_ZERO
    assert not load_template("r1_zero").endswith("\n")


def test_other_packaged_templates():
    assert load_template("question_only") == "{question}"
    assert load_template("r1_zero_compact") == "User: {question}\nAssistant: <think>"
    assert available_templates() == ["question_only", "r1_zero", "r1_zero_compact"]


def test_format_prompt_keeps_braces_in_the_question():
    question = r"What is $\frac{1}{2} + \{x\}$ when {x} = 0?"
    prompt = format_prompt(load_template("r1_zero_compact"), question)
    assert prompt == f"User: {question}\nAssistant: <think>"


def test_template_from_a_file_and_unknown_names(tmp_path):
    path = tmp_path / "mine.prompt"
    path.write_text("Q: {question}\nA:")
    assert load_template(path) == "Q: {question}\nA:"
    with pytest.raises(ValueError, match="r1_zero"):
        load_template("no_such_template")
    (tmp_path / "bad.prompt").write_text("no placeholder")
    with pytest.raises(ValueError, match="placeholder"):
        load_template(tmp_path / "bad.prompt")


def test_template_hash_is_short_and_sensitive():
    assert len(template_hash(R1_ZERO)) == 12
    assert template_hash(R1_ZERO) == template_hash(load_template("r1_zero"))
    assert template_hash(R1_ZERO) != template_hash(R1_ZERO + "\n")


# ---------------------------------------------------------------------- rewards


def test_reward_fn_lookup():
    assert get_reward_fn("r1_zero") is r1_zero_reward
    assert get_reward_fn("question_only") is question_only_reward
    with pytest.raises(ValueError, match="question_only"):
        get_reward_fn("cs336")


def test_r1_zero_scores():
    assert r1_zero_reward(" 2+2 is 4 </think> <answer>4</answer>", "4") == {
        "format_reward": 1.0,
        "answer_reward": 1.0,
        "reward": 1.0,
    }
    # Well formatted but wrong: format credit only.
    assert r1_zero_reward(" </think> <answer>5</answer>", "4") == {
        "format_reward": 1.0,
        "answer_reward": 0.0,
        "reward": 0.0,
    }
    # Broken format: nothing, even with the right answer.
    for broken in [" </think><answer>4</answer>", " </think> <answer>4", " 4 </think>", "<answer>4</answer>"]:
        assert r1_zero_reward(broken, "4") == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def test_r1_zero_answer_extraction():
    assert r1_zero_answer(" a </think> <answer> 7 </answer>") == (True, "7")
    # The last answer pair counts; a box inside it is unwrapped.
    assert r1_zero_answer(" </think> <answer>1</answer> <answer>2</answer>") == (True, "2")
    assert r1_zero_answer(r" </think> <answer>so \boxed{\frac{1}{2}}</answer>") == (True, r"\frac{1}{2}")
    # A `</answer>` only before the answer tag does not close it.
    assert r1_zero_answer(" </answer> </think> <answer>4") == (False, None)


def test_question_only_scores():
    assert question_only_reward(r"thus \boxed{4}", "4")["reward"] == 1.0
    assert question_only_reward("thus 4", "4") == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
    assert question_only_reward(r"thus \boxed{5}", "4") == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}


def test_last_boxed_with_nested_and_escaped_braces():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{\sqrt{3}}{2}}") == r"\frac{\sqrt{3}}{2}"
    assert last_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert last_boxed(r"\fbox{x^{2}}") == "x^{2}"
    assert last_boxed(r"\boxed 5") == "5"
    # A broken last box falls back to the last good one.
    assert last_boxed(r"\boxed{3} and \boxed{4") == "3"
    assert last_boxed("no box") is None
    assert last_boxed(r"\boxed{" * 20_000) is None  # linear, not quadratic


def test_grader_info_names_math_verify():
    info = grader_info()
    assert info["name"] == "math-verify"
    assert info["version"]


# ------------------------------------------------------------- hostile inputs


@pytest.mark.parametrize("answer", HOSTILE, ids=lambda a: a[:20])
def test_hostile_answers_are_wrong_and_quick(answer):
    for response, reward_fn in [
        (f" </think> <answer>{answer}</answer>", r1_zero_reward),
        (f"\\boxed{{{answer}}}", question_only_reward),
    ]:
        # The bound is in CPU time (on a busy machine the wall time is longer, and
        # must be: a wall-clock bound made verdicts depend on the load).
        started, cpu_started = time.monotonic(), time.process_time()
        assert reward_fn(response, "5")["answer_reward"] == 0.0
        assert time.process_time() - cpu_started < 5.0
        assert time.monotonic() - started < 60.0


def test_timeouts_are_counted():
    grading_stats(reset=True)
    assert r1_zero_reward(" </think> <answer>(10^{10})^{10^{10}} + 1</answer>", "5")["reward"] == 0.0
    stats = grading_stats()
    assert stats["calls"] == 1 and stats["timeouts"] == 1


# ------------------------------------------------------------- grader errors


def boom(pred: str, truth: str):
    """A comparison with a bug in it."""
    raise RuntimeError("a bug in the grader")


def die(pred: str, truth: str):
    """A comparison that takes its worker down (as running out of memory would)."""
    os._exit(3)


def test_a_grader_exception_scores_zero_and_is_counted():
    grading_stats(reset=True)
    with Grader(workers=0, check=boom) as grader:
        # The first pair needs parsing and reaches the broken check; the second does not.
        assert grader.grade_many([("x + 1", "1 + x"), ("4", "4")]) == [False, True]
        assert grader.errors == 1 and grader.timeouts == 0
    stats = grading_stats()
    assert stats["errors"] == 1 and stats["calls"] == 2


def test_a_failing_cheap_check_is_counted_too(monkeypatch):
    def broken_prepare(pred, truth):
        raise ValueError("a bug in normalization")

    monkeypatch.setattr(pool, "prepare", broken_prepare)
    grading_stats(reset=True)
    with Grader(workers=0) as grader:
        assert grader.grade_many([("4", "4"), ("5", "4")]) == [False, False]
        assert grader.errors == 2
    assert grading_stats()["errors"] == 2


def test_a_broken_math_verify_is_counted_not_taken_for_wrong_answers(monkeypatch):
    def broken_verify(*args, **kwargs):
        raise TypeError("math-verify and sympy disagree")

    monkeypatch.setattr(equivalence, "verify", broken_verify)
    equivalence.math_verify_equal.cache_clear()  # a cached verdict would hide the breakage
    grading_stats(reset=True)
    try:
        right = r1_zero_reward(r" </think> <answer>\sqrt{2}/2</answer>", r"\frac{\sqrt{2}}{2}")
        fast = r1_zero_reward(" </think> <answer>4</answer>", "4")
    finally:
        equivalence.math_verify_equal.cache_clear()
    assert right["reward"] == 0.0 and fast["reward"] == 1.0
    assert grading_stats()["errors"] == 1


def test_a_truth_that_is_not_math_is_counted():
    # An empty answer field (a misconfigured data set): nothing but an empty
    # prediction could equal it, and an empty prediction scores nothing.
    grading_stats(reset=True)
    assert r1_zero_reward(" </think> <answer>7</answer>", "")["reward"] == 0.0
    assert r1_zero_reward(" </think> <answer>7</answer>", r"\text{}")["reward"] == 0.0
    assert grading_stats()["errors"] == 2


@pytest.mark.slow
def test_errors_in_a_worker_are_counted_and_a_dead_worker_is_replaced():
    grading_stats(reset=True)
    with Grader(workers=1, timeout_s=30.0, check=boom) as grader:
        assert grader.grade("x + 1", "1 + x") is False
        assert grader.errors == 1 and grader.restarts == 0 and grader.timeouts == 0
    with Grader(workers=1, timeout_s=30.0, check=die) as grader:
        first_pid = grader._pool[0].process.pid
        assert grader.grade("x + 1", "1 + x") is False
        assert grader.errors == 1 and grader.restarts == 1 and grader.timeouts == 0
        assert grader._pool[0].process.pid != first_pid
    assert grading_stats()["errors"] == 2


# ---------------------------------------------------------------- worker pool


def hang(pred: str, truth: str):
    """A comparison that never finishes: stands in for C code that ignores signals."""
    time.sleep(600)


def _children() -> set[int]:
    # multiprocessing's resource tracker is one shared helper process that lives
    # as long as the interpreter; it is not a grading worker.
    return {
        child.pid
        for child in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(child.cmdline())
    }


@pytest.mark.slow
def test_pool_kills_and_replaces_a_hung_worker_and_leaves_nothing_behind():
    before = _children()
    grader = Grader(workers=1, timeout_s=0.5, check=hang)
    first_pid = grader._pool[0].process.pid
    started = time.monotonic()
    assert grader.grade("x + 1", "1 + x") is False  # needs parsing, so it reaches the worker
    assert time.monotonic() - started < 0.5 + 60  # bounded (start-up included)
    assert grader.timeouts == 1 and grader.restarts == 1
    second_pid = grader._pool[0].process.pid
    assert second_pid != first_pid and not psutil.pid_exists(first_pid)
    # Fast-path answers never reach the (hung) worker.
    assert grader.grade("4", "4") is True
    grader.close()
    assert not psutil.pid_exists(second_pid)
    assert _children() <= before


def wait_then_agree(pred: str, truth: str):
    """A comparison that takes wall time but no CPU time, as on a machine whose
    cores are all busy."""
    time.sleep(1.5)
    return True, False


def spin(pred: str, truth: str):
    """A comparison that computes forever and never looks at a signal."""
    while True:
        pass


def test_the_time_limits_count_cpu_time_not_waiting():
    with cpu_time_limit(0.2):
        time.sleep(0.5)  # no CPU time: no timeout
    started = time.process_time()
    with pytest.raises(TimeoutException):
        with cpu_time_limit(0.2):
            while True:
                pass
    # the profiling timer ticks at the kernel's rate, so it may fire a tick before 0.2 s of process_time
    assert 0.15 <= time.process_time() - started < 2.0
    assert equivalence.PARSE_CPU_S >= 2 and equivalence.VERIFY_CPU_S >= 2  # several times the slowest right answer


class OuterLimit(BaseException):
    pass


def test_a_callers_own_cpu_time_watchdog_survives_grading():
    # tests/test_bad_inputs.py guards its in-process runs with ITIMER_PROF: grading
    # inside such a run must neither disarm it nor take its signal.
    def outer(signum, frame):
        raise OuterLimit

    previous = signal.signal(signal.SIGPROF, outer)
    signal.setitimer(signal.ITIMER_PROF, 30.0)
    try:
        with cpu_time_limit(0.2):
            pass
        left, _ = signal.getitimer(signal.ITIMER_PROF)
        assert 25.0 < left <= 30.1 and signal.getsignal(signal.SIGPROF) is outer  # ticks round up
        signal.setitimer(signal.ITIMER_PROF, 0.1)  # now the outer limit comes first
        with pytest.raises(OuterLimit):
            with cpu_time_limit(5.0):
                while True:
                    pass
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_pool_does_not_kill_a_worker_for_waiting_but_does_for_computing():
    # Killed after 0.5 s of wall time (the old rule), this right answer would score 0.
    with Grader(workers=1, timeout_s=0.5, wall_timeout_s=30.0, check=wait_then_agree) as grader:
        assert grader.grade("x + 1", "1 + x") is True
        assert grader.timeouts == 0 and grader.restarts == 0
    # Only the CPU-time rule can stop this one in time: the wall-clock backstop is 1000 s.
    started = time.monotonic()
    with Grader(workers=1, timeout_s=0.5, wall_timeout_s=1000.0, check=spin) as grader:
        assert grader.grade("x + 1", "1 + x") is False
        assert grader.timeouts == 1 and grader.restarts == 1
    assert time.monotonic() - started < 120


@pytest.mark.slow
def test_pool_grades_real_answers_and_bounds_hostile_ones():
    # A generous bound, so that a busy machine does not fail the right answers;
    # the hostile pair is then stopped by math-verify's own timeout in the
    # worker (reported back and counted) or by the kill, whichever comes first.
    with Grader(workers=2, timeout_s=2.0) as grader:
        pairs = [
            ("x + 1", "1 + x"),
            ("(10^{10})^{10^{10}} + 2", "5"),
            (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}"),
            ("3", "4"),
        ]
        assert grader.grade_many(pairs) == [True, False, True, False]
        assert grader.timeouts == 1
        pids = [w.process.pid for w in grader._pool]
    assert not any(psutil.pid_exists(pid) for pid in pids)


@pytest.mark.slow
def test_rewards_work_off_the_main_thread():
    results = {}

    def work():
        results["right"] = r1_zero_reward(r" </think> <answer>\sqrt{2}/2</answer>", r"\frac{\sqrt{2}}{2}")["reward"]
        results["wrong"] = r1_zero_reward(r" </think> <answer>\sqrt{3}/2</answer>", r"\frac{\sqrt{2}}{2}")["reward"]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    close_default_grader()
    assert results == {"right": 1.0, "wrong": 0.0}


@pytest.mark.parametrize(
    "reward, response, writes",
    [
        ("r1_zero", " 10-2=8 </think> <answer>8</answer>", True),
        ("r1_zero", " </think> <answer>8</answer>", False),  # the bare formatted answer
        ("r1_zero", "  \n </think> <answer>8</answer>", False),
        ("r1_zero", " 10-2=8 <answer>8</answer>", False),  # not in the format: no working to speak of
        ("question_only", "Subtract: 10-2=8, so \\boxed{8}", True),
        ("question_only", "\\boxed{8}", False),
        ("question_only", "8", False),
    ],
)
def test_writes_working_is_anything_before_the_answer(reward, response, writes):
    assert WRITES_WORKING[reward](response) is writes
    assert set(WRITES_WORKING) == set(REWARD_FNS)  # one per answer format
