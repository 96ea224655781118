"""How numbers, config values and statuses are written in tables, labels and messages.

One formatter per kind of value, so `runs`, `compare`, `report`, `sweep` and the
trainer's progress line write the same figure the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# What writes a run's messages: print, typer.echo, or a sweep member's line writer.
Say = Callable[..., Any]

# The colour of each run status in rich tables.
STATUS_STYLES = {
    "running": "cyan",
    "finished": "green",
    "failed": "red",
    "diverged": "magenta",
    "interrupted": "yellow",
    "stale": "yellow",
}

MiB, GiB = 2**20, 2**30


def format_number(value: float | None, digits: int = 3) -> str:
    """A figure in a table: `digits` decimals from 0.001 up to a million (so a column of
    accuracies lines up), `digits` significant digits with an exponent beyond (learning
    rates, byte counts); "-" for none, and nan or inf as such."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value != 0 and not 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def format_config_value(value: Any, none: str = "-") -> str:
    """A config value as a person writes it: 3e-5 (not 3e-05 or 0.00003), 0.2, true, grpo_clip.

    `none` is how null reads: "-" in a table, "null" in a sweep's labels and run names.
    """
    if value is None:
        return none
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != 0 and abs(value) < 0.01:
            mantissa, exponent = f"{value:.6e}".split("e")
            return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return f"{value:g}"
    return str(value)


def format_bytes(n: float) -> str:
    """A memory size: 2 decimals in GiB from 1 GiB, else 1 decimal in MiB."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"


def format_count(n: int) -> str:
    """A parameter count: 1.54B, 0.432M."""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinity inside it (dicts, lists, tuples) replaced by None:
    JSON has neither, and strict parsers reject them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
