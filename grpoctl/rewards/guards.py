"""Cheap screens that turn away hostile answers before they reach a parser.

A policy being trained will sooner or later emit 100 KB of `{`, a tower of powers
or a huge factorial. Each of those makes math-verify spin until its timeout (one
second each, the smallest `signal.alarm` allows) or, worse, sit inside C code that
no signal can interrupt. None of them is ever the right answer to a MATH, GSM8K or
arithmetic problem, so they are rejected here in microseconds and count as wrong.

The screens only look at the prediction and only reject what a reasonable truth
could not equal; anything they let through is still bounded by the timeouts in
`equivalence.py` (and by the worker pool's kill in `pool.py`).
"""

from __future__ import annotations

import math
import re

# MATH500's longest answer is 53 characters; a 1,000-character answer is noise.
MAX_ANSWER_CHARS = 1000
# Deeper nesting than this is not a simplified answer, and deep nesting is what
# drives the LaTeX parser's recursion.
MAX_BRACE_DEPTH = 12
# Above this many digits a number is pointless to build (Python refuses to even
# print an int past 4,300 digits).
MAX_RESULT_DIGITS = 100_000

# `a^b`, `a^{b^{c^{d}}}`: a chain of integer powers, read as a tower.
_POWER_CHAIN = re.compile(r"\d+(?:\s*\^\s*\{?\s*\d+)+")
# `n!` with an integer n, and the factorial of a group: `(10^{100})!`.
_FACTORIAL = re.compile(r"(\d+)\s*!")
_GROUP_FACTORIAL = re.compile(r"[)}]\s*!")
_HUGE_FACTORIAL = 10_000  # 10,000! has 35,660 digits: still quick
# `\binom{10^{9}}{10^{8}}`: the first argument of a binomial coefficient.
_BINOMIAL = re.compile(r"\\[dt]?binom\s*\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_HUGE_BINOMIAL = 10_000
# Literals longer than this are judged by their length alone, without converting
# them (converting a huge literal is itself the slow part).
_MAX_LITERAL_DIGITS = 12


def _brace_depth_and_balance(text: str) -> tuple[int, bool]:
    depth = deepest = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # `\{` is a literal brace, not a group
            continue
        if char == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == "}":
            depth -= 1
            if depth < 0:
                return deepest, False
        i += 1
    return deepest, depth == 0


def _tower_too_big(numbers: list[str]) -> bool:
    """Whether the tower numbers[0]^numbers[1]^... has more than MAX_RESULT_DIGITS
    digits. Evaluated from the top down while the numbers stay small."""
    if any(len(n) > _MAX_LITERAL_DIGITS for n in numbers):
        return True
    value = int(numbers[-1])
    for base in (int(n) for n in reversed(numbers[:-1])):
        if base <= 1:
            value = base if value else 1
            continue
        if value > 10**6 or value * math.log10(base) > MAX_RESULT_DIGITS:
            return True
        value = base**value  # at most MAX_RESULT_DIGITS digits: milliseconds
    return False


def hostile_reason(answer: str) -> str | None:
    """Why this predicted answer should not be parsed, or None if it may be."""
    if len(answer) > MAX_ANSWER_CHARS:
        return f"longer than {MAX_ANSWER_CHARS} characters"
    deepest, balanced = _brace_depth_and_balance(answer)
    if not balanced:
        return "unbalanced braces"
    if deepest > MAX_BRACE_DEPTH:
        return f"braces nested deeper than {MAX_BRACE_DEPTH}"
    for match in _POWER_CHAIN.finditer(answer):
        if _tower_too_big(re.findall(r"\d+", match.group(0))):
            return "power too large"
    for match in _FACTORIAL.finditer(answer):
        literal = match.group(1)
        if len(literal) > _MAX_LITERAL_DIGITS or int(literal) > _HUGE_FACTORIAL:
            return "factorial too large"
    for match in _BINOMIAL.finditer(answer):
        top = match.group(1).strip()
        if not top.isdigit() and "^" in top or top.isdigit() and (len(top) > 12 or int(top) > _HUGE_BINOMIAL):
            return "binomial too large"
    if _GROUP_FACTORIAL.search(answer) and "^" in answer:
        # `(10^{100})!`: the factorial of a power is never a simplified answer.
        return "factorial of a power"
    return None
