"""Finding the answer in a model's response.

Two response formats, one per prompt template:

- r1_zero: `... </think> <answer>ANSWER</answer>`; the answer is the text of the
  last `<answer>...</answer>` pair (a `\\boxed{}` inside it is unwrapped).
- question_only: free text; the answer is the content of the last `\\boxed{...}`
  (or `\\fbox{...}`).

Responses are untrusted model output (they can be 100 KB of `{`), so everything
here is a single linear pass: no regex backtracking, no rescanning per brace.
"""

from __future__ import annotations

import re

THINK_ANSWER = "</think> <answer>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def matching_braces(text: str) -> dict[int, int]:
    """For every unescaped `{` in text that gets closed, the index of its `}`.

    One pass with a stack. A backslash escapes the next character, so the set
    braces `\\{` and `\\}` are not grouping braces.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def last_boxed(text: str) -> str | None:
    """The content of the last well-formed `\\boxed{...}`/`\\fbox{...}`, stripped.

    Nested braces are kept whole (`\\boxed{\\frac{1}{2}}` gives `\\frac{1}{2}`); a box
    whose braces never close is skipped in favour of an earlier good one. The
    old-style `\\boxed 5` (a single token after a space) is accepted too. None if
    there is no usable box.
    """
    starts = [m.end() for m in _BOX.finditer(text)]
    if not starts:
        return None
    pairs = matching_braces(text)
    for start in reversed(starts):
        # Allow spaces between the command and its argument: `\boxed {3}`.
        open_at = start
        while open_at < len(text) and text[open_at] == " ":
            open_at += 1
        if open_at < len(text) and text[open_at] == "{":
            close_at = pairs.get(open_at)
            if close_at is not None:
                return text[open_at + 1 : close_at].strip()
        elif open_at > start:
            # `\boxed 5`: the argument runs to the next space or `$`.
            token = re.match(r"[^\s$]+", text[open_at:])
            if token:
                return token.group(0)
    return None


def has_box(text: str) -> bool:
    """Whether text mentions a box command at all (well-formed or not)."""
    return _BOX.search(text) is not None


def r1_zero_working(response: str) -> bool:
    """Whether an r1_zero response writes anything before its `</think> <answer>`: working,
    not only the formatted answer. A response not in the format has none."""
    at = response.find(THINK_ANSWER)
    return at > 0 and bool(response[:at].strip())


def question_only_working(response: str) -> bool:
    """Whether a question_only response writes anything before its last box (the answer)."""
    starts = [m.start() for m in _BOX.finditer(response)]
    return bool(starts) and bool(response[: starts[-1]].strip())


def r1_zero_answer(response: str) -> tuple[bool, str | None]:
    """(formatted, answer) for an r1_zero response.

    Formatted means `</think> <answer>` appears with a `</answer>` after it. The
    space matters: it is what the template teaches, and the seed's reward (CS336's)
    checks for exactly this string. The answer is the text of the last
    `<answer>...</answer>` pair; a box inside it is unwrapped, and a broken box
    leaves no answer. The answer is None when the response is not formatted.
    """
    opened = response.find(THINK_ANSWER)
    if opened < 0:
        return False, None
    close_at = response.rfind(ANSWER_CLOSE)
    if close_at < opened:
        return False, None
    open_at = response.rfind(ANSWER_OPEN, 0, close_at)
    answer = response[open_at + len(ANSWER_OPEN) : close_at].strip()
    if has_box(answer):
        return True, last_boxed(answer)
    return True, answer
