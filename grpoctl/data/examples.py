"""The one record type every data source produces, and the one error they raise."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """One math problem with its verifiable answer.

    `id` is stable across runs (MATH `unique_id`, else `<file stem>:<line>`, or the
    synthetic question such as `add:47+38`), because the registry identifies eval
    subsets and stored completions by it.
    `solution` is a worked solution, used for warm-start SFT; None when unknown.
    `level` is the problem's difficulty where the source grades it (the lab task: 1-5).
    """

    id: str
    question: str
    answer: str
    solution: str | None = None
    level: int | None = None


class DataError(ValueError):
    """Bad input data. The message is one line that names the file (and line), like
    a compiler error, e.g. `math500.jsonl:17: missing key 'problem'`, so the CLI
    can print it as is."""
