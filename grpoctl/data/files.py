"""Loading problems from local jsonl files (one JSON object per line).

Errors name the file and line so a user can open the file right there; blank
lines are skipped (editors and `cat a b >` leave them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, NoReturn

from grpoctl.data.examples import DataError, Example
from grpoctl.data.records import example_from_record

# One problem is a few KB (MATH's longest line is under 10 KB): a line past this is not a
# problem but a broken or hostile file, and parsing it could take all the memory there is.
MAX_LINE_BYTES = 4 * 1024 * 1024


@contextmanager
def _open(path: str | Path) -> Iterator[BinaryIO]:
    """The file opened for reading, with the usual OS errors turned into one-line DataErrors."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a .jsonl file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None
    with handle:
        yield handle


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def read_jsonl(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line; line numbers are 1-based.

    The file is read a line at a time, and no line may hold more than MAX_LINE_BYTES.
    Python's json accepts NaN and Infinity, which are not JSON (and no answer): refused.
    """
    found = False
    with _open(path) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise DataError(
                    f"{path}:{number}: line longer than {MAX_LINE_BYTES // 2**20} MB, the most one problem may take"
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{path}:{number}: not valid UTF-8") from None
            if number == 1:
                line = line.removeprefix("\ufeff")  # a BOM some Windows tools write
            if not line.strip():
                continue
            try:
                value = json.loads(line, parse_constant=_no_constants)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
            except ValueError as exc:
                raise DataError(f"{path}:{number}: invalid JSON ({exc})") from None
            except RecursionError:
                raise DataError(f"{path}:{number}: invalid JSON (nested too deeply to parse)") from None
            except MemoryError:
                raise DataError(f"{path}:{number}: invalid JSON (too large to parse in the memory there is)") from None
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
            raise DataError(f"{path}:{number}: duplicate id '{example.id}' (first on line {first_line[example.id]})")
        first_line[example.id] = number
        examples.append(example)
    return examples


def load_math_jsonl(path: str | Path, question_key: str = "problem", answer_key: str = "answer") -> list[Example]:
    """MATH-style jsonl (`problem`, `solution`, optional `answer`, `unique_id`).
    A record without `answer` takes the last `\\boxed{}` of its `solution`."""
    return load_jsonl(path, question_key, answer_key)


def load_gsm8k_jsonl(path: str | Path) -> list[Example]:
    """GSM8K jsonl (`question`, `answer` ending in `#### 42`): the answer is the
    number after `####` (thousands commas removed), the text before it the solution."""
    return load_jsonl(path, "question", "answer", answer_format="gsm8k")
