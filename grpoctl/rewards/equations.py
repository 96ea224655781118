"""How an answer written as an equation is read, so that `528=529` cannot pass for 529.

An answer `A = B = ...` is cut at its top-level `=` (not the one in
`\\sum_{k=1}^{n}`) into sides. A side is a *label* when it names what was asked
(`x`, `AB`, `f(2)`, `a_1`, `x+y`, `\\angle ABC`): it has a letter and no digit
outside subscripts, superscripts and a function's arguments, and no constant
(`\\pi`, `\\infty`). Every other side is a *value*.

Against a truth with no `=` (`529`):

- labels at either end are dropped and every value that is left must equal the
  truth: `x=529`, `529=x`, `a=b=529` and `\\frac{1058}{2}=529` are right;
  `528=529` and `x=528=529` are wrong (528 is a value, and it is not 529);
- an unsolved equation is wrong: `2x=1058` has the values `2x` and `1058`;
- when every side is a label, the last one is the value (`x = p - q`).

Against a truth that assigns a value to a name (`x=529`): the same, except that
every label the answer gives must be the truth's name (`y = 529` is wrong, `529`
is right). A truth assigns a value only when its left side is a single name
(`x`, `AB`, `a_1`, `x_{10}`, `\\theta`, `f(2)`: letters, optionally subscripted,
or a function applied to arguments) and its right side has no letter; `x^2+y^2=25`
and `a^2+b=0` are relations, so `25` and `0` do not answer them. Against any other
equation (`y = 2x + 3`): math-verify compares the two relations (`y-2x=3` is
right, and so is `y^2+x^2=25` for `x^2+y^2=25`), and a chain `A = B = C` is wrong.

`\\equiv` and `\\approx` read as `=` (`528 \\equiv 529` is wrong; after `\\approx`
a decimal must still pass decimals.py). A list of assignments (`x=-2, x=1`,
`x=1 \\text{ or } x=2`, `(x=1, y=2)`) reads as the list of their values; any
other `=` inside brackets (`(528=529)`, `(1, 528=529)`) makes the answer wrong,
since math-verify would read it as its right-hand side. Inequalities have no `=`
and are left to math-verify, which compares them as relations (`3<x` is `x>3`,
and an interval may answer one).
"""

from __future__ import annotations

import bisect
import re

# `=`, except in `<=`, `>=`, `!=` and `\=`; and the signs that read like it.
EQUALS = re.compile(r"(?<![<>!\\])=|\\(?:equiv|approx)(?![A-Za-z])")
# Between the items of a list: `-2, 1`, `x=1 \text{ or } x=2`, `x=1 and x=2`.
_ITEM_SEPARATOR = re.compile(r",|\\text\{\s*(?:or|and)\s*\}|\s(?:or|and)\s")
# Longer chains than `a = b = c = 5` are not answers; each value side may cost a parse.
MAX_SIDES = 4

_OPENERS = "([{"
_BRACKET = re.compile(r"\\[{}]|[(\[{)\]}]")
_CONSTANT = re.compile(r"\\(?:pi|infty)(?![A-Za-z])")
# Subscripts and superscripts (`a_1`, `x_{10}`, `x^2`), innermost braces first.
_SCRIPT = re.compile(r"[_^](?:\{[^{}]*\}|\\[A-Za-z]+|.)")
_SCRIPT_GROUP = re.compile(r"[_^]\{[^{}]*\}")
# A function's arguments: `f(2)`, `P(1, 3)`, innermost first.
_ARGUMENTS = re.compile(r"(?<=[A-Za-z])\([^()]*\)")
_COMMAND = re.compile(r"\\([A-Za-z]+)")
# A truth's unknown: letters or one Greek letter, an optional subscript, optional arguments.
_NAME = re.compile(r"(?:[A-Za-z]+|\\([A-Za-z]+))(?:_(?:\{[^{}]*\}|[A-Za-z0-9]))?(?:\([^()]*\))?")
_GREEK = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi "
    "rho varrho sigma varsigma tau upsilon phi varphi chi psi omega "
    "Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega".split()
)


def _brackets(text: str) -> tuple[list[int], list[int]]:
    """(where each bracket starts, how many are open just after it).

    `(`, `[`, `{` and the set braces `\\{` open; any closer closes, so a
    half-open interval `[2, 5)` counts as one group. Only the brackets are
    visited: answers can be a thousand characters of anything.
    """
    starts, depths, depth = [], [], 0
    for match in _BRACKET.finditer(text):
        depth = depth + 1 if match.group()[-1] in _OPENERS else max(depth - 1, 0)
        starts.append(match.start())
        depths.append(depth)
    return starts, depths


def _depth_at(brackets: tuple[list[int], list[int]], index: int) -> int:
    """How many brackets are open at text[index] (which is not a bracket)."""
    starts, depths = brackets
    before = bisect.bisect_left(starts, index)
    return depths[before - 1] if before else 0


def split_top_level(text: str, at: re.Pattern) -> list[str]:
    """text cut at the matches of `at` that lie outside all brackets, stripped."""
    brackets = _brackets(text)
    pieces, start = [], 0
    for match in at.finditer(text):
        if _depth_at(brackets, match.start()) == 0:
            pieces.append(text[start : match.start()].strip())
            start = match.end()
    pieces.append(text[start:].strip())
    return pieces


def _nested_equation(text: str) -> bool:
    """Whether an `=` sits inside brackets, as in `(528=529)`; the one in a
    subscript such as `\\sum_{k=1}` does not count."""
    if EQUALS.search(text) is None:
        return False
    previous = None
    while previous != text:
        previous, text = text, _SCRIPT_GROUP.sub("", text)
    brackets = _brackets(text)
    return any(_depth_at(brackets, match.start()) > 0 for match in EQUALS.finditer(text))


def _one_group(text: str) -> tuple[str, str, str] | None:
    """(opener, content, closer) when text is a single bracket group, `(x=1, y=2)`."""
    opener = "\\{" if text.startswith("\\{") else text[:1]
    closer = "\\}" if text.endswith("\\}") else text[-1:]
    if opener not in ("(", "[", "\\{") or closer not in (")", "]", "\\}") or len(text) < len(opener) + len(closer):
        return None
    # The first bracket is the only one that closes at depth 0, and it closes
    # at the end: `(1)+(2)` is not one group.
    starts, depths = _brackets(text)
    if not starts or starts[0] != 0 or depths[:-1].count(0) or starts[-1] != len(text) - len(closer):
        return None
    return opener, text[len(opener) : len(text) - len(closer)], closer


def _without_scripts_and_arguments(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = _ARGUMENTS.sub("", _SCRIPT.sub("", text))
    return text


def _has_letter(text: str) -> bool:
    """A Latin letter outside command names, or a Greek letter other than pi."""
    names = _COMMAND.sub(lambda m: " v " if m.group(1) in _GREEK else " ", text)
    return re.search(r"[A-Za-z]", names) is not None


def is_label(side: str) -> bool:
    """Whether one side of an equation names a quantity rather than giving a value."""
    if not side or _CONSTANT.search(side):
        return False
    bare = _without_scripts_and_arguments(side)
    return not re.search(r"\d", bare) and _has_letter(bare)


def is_name(side: str) -> bool:
    """Whether a truth's left side is a single name (`x`, `a_1`, `f(2)`), so that the
    truth `side = value` gives the value of what was asked."""
    name = _NAME.fullmatch(re.sub(r"\s+", "", side))
    return name is not None and (name.group(1) is None or name.group(1) in _GREEK)


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _values(sides: list[str], name: str | None) -> list[str] | None:
    """The value sides of one equation, or None if its labels disqualify it."""
    start, end = 0, len(sides)
    while start < end and is_label(sides[start]):
        start += 1
    while end > start and is_label(sides[end - 1]):
        end -= 1
    labels = sides[:start] + sides[end:]
    if name is not None and any(_squeeze(label) != name for label in labels):
        return None
    if start == end:
        # Nothing but labels: `x = p - q` gives `p - q`; against a named truth
        # (`x = x`) there is no value at all.
        return None if name is not None else [sides[-1]]
    return sides[start:end]


def _list_of_assignments(items: list[str], name: str | None, join: str = ";") -> str | None:
    """`x=-2, x=1` -> `-2;1`; None if an item is not `label = value`.

    Joined with `;`, which math-verify reads as a list like `,`, because `1,450`
    would read as one thousand four hundred and fifty: `x=1, y=450` is a list.
    Inside brackets, `(x=1, y=450)` -> `(1,450)`, `,` is kept.
    """
    values = []
    for item in items:
        sides = split_top_level(item, EQUALS)
        if len(sides) == 1:
            values.append(item)
            continue
        read = _values(sides, name)
        if read is None or len(read) != 1 or len(sides) != 2:
            return None
        values.append(read[0])
    return join.join(values)


def pairs_to_compare(pred: str, truth: str) -> list[tuple[str, str]] | None:
    """What must equal what for pred to answer truth (both normalized strings).

    Returns (prediction part, truth part) pairs that must all be equal, or None
    when the way pred is written already makes it wrong (see the module doc).
    """
    if EQUALS.search(pred) is None and EQUALS.search(truth) is None:
        return [(pred, truth)]  # most answers
    truth_sides = split_top_level(truth, EQUALS)
    pred_sides = split_top_level(pred, EQUALS)
    if any(not side for side in truth_sides):
        return [(pred, truth)]  # a truth that is not a readable equation: math-verify decides
    name = None
    if len(truth_sides) == 2 and is_name(truth_sides[0]) and not _has_letter(truth_sides[1]):
        name, truth = _squeeze(truth_sides[0]), truth_sides[1]  # `x = 529`
    elif len(truth_sides) > 1:
        # A relation (`y = 2x + 3`): math-verify compares relations; chains are wrong.
        items = split_top_level(pred, _ITEM_SEPARATOR)
        return None if any(len(split_top_level(item, EQUALS)) > 2 for item in items) else _checked([(pred, truth)])
    if len(pred_sides) == 1:
        group = _one_group(pred)
        if group is not None and len(split_top_level(group[1], EQUALS)) > 1:
            opener, content, closer = group
            joined = _list_of_assignments(split_top_level(content, _ITEM_SEPARATOR), name, join=",")
            return None if joined is None else _checked([(opener + joined + closer, truth)])
        return _checked([(pred, truth)])
    if any(not side for side in pred_sides):
        return None
    if len(pred_sides) > 2:
        items = split_top_level(pred, _ITEM_SEPARATOR)
        if len(items) > 1 and all(len(split_top_level(item, EQUALS)) <= 2 for item in items):
            joined = _list_of_assignments(items, name)
            return None if joined is None else _checked([(joined, truth)])
    if len(pred_sides) > MAX_SIDES:
        return None
    values = _values(pred_sides, name)
    return None if values is None else _checked([(value, truth) for value in values])


def _checked(pairs: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """None if a value still holds an equation inside brackets (`(1, 528=529)`):
    math-verify would read it as its right-hand side."""
    return None if any(_nested_equation(part) for part, _ in pairs) else pairs
