"""An eval broken down by what the data says of each problem: its level, its subject, and
any record field named in `eval.group_by`.

Pure: the per-problem figures (a problem's accuracy, or its pass@k and maj@k) and the
problems themselves go in; for each field the data has, its groups come out, each with
its problem count and its figures' means. A field no problem carries is left out, so a
synthetic eval has no breakdown and the lab's has its levels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grpoctl.data.examples import Example

BUILT_IN_FIELDS = ("level", "subject")  # broken down wherever the data has them
COUNT = "n"  # the key of a group's problem count


def group_fields(group_by: Sequence[str]) -> list[str]:
    """level, subject, then eval.group_by's own fields, each once."""
    return list(dict.fromkeys([*BUILT_IN_FIELDS, *group_by]))


def _order(value: str) -> tuple:
    """Numbers in numeric order (level 10 after level 9), then text."""
    return (0, int(value), "") if value.lstrip("-").isdigit() else (1, 0, value)


def breakdown(
    examples: Sequence[Example], per_problem: Sequence[Mapping[str, float]], group_by: Sequence[str] = ()
) -> dict[str, dict[str, dict[str, float]]]:
    """{field: {value: {"n": problems, figure: mean, ...}}} over the fields the problems carry.

    A problem without a value for a field (MATH's "Level ?") is left out of that field's groups.
    """
    if len(examples) != len(per_problem):
        raise ValueError(f"{len(examples)} problems but {len(per_problem)} rows of figures")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in group_fields(group_by):
        sums: dict[str, dict[str, float]] = {}
        for example, figures in zip(examples, per_problem, strict=True):
            value = example.group_value(name)
            if value is None:
                continue
            group = sums.setdefault(value, {COUNT: 0})
            group[COUNT] += 1
            for key, number in figures.items():
                group[key] = group.get(key, 0.0) + number
        if sums:
            out[name] = {
                value: {key: (total if key == COUNT else total / group[COUNT]) for key, total in group.items()}
                for value, group in sorted(sums.items(), key=lambda item: _order(item[0]))
            }
    return out
