"""A built-in loss or advantage estimator by name, from its table: the names are declared
once (config_keys.py, read through rules.py) and the functions registered here in grpo/,
so a name declared without its function is an error, never another built-in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def builtin(table: Mapping[str, T], declared: Sequence[str], name: str, what: str, names: tuple[str, str]) -> T:
    """table[name]; ValueError for a name not in `declared` (listing them) or declared but
    missing from the table. `what` names the key ("loss_type"); `names` the two tables'
    names as the message gives them (("LOSS_TYPES", "LOSS_FUNCTIONS"))."""
    if name not in declared:
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(declared)}")
    if name not in table:
        raise ValueError(f"{what} {name!r} is in {names[0]} but {names[1]} has no function for it")
    return table[name]
