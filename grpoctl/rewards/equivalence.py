"""Are a predicted answer and the ground truth the same mathematical object?

Two stages:

1. `quick_verdict`: normalize both strings (normalize.py), then decide whatever
   can be decided without parsing: identical strings, equal plain numbers,
   different integers, empty or hostile predictions (guards.py). This settles
   nearly all GSM8K and arithmetic answers and most right MATH answers.
2. `math_verify_equal`: Hugging Face's math-verify (LaTeX -> sympy, then a
   battery of comparisons: numeric, symbolic, sets, intervals, matrices).

math-verify bounds its own work with `signal.alarm`, which exists only in a
process's main thread and counts whole seconds. So `math_verify_equal` must run
in a main thread: the caller's (the trainer grades in its main thread) or a
worker process's (pool.py). We pass the smallest timeouts it accepts, one
second to parse the prediction and one to compare, so a hostile answer that
got past the guards costs at most about two seconds.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import threading
from typing import NamedTuple

from math_verify import LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

from grpoctl.rewards import guards
from grpoctl.rewards.normalize import (
    has_equation,
    is_number_literal,
    normalize_answer,
    number_base,
    number_before_words,
    plain_number,
)

PARSE_TIMEOUT_S = 1
VERIFY_TIMEOUT_S = 1
# Bump when a normalization or guard rule changes what counts as right: it is
# recorded with every evaluation, next to math-verify's version.
NORMALIZATION_VERSION = "grpoctl-1"

# Answers are wrapped in \boxed{} before parsing: the box is math-verify's
# highest-priority anchor, its content is taken with balanced braces, and it
# tolerates newlines and `$` that a `$...$` wrapper would not.
_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0),)


class Verdict(NamedTuple):
    equal: bool
    timed_out: bool = False


class Prepared(NamedTuple):
    """Both answers normalized, and the verdict if it needed no parsing."""

    pred: str
    truth: str
    verdict: bool | None
    how: str  # "fast", "rejected" or "parse"


def prepare(pred: str, truth: str) -> Prepared:
    """Normalize and try to decide without math-verify. Never raises."""
    if len(pred) > guards.MAX_ANSWER_CHARS:
        return Prepared("", "", False, "rejected")
    truth_norm = normalize_answer(truth)
    # `x = 3` answers "find x" when the truth is just `3`.
    pred_norm = normalize_answer(pred, keep_equation=has_equation(truth_norm))
    if not pred_norm:
        return Prepared(pred_norm, truth_norm, False, "fast")
    if pred_norm == truth_norm:
        return Prepared(pred_norm, truth_norm, True, "fast")
    truth_value = plain_number(truth_norm)
    if truth_value is not None:
        # `18 dollars` answers "how many dollars" when the truth is `18`.
        pred_norm = number_before_words(pred_norm) or pred_norm
    pred_value = plain_number(pred_norm)
    if pred_value is not None and truth_value is not None:
        if pred_value == truth_value:
            return Prepared(pred_norm, truth_norm, True, "fast")
        if is_number_literal(pred_norm) and is_number_literal(truth_norm):
            # Exact values that differ. (math-verify would round to 6 decimals
            # and call 0.0000672 and 0.0000673 equal.)
            return Prepared(pred_norm, truth_norm, False, "fast")
        # A decimal against a fraction (0.333333 vs 1/3) goes to math-verify,
        # which accepts a close enough rounding.
    truth_base, pred_base = number_base(truth_norm), number_base(pred_norm)
    if truth_base is not None and pred_base is not None:
        # math-verify drops subscripts, which would make 52_8 equal 52_9.
        return Prepared(pred_norm, truth_norm, truth_base == pred_base, "fast")
    if guards.hostile_reason(pred_norm) is not None:
        return Prepared(pred_norm, truth_norm, False, "rejected")
    return Prepared(pred_norm, truth_norm, None, "parse")


def _parse(text: str) -> list:
    """math-verify's parse with our timeout; TimeoutException propagates."""
    try:
        return parse(
            "\\boxed{" + text + "}",
            extraction_config=_EXTRACTION,
            parsing_timeout=PARSE_TIMEOUT_S,
            raise_on_error=True,
        )
    except Exception:
        return []  # unparseable counts as wrong; TimeoutException is a BaseException


@functools.lru_cache(maxsize=4096)
def _parse_truth(truth: str) -> list:
    # Every rollout of a group shares its truth: parse it once.
    return _parse(truth)


@functools.lru_cache(maxsize=65536)
def math_verify_equal(pred: str, truth: str) -> Verdict:
    """math-verify's verdict on two normalized answers. Main thread only.

    Cached: the rollouts of a group often agree on the same wrong or right answer.
    """
    if threading.current_thread() is not threading.main_thread():
        # Off the main thread math-verify cannot time itself out, and its
        # failure would look like (and be cached as) a wrong answer.
        raise RuntimeError("math_verify_equal must run in a main thread; use rewards.Grader off it")
    try:
        gold = _parse_truth(truth)
        target = _parse(pred)
        # verify() over the lists would stop at the first pair that raises, and
        # with raise_on_error=False it would hide timeouts from us; so one pair
        # at a time. The lists are [sympy object, string] at most.
        for g, t in itertools.product(gold, target):
            try:
                if verify(g, t, timeout_seconds=VERIFY_TIMEOUT_S, raise_on_error=True):
                    return Verdict(True)
            except Exception:
                continue  # this pair is not comparable; try the next
        return Verdict(False)
    except TimeoutException:
        return Verdict(False, timed_out=True)


def grader_info() -> dict:
    """What graded an evaluation; stored with every result, because the seed's
    numbers came from a different grader (CS336's) and graders disagree on edge
    cases."""

    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "name": "math-verify",
        "version": version("math-verify"),
        "latex2sympy2_extended": version("latex2sympy2_extended"),
        "sympy": version("sympy"),
        "normalization": NORMALIZATION_VERSION,
        "parse_timeout_s": PARSE_TIMEOUT_S,
        "verify_timeout_s": VERIFY_TIMEOUT_S,
        "max_answer_chars": guards.MAX_ANSWER_CHARS,
    }
