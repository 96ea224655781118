"""Cheap string normalization of answers, before any math parsing.

The point is twofold: most right answers are then byte-identical to the truth (or
the same plain number), so grading is a string compare instead of a parse; and
the surface variants that a parser would trip on (`$...$`, `\\text{ cm}`,
`1,450,000`) are gone before math-verify sees the answer.

Every rule here is meant to be safe in both directions: it never turns a wrong
answer into a right one (tests/test_grading.py generates wrong answers around
right ones for each rule to show it). Anything subtler is math-verify's job.

Commas between digits are decided here, once: a number with thousands separators
(`1,450,000`: a first group of 1-3 digits not starting with 0, then groups of
three, nothing after any comma; `{,}` reads as `,`, and so does `,\\!` whatever
spaces follow it, the thin-space separator of MATH's own solutions: `32,\\! 349`)
that stands alone, as the whole answer, a whole side of an equation or before
unit words, loses its commas. So does one with a currency sign before or after it
and nothing else (`$1,000.99`, `1,000.99$`). Every other comma between digits is a
list comma and is written `, ` (`2, 500`, `0,111` and `(12,102)` are lists),
because math-verify would read a whole `32,349` or `0,111` as a number.
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpoctl.rewards.extract import last_boxed

# Wrappers that only say "this is math".
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))

# LaTeX's control space `\\ ` (also a backslash before a line break, or one left
# at the very end after the answer was stripped) and the tie `~` are spaces. A pair
# of backslashes (a matrix's row break) is one token and stays.
_SPACING = re.compile(r"\\[^A-Za-z]|\\$|~", re.DOTALL)
# A single upright letter is a letter, never a unit: `\mathrm{e}` is e, `\mathrm{i}` is i.
_UPRIGHT_LETTER = re.compile(r"\\(?:mathrm|text|textrm|mbox)\s*\{\s*([A-Za-z])\s*\}")
# `\sqrt[3]2` is `\sqrt[3]{2}`: without braces the radicand is one token.
_ROOT_TOKEN = re.compile(r"(\\sqrt\s*\[[^\[\]{}]*\])\s*(\\[A-Za-z]+|[^\s{}\\])")
# `$28$ percent`, `\(18\) dollars`: the math is delimited and unit words follow.
_DELIMITED_THEN_WORDS = re.compile(r"^(?:\$([^$]+)\$|\\\((.+?)\\\))\s*([A-Za-z]{2,}(?:\s+[A-Za-z]+)*)$")

# Plain substitutions: spelling variants and spacing commands with no meaning.
_REPLACEMENTS = (
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\displaystyle", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\:", ""),
    ("\\%", ""),
    ("%", ""),
    ("\\$", ""),
    ("{,}", ","),  # LaTeX's thousands separator, 1{,}000: read as a comma (see the module doc)
    ("\u2212", "-"),  # unicode minus
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\circ", ""),
    ("\\degree", ""),
)

# `\left(` and `\right]` size the brackets; `\leftarrow` is another command.
_SIZING = re.compile(r"\\(?:left|right)(?![A-Za-z])")
# `3\text{ cm}`, `15\mbox{ cm}^2`, `5 \text{dollars}`: a unit (a word of two letters or
# more) after a value.
_TRAILING_UNIT = re.compile(r"^(.*?\S)\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z]{2}[A-Za-z ]*\}(?:\^(?:\d|\{\d\}))?$")
# `\text{Evelyn}`, `\textbf{(C)}`: the whole answer is text.
_WHOLE_TEXT = re.compile(r"^\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}$")
# `(C)`: a multiple-choice letter in parentheses.
_CHOICE_LETTER = re.compile(r"^\(([A-Z])\)$")
# `1,450,000` or `-3,000.25`: a number with thousands separators.
_THOUSANDS = re.compile(r"-?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
# `$1,000.99` and `1,000.99$`: such a number with a currency sign and nothing else (a
# lone `$`: a balanced pair is a math delimiter, stripped before).
_CURRENCY = (re.compile(rf"\$\s*({_THOUSANDS.pattern})"), re.compile(rf"({_THOUSANDS.pattern})\s*\$"))
# `32,\! 349`: MATH's thin-space thousands separator, then a space; the space is the
# separator's, not a list's (`32, 349` stays a list).
_THIN_SPACE_SEPARATOR = re.compile(r"(?<=\d),\\!\s+(?=\d)")
# Digits with commas between them (`1,450,000`, `2, 500`, `(1,2)`), maybe signed, maybe
# with a decimal part; the boundaries keep it from starting inside a name or a number.
_DIGIT_COMMAS = re.compile(r"(?<![\w.])-?\d+(?:,[ \t\n]*\d+)+(?:\.\d+)?(?![\w.])")
_COMMA = re.compile(r",[ \t\n]*")
# Where a number stands alone: after the start or a sign that reads as `=`, and
# before the end, such a sign, or words (`1,450 dollars`).
_EQUALS_SIGNS = ("=", "\\equiv", "\\approx")
_ALONE_AFTER = re.compile(r"\s*(?:$|=|\\equiv|\\approx)|\s+[A-Za-z]")
# Stands for the space of a list comma while other spaces are squeezed out.
_LIST_SPACE = "\ue000"

# `18 dollars`, `5 apples per box`: a number followed only by words.
_NUMBER_THEN_WORDS = re.compile(r"^(-?\d+(?:\.\d+)?)\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*$")

# `2516_8`, `4210_{5}`, `A3_{16}`: a numeral in another base.
_BASE_NUMERAL = re.compile(r"^([0-9A-Za-z]+)_(\d{1,2}|\{\d{1,2}\})$")

_INTEGER = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
# Integer fractions: `\frac{1}{2}`, `-\frac{3}{4}`, `\frac12`, `3/4`.
_FRACTIONS = (
    re.compile(r"^(?P<sign>[+-]?)\\frac\{(?P<top>[+-]?\d+)\}\{(?P<bottom>\d+)\}$"),
    re.compile(r"^(?P<sign>[+-]?)\\frac(?P<top>\d)(?P<bottom>\d)$"),
    re.compile(r"^(?P<sign>)(?P<top>[+-]?\d+)/(?P<bottom>\d+)$"),
)


def _strip_delimiters(text: str) -> str:
    changed = True
    while changed:
        changed = False
        for left, right in _MATH_DELIMITERS:
            if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left) : len(text) - len(right)].strip()
                changed = True
    return text


def _spacing(match: re.Match) -> str:
    token = match.group()
    return " " if token == "~" or token[1:].isspace() or token == "\\" else token


def _digit_commas(match: re.Match) -> str:
    """A thousands number standing alone loses its commas; any other comma between
    digits is a list comma (see the module doc)."""
    text, number, start = match.string, match.group(), match.start()
    while start > 0 and text[start - 1].isspace():
        start -= 1
    alone_before = start == 0 or text.endswith(_EQUALS_SIGNS, 0, start)
    if alone_before and _ALONE_AFTER.match(text, match.end()) and _THOUSANDS.fullmatch(number):
        return number.replace(",", "")
    return _COMMA.sub("," + _LIST_SPACE, number)


def _squeeze_spaces(text: str) -> str:
    """Drop whitespace except between two word characters, where it separates
    tokens (`\\pi r` is not `\\pir`, `2 3` is not `23`)."""
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"(?<!\w) | (?!\w)", "", text)


def normalize_answer(text: str) -> str:
    """A canonical spelling of an answer string. An equation stays an equation:
    which of its sides is the answer is equations.py's question."""
    text = _THIN_SPACE_SEPARATOR.sub(",", text)
    text = _SPACING.sub(_spacing, text).strip()
    text = _strip_delimiters(text)
    for currency in _CURRENCY:
        priced = currency.fullmatch(text)
        if priced:
            text = priced.group(1)
    delimited = _DELIMITED_THEN_WORDS.match(text)
    if delimited:
        text = f"{(delimited.group(1) or delimited.group(2)).strip()} {delimited.group(3)}"
    if text.startswith(("\\boxed", "\\fbox")):
        boxed = last_boxed(text)
        if boxed is not None:
            text = _strip_delimiters(boxed)
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    text = _SIZING.sub("", text).strip()
    text = _UPRIGHT_LETTER.sub(r"\1", text)
    text = _ROOT_TOKEN.sub(r"\1{\2}", text)
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()  # the full stop of a sentence, not an ellipsis
    unit = _TRAILING_UNIT.match(text)
    if unit:
        text = unit.group(1)
    whole = _WHOLE_TEXT.match(text)
    if whole:
        text = whole.group(1).strip()
    text = _DIGIT_COMMAS.sub(_digit_commas, text)
    text = _squeeze_spaces(text).replace(_LIST_SPACE, " ")
    choice = _CHOICE_LETTER.match(text)
    if choice:
        text = choice.group(1)
    return text


def plain_number(text: str) -> Fraction | None:
    """The exact value of a normalized answer that is just a number: an integer, a
    decimal, or an integer fraction (`\\frac{1}{2}`, `-3/4`). None otherwise."""
    if len(text) > 100:
        return None  # a 10,000-digit "number" is not worth converting
    try:
        if _INTEGER.match(text) or _DECIMAL.match(text):
            return Fraction(text)
        for pattern in _FRACTIONS:
            fraction = pattern.match(text)
            if fraction and int(fraction["bottom"]) != 0:
                value = Fraction(int(fraction["top"]), int(fraction["bottom"]))
                return -value if fraction["sign"] == "-" else value
    except ValueError:
        pass  # digits Python reads but Fraction does not (other scripts' numerals)
    return None


def is_number_literal(text: str) -> bool:
    """An integer or a terminating decimal as written (`-12`, `0.0000672`), whose
    value is exact, unlike a rounded stand-in for `\\frac{1}{3}`."""
    return _INTEGER.match(text) is not None or _DECIMAL.match(text) is not None


def number_base(text: str) -> tuple[str, int] | None:
    """(digits, base) for a numeral with a base subscript, `2516_8` or `4210_{5}`."""
    match = _BASE_NUMERAL.match(text)
    return (match.group(1).upper(), int(match.group(2).strip("{}"))) if match else None


def number_before_words(text: str) -> str | None:
    """`18 dollars` -> `18`. Only for when the truth is a plain number: then words
    after the number can only be units (`2 x` stays, one letter may be a variable)."""
    match = _NUMBER_THEN_WORDS.match(text)
    return None if match is None else match.group(1)  # thousands separators are gone already
