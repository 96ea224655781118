"""Loading problems from local jsonl files (one JSON object per line).

Errors name the file and line so a user can open the file right there; blank
lines are skipped (editors and `cat a b >` leave them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from grpoctl.data.examples import DataError, Example
from grpoctl.data.records import example_from_record


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, with the usual OS errors turned into one-line DataErrors."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a .jsonl file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line; line numbers are 1-based."""
    data = read_bytes(path)
    found = False
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{path}:{number}: not valid UTF-8") from None
        if number == 1:
            line = line.removeprefix("\ufeff")  # a BOM some Windows tools write
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
        found = True
        yield number, value
    if not found:
        raise DataError(f"{path}: empty file")


def load_jsonl(
    path: str | Path,
    question_key: str,
    answer_key: str,
    *,
    answer_format: str = "auto",
) -> list[Example]:
    """Examples from any jsonl with a question and an answer field.

    With `answer_key="solution"` the answer is the solution's last `\\boxed{}`;
    an answer containing `####` is read GSM8K style (see records.py).
    Ids are the record's `unique_id`/`id`, else `<file stem>:<line>`.
    """
    stem = Path(path).stem
    examples: list[Example] = []
    first_line: dict[str, int] = {}
    for number, record in read_jsonl(path):
        example = example_from_record(
            record,
            f"{path}:{number}",
            question_key=question_key,
            answer_key=answer_key,
            default_id=f"{stem}:{number}",
            answer_format=answer_format,
        )
        # Ids key eval subsets and stored completions; a duplicate would make
        # them ambiguous, so refuse it here where the line can still be named.
        if example.id in first_line:
            raise DataError(
                f"{path}:{number}: duplicate id '{example.id}' "
                f"(first on line {first_line[example.id]})"
            )
        first_line[example.id] = number
        examples.append(example)
    return examples


def load_math_jsonl(
    path: str | Path, question_key: str = "problem", answer_key: str = "answer"
) -> list[Example]:
    """MATH-style jsonl (`problem`, `solution`, optional `answer`, `unique_id`).
    A record without `answer` takes the last `\\boxed{}` of its `solution`."""
    return load_jsonl(path, question_key, answer_key)


def load_gsm8k_jsonl(path: str | Path) -> list[Example]:
    """GSM8K jsonl (`question`, `answer` ending in `#### 42`): the answer is the
    number after `####` (thousands commas removed), the text before it the solution."""
    return load_jsonl(path, "question", "answer", answer_format="gsm8k")
