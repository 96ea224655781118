"""Reading a study spec file (experiments/*.yaml): what `sweep` plans from and the findings are declared in.

Its own module because two readers need it, the sweep planner (sweep/spec.py) and the
declared findings (analysis/findings.py), and the planner also checks the findings.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from grpoctl.errors import UserError


def read_spec(path: Path) -> dict:
    """The mapping in a study spec or results-page file, or one line saying what is wrong with it."""
    if not path.is_file():
        raise UserError(f"no ablation spec at {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: invalid yaml ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping with 'base' and 'variants'")
    return data
