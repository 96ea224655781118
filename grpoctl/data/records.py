"""Turning one parsed record (a dict from a jsonl line or a hub row) into an Example.

Shared by the file loaders and the hub loader so both apply the same rules:
- the answer is `record[answer_key]`, except
  - `answer_key == "solution"`: the answer is the last `\\boxed{}` of the solution
    (the full MATH release has no separate answer);
  - GSM8K style (`####` marker): the answer is what follows the marker and the
    text before it is the worked solution;
  - no answer at all but a `solution`: fall back to its last `\\boxed{}`.
- the id is `unique_id` (MATH) or `id` when present, else the caller's default.
"""

from __future__ import annotations

import re
from typing import Any

from grpoctl.data.answers import GSM8K_MARKER, split_gsm8k
from grpoctl.data.examples import DataError, Example
from grpoctl.rewards.extract import last_boxed

SOLUTION_KEY = "solution"
ID_KEYS = ("unique_id", "id")

# How the answer field is written: "auto" picks boxed for a solution field and
# gsm8k when the marker is present; "gsm8k" insists on the marker.
ANSWER_FORMATS = ("auto", "plain", "boxed", "gsm8k")


def _text(record: dict, key: str, where: str) -> str | None:
    """record[key] as text; None when absent, null or blank. Numbers are accepted
    (some datasets store integer answers) and written as Python writes them."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: key '{key}' must be text, got {type(value).__name__}")
    text = str(value).strip()
    return text or None


def _answer_and_solution(record: dict, where: str, answer_key: str, answer_format: str) -> tuple[str, str | None]:
    solution = _text(record, SOLUTION_KEY, where)
    raw = _text(record, answer_key, where)

    if answer_format == "auto":
        if answer_key == SOLUTION_KEY:
            answer_format = "boxed"
        elif raw is not None and GSM8K_MARKER in raw:
            answer_format = "gsm8k"
        else:
            answer_format = "plain"

    if raw is None:
        # MATH without an answer field: the answer is boxed in the solution.
        boxed = last_boxed(solution) if solution else None
        if boxed:
            return boxed, solution
        hint = f" (and no \\boxed{{}} in '{SOLUTION_KEY}')" if answer_key != SOLUTION_KEY else ""
        raise DataError(f"{where}: missing key '{answer_key}'{hint}")

    if answer_format == "boxed":
        boxed = last_boxed(raw)
        if not boxed:
            raise DataError(f"{where}: no \\boxed{{...}} answer in '{answer_key}'")
        return boxed, raw

    if answer_format == "gsm8k":
        parts = split_gsm8k(raw)
        if parts is None or not parts[1]:
            raise DataError(f"{where}: no '{GSM8K_MARKER} <answer>' line in '{answer_key}'")
        worked, final = parts
        return final, worked or solution

    return raw, solution


def example_from_record(
    record: Any,
    where: str,
    *,
    question_key: str,
    answer_key: str,
    default_id: str,
    answer_format: str = "auto",
) -> Example:
    """One Example from one record; `where` (e.g. `x.jsonl:3`) prefixes any error."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}")
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = _text(record, question_key, where)
    if question is None:
        raise DataError(f"{where}: missing key '{question_key}'")
    answer, solution = _answer_and_solution(record, where, answer_key, answer_format)
    example_id = next(
        (str(record[key]) for key in ID_KEYS if record.get(key) not in (None, "")),
        default_id,
    )
    return Example(
        id=example_id,
        question=question,
        answer=answer,
        solution=solution,
        level=parse_level(record.get("level")),
        subject=_label(record.get("subject", record.get("type"))),
        fields=_short_fields(record, (question_key, answer_key, SOLUTION_KEY)),
    )


LEVEL_TEXT = re.compile(r"^\s*(?:level\s*)?(\d{1,3})\s*$", re.IGNORECASE)
FIELD_CHARS = 100  # longer values (a rationale, a passage) are no group anyone breaks down by


def parse_level(value: Any) -> int | None:
    """A difficulty level: MATH500 writes 3, the MATH release "Level 3" (and "Level ?"
    for a few problems, which has none)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = LEVEL_TEXT.match(value) if isinstance(value, str) else None
    return int(match.group(1)) if match else None


def _label(value: Any) -> str | None:
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return text[:FIELD_CHARS] or None


def _short_fields(record: dict, skip: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The record's short scalar fields as text (for eval.group_by), but its question,
    answer and solution."""
    out = []
    for key, value in record.items():
        if key in skip or isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        text = str(value).strip()
        if text and len(text) <= FIELD_CHARS:
            out.append((str(key), text))
    return tuple(out)
