"""docs/configuration.md's table of config keys is the one generated from the config tree.

Each key's default and help live once, in grpoctl/config_schema/; the page's table
is scripts/config_table.py's rendering of them. Like `cog --check`, this fails when
someone edits one without the other: run `python scripts/config_table.py --write`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from grpoctl.config import load_config, to_dict
from grpoctl.config_schema import documented_keys
from grpoctl.run_identity import flatten

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_pages_table_is_the_generated_one():
    script = _script()
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert script.render(page) == page, "docs/configuration.md's table drifted: run scripts/config_table.py --write"


def test_the_table_has_every_key_with_its_default_and_help():
    defaults = flatten(to_dict(load_config(None, [])))
    documented = {key: default for key, default, _ in documented_keys()}
    assert documented == defaults  # every key, with the default the loader uses
    assert all(help.strip() for _, _, help in documented_keys())
    table = _script().table()
    for key in ("data.train_split", "data.eval_split", "loss.length_normalization"):
        assert f"| `{key}` |" in table


def test_the_check_fails_on_drift(tmp_path):
    """Changing a help text without regenerating makes the rendered page differ."""
    script = _script()
    page = (ROOT / "docs" / "configuration.md").read_text()
    field = next(
        f for f in dataclasses.fields(script.documented_keys.__globals__["LoopConfig"]) if f.name == "n_grpo_steps"
    )
    original = field.metadata
    try:
        field.metadata = {**original, "help": "a different help text"}  # type: ignore[misc]
        assert script.render(page) != page
    finally:
        field.metadata = original  # type: ignore[misc]
