"""The type gate bites: a typo'd config key in an engine function fails it.

`.ci/run` runs mypy over the engine's math, the rules and the config, with every
definition typed ([tool.mypy] in pyproject.toml). Here a copy of an engine function
(config.derived_sizes) is checked under that configuration twice: as it is, it
passes; reading `cfg.loop.train_bach_size` instead, it fails, naming the key.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpoctl import config

ROOT = Path(__file__).resolve().parents[1]


def mypy_command() -> list[str]:
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    found = shutil.which("mypy")
    if found is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    return [found]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One mypy cache for the module's checks: the second and third reuse the first's analysis."""
    return tmp_path_factory.mktemp("mypy-cache")


def check(tmp_path: Path, cache: Path, source: str) -> subprocess.CompletedProcess:
    """mypy, configured as the gate, on one module holding `source`."""
    module = tmp_path / "engine_copy.py"
    module.write_text(source)
    return subprocess.run(
        [
            *mypy_command(),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--python-executable",
            sys.executable,
            "--cache-dir",
            str(cache),
            str(module),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def engine_copy(typo: bool) -> str:
    body = inspect.getsource(config.derived_sizes)
    if typo:
        assert "loop.train_batch_size" in body
        body = body.replace("loop.train_batch_size", "loop.train_bach_size", 1)
    return (
        "from grpoctl.config import Config, DerivedSizes, RunConfig\nfrom grpoctl.rules import is_off_policy, updates_per_grpo_step\n\n\n"
        + body
    )


def test_the_gate_passes_the_engine_function_as_it_is(tmp_path, cache):
    out = check(tmp_path, cache, engine_copy(typo=False))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_gate_fails_a_typo_in_a_config_key(tmp_path, cache):
    out = check(tmp_path, cache, engine_copy(typo=True))
    assert out.returncode == 1, out.stdout + out.stderr
    # derived_sizes takes a RunConfig (Config | DictConfig): mypy names the typed member
    assert re.search(r'"LoopConfig"( of "LoopConfig \| Any")? has no attribute "train_bach_size"', out.stdout), (
        out.stdout
    )


def test_the_gate_fails_an_untyped_definition(tmp_path, cache):
    out = check(tmp_path, cache, "def steps(cfg):\n    return cfg.loop.n_grpo_steps\n")
    assert out.returncode == 1 and "no-untyped-def" in out.stdout, out.stdout
