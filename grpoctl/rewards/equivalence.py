"""Are a predicted answer and the ground truth the same mathematical object?

Two stages:

1. `prepare`: normalize both strings (normalize.py), turn away hostile
   predictions (guards.py), read an equation for the sides that must equal the
   truth (equations.py), then decide whatever can be decided without parsing:
   identical strings, empty answers, plain numbers (exactly, or by the decimal
   rule of decimals.py). This settles nearly all GSM8K and arithmetic
   answers and most right MATH answers.
2. `math_verify_equal`: Hugging Face's math-verify (LaTeX -> sympy, then a
   battery of comparisons: numeric, symbolic, sets, intervals, matrices).

math-verify would bound its own work with `signal.alarm`, wall-clock time, which
made a verdict depend on the machine's load (a right 3x3 matrix that needs 0.9 s
of sympy scored 0 in 2 of 6 runs on a busy machine). Its timeouts are switched
off and the work is bounded in CPU time instead (cputime.py): PARSE_CPU_S to
parse the prediction, VERIFY_CPU_S for all its comparisons with the truth. Both
are over five times what the slowest right answers we measured need (MATH500's
answers and near misses, tests/test_grading.py's labelled set: at most 0.38 s to
parse, 0.29 s to compare), so that the verdict is the same on a quiet and a
loaded machine; a hostile answer that got past the guards costs at most
PARSE_CPU_S + VERIFY_CPU_S of CPU time. The signal that enforces them is
delivered to a main thread, so `math_verify_equal` must run in one: the caller's
(the trainer grades in its main thread) or a worker process's (pool.py).

`A \\neq B` answers `C \\neq D` exactly when `A = B` answers `C = D` (each
relation is the negation of the other, so they hold for the same values): the
two are compared as equations. math-verify cannot compare two `\\neq` relations
itself (it raises); any other comparison involving one that raises is wrong,
not a grading error.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import logging
import re
import threading
from fractions import Fraction
from typing import NamedTuple

import sympy
from math_verify import LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

from grpoctl.rewards import decimals, equations, guards
from grpoctl.rewards.cputime import cpu_time_limit
from grpoctl.rewards.normalize import (
    is_number_literal,
    normalize_answer,
    number_base,
    number_before_words,
    plain_number,
)

# CPU seconds (not wall-clock seconds: see the module doc).
PARSE_CPU_S = 2.0
VERIFY_CPU_S = 2.0
# math-verify's own numeric rule, for the decimals inside a tuple, interval, set
# or matrix: both sides rounded to this many decimal places, then compared. (Its
# default; passed explicitly so that what we record is what ran.) A decimal on
# its own follows decimals.py instead.
FLOAT_ROUNDING = 6
# Bump when a normalization or guard rule changes what counts as right: it is
# recorded with every evaluation, next to math-verify's version.
NORMALIZATION_VERSION = "grpoctl-4"

# Answers are wrapped in \boxed{} before parsing: the box is math-verify's
# highest-priority anchor, its content is taken with balanced braces, and it
# tolerates newlines and `$` that a `$...$` wrapper would not.
_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0),)
# `\neq` and `\ne`, not `\newline`.
_UNEQUAL = re.compile(r"\\ne(?:q)?(?![A-Za-z])")

# Its timeouts are ours (cpu_time_limit); with them off it warns once that the
# caller must bound the time, which we do.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(lambda record: "Timeout is disabled" not in record.getMessage())

# Digits to which a symbolic truth (pi, sqrt 2) is evaluated for the decimal
# rule: far beyond decimals.MAX_DECIMAL_PLACES.
_VALUE_DIGITS = 50


class Verdict(NamedTuple):
    equal: bool
    timed_out: bool = False
    # The comparison raised, or the truth could not be parsed: the answer counts
    # as wrong and the error is counted, so that a broken grader does not pass
    # for a policy that gets everything wrong.
    error: bool = False


class Prepared(NamedTuple):
    """What the cheap checks decided, and what is left for math-verify."""

    verdict: bool | None  # None: decided by whether every pending pair is equal
    how: str  # "fast", "rejected" or "parse"
    pending: tuple[tuple[str, str], ...] = ()  # normalized (prediction part, truth part)


def prepare(pred: str, truth: str) -> Prepared:
    """Normalize, read equations, and decide what needs no parsing.

    An answer written as an equation can give several values that must each
    equal the truth (`\\frac{1058}{2}=529`); the answer is right only if all are.
    """
    if len(pred) > guards.MAX_ANSWER_CHARS:
        return Prepared(False, "rejected")
    truth_norm = normalize_answer(truth)
    pred_norm = normalize_answer(pred)
    if not pred_norm:
        return Prepared(False, "fast")
    if pred_norm == truth_norm:
        return Prepared(True, "fast")
    if guards.hostile_reason(pred_norm) is not None:
        # Before anything else reads it; its parts are substrings, so need no screening.
        return Prepared(False, "rejected")
    pred_norm, truth_norm = _unequal_as_equal(pred_norm, truth_norm)
    pairs = equations.pairs_to_compare(pred_norm, truth_norm)
    if pairs is None:
        return Prepared(False, "fast")
    if pairs != [(pred_norm, truth_norm)]:
        pairs = [(normalize_answer(part), normalize_answer(target)) for part, target in pairs]
    pending = []
    for part, target in pairs:
        verdict, how, part = _quick_verdict(part, target)
        if verdict is False:
            return Prepared(False, how)
        if verdict is None:
            pending.append((part, target))
    if not pending:
        return Prepared(True, "fast")
    return Prepared(None, "parse", tuple(pending))


def _unequal_as_equal(pred: str, truth: str) -> tuple[str, str]:
    """`5 \\neq x` and `x \\neq 5` -> `5=x` and `x=5` (see the module doc); any other
    pair unchanged."""
    pred_sides = equations.split_top_level(pred, _UNEQUAL)
    truth_sides = equations.split_top_level(truth, _UNEQUAL)
    if len(pred_sides) != 2 or len(truth_sides) != 2 or not all(pred_sides + truth_sides):
        return pred, truth
    if equations.EQUALS.search(pred) or equations.EQUALS.search(truth):
        return pred, truth  # `x = y \\neq 5`: not one relation
    return "=".join(pred_sides), "=".join(truth_sides)


def _quick_verdict(pred: str, truth: str) -> tuple[bool | None, str, str]:
    """(verdict or None, how, the prediction as it should be parsed) for one
    normalized value against one normalized truth."""
    if not pred:
        return False, "fast", pred
    if pred == truth:
        return True, "fast", pred
    truth_value = plain_number(truth)
    if truth_value is not None:
        # `18 dollars` answers "how many dollars" when the truth is `18`.
        pred = number_before_words(pred) or pred
    pred_value = plain_number(pred)
    if pred_value is not None and truth_value is not None:
        return _numbers_verdict(pred, pred_value, truth, truth_value), "fast", pred
    truth_base, pred_base = number_base(truth), number_base(pred)
    if truth_base is not None and pred_base is not None:
        # math-verify drops subscripts, which would make 52_8 equal 52_9.
        return truth_base == pred_base, "fast", pred
    return None, "parse", pred


def _numbers_verdict(pred: str, pred_value: Fraction, truth: str, truth_value: Fraction) -> bool:
    """Two plain numbers, compared exactly (math-verify would round to 6 decimals
    and call 0.0000672 and 0.0000673 equal); except that a decimal may stand for
    a fraction written as one (`0.333333` for `\\frac{1}{3}`): decimals.py says when."""
    if pred_value == truth_value:
        return True
    return decimals.is_decimal(pred) and not is_number_literal(truth) and decimals.stands_for(pred, truth_value)


def _parse(text: str) -> tuple[list, bool]:
    """(math-verify's parse with our timeout, whether it raised). Text that is not
    math parses, without raising, to [] or to just the text; TimeoutException
    propagates."""
    try:
        with cpu_time_limit(PARSE_CPU_S):
            return parse(
                "\\boxed{" + text + "}",
                extraction_config=_EXTRACTION,
                parsing_timeout=None,
                raise_on_error=True,
            ), False
    except Exception:
        return [], True  # TimeoutException is a BaseException, so it is not caught here


@functools.lru_cache(maxsize=4096)
def _parse_truth(truth: str) -> tuple[list, bool]:
    # Every rollout of a group shares its truth: parse it once.
    return _parse(truth)


def _decimal_verdict(pred: str, truth: str, gold: list) -> bool | None:
    """decimals.py's rule for a plain decimal against a truth that is a real
    number (`\\frac{1}{3}`, `\\pi`, `\\frac{\\sqrt{2}}{2}`); None for any other truth."""
    truth_value = plain_number(truth)
    if truth_value is not None:
        return _numbers_verdict(pred, plain_number(pred), truth, truth_value)
    for expr in gold:
        if isinstance(expr, sympy.Expr) and expr.is_number:
            value = expr.evalf(_VALUE_DIGITS)
            return decimals.stands_for(pred, Fraction(str(value))) if value.is_Float else None
    return None


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
        gold, _ = _parse_truth(truth)
        if all(isinstance(g, str) for g in gold):
            # A truth math-verify cannot turn into math (it hands back the text,
            # or nothing): only an identical string, settled before this, could
            # have scored. That is a grading failure, not a wrong answer.
            return Verdict(False, error=True)
        if decimals.is_decimal(pred):
            verdict = _decimal_verdict(pred, truth, gold)
            if verdict is not None:
                return Verdict(verdict)
        target, raised = _parse(pred)
        unequal = _UNEQUAL.search(pred) is not None or _UNEQUAL.search(truth) is not None
        # verify() over the lists would stop at the first pair that raises, and
        # with raise_on_error=False it would hide timeouts from us; so one pair
        # at a time, all within one CPU-time limit. The lists are [sympy object,
        # string] at most.
        with cpu_time_limit(VERIFY_CPU_S):
            for g, t in itertools.product(gold, target):
                try:
                    if verify(g, t, float_rounding=FLOAT_ROUNDING, timeout_seconds=None, raise_on_error=True):
                        return Verdict(True)
                except Exception:
                    # This pair could not be compared; try the next. A `\\neq` that
                    # math-verify cannot compare is wrong by our rule, not an error.
                    raised = raised or not unequal
        return Verdict(False, error=raised)
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
        "float_rounding": FLOAT_ROUNDING,
        "decimal_significant_digits": decimals.MIN_SIGNIFICANT_DIGITS,
        "parse_cpu_s": PARSE_CPU_S,
        "verify_cpu_s": VERIFY_CPU_S,
        "max_answer_chars": guards.MAX_ANSWER_CHARS,
    }
