"""The one record type every data source produces, and the one error they raise."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    """One math problem with its verifiable answer.

    `id` is stable across runs (MATH `unique_id`, else `<file stem>:<line>`, or the
    synthetic question such as `add:47+38`), because the registry identifies eval
    subsets and stored completions by it.
    `solution` is a worked solution, used for warm-start SFT; None when unknown.
    `level` is the problem's difficulty where the source grades it (the lab task: 1-5;
    MATH500's `level: 3` and the MATH release's `level: "Level 3"` both give 3), and
    `subject` its subject (MATH500's `subject`, the MATH release's `type`). `fields` are
    the record's other short scalar fields as text, for `eval.group_by` breakdowns.
    """

    id: str
    question: str
    answer: str
    solution: str | None = None
    level: int | None = None
    subject: str | None = None
    # Not part of what makes two problems the same: the record's extra keys are along for breakdowns.
    fields: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def group_value(self, name: str) -> str | None:
        """The value this problem is broken down by for `name` (level, subject or a record field)."""
        if name == "level":
            return None if self.level is None else str(self.level)
        if name == "subject":
            return self.subject
        return dict(self.fields).get(name)


class DataError(ValueError):
    """Bad input data. The message is one line that names the file (and line), like
    a compiler error, e.g. `math500.jsonl:17: missing key 'problem'`, so the CLI
    can print it as is."""
