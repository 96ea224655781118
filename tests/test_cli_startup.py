"""The CLI starts fast: what `--help`, `--version`, `runs list` and `compare` import.

Each command runs in a fresh interpreter (sys.modules is process-wide, so an
in-process check would see whatever earlier tests imported) and reports which heavy
packages it loaded. None of them may load torch, transformers, matplotlib, ray, vllm
or alembic; only `compare --baseline` may load scipy (its tests need scipy.stats);
`--help` and `--version` do not even load the registry (SQLAlchemy, SQLModel).
benchmarks/bench_cli.py measures the seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpoctl.cli import COMMANDS
from grpoctl.cli.lazy import load_command
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.registry import Registry
from grpoctl.run_identity import config_hash

ROOT = Path(__file__).resolve().parents[1]
NEVER = ("torch", "transformers", "matplotlib", "ray", "vllm", "alembic", "starlette", "uvicorn")
REGISTRY = ("sqlalchemy", "sqlmodel")
PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['grpoctl', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('grpoctl', run_name='__main__')\n"
    "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
    "loaded = sorted({m.split('.')[0] for m in sys.modules} & set(%r))\n"
    "print('LOADED ' + ' '.join(loaded), file=sys.stderr)\n"
)


def loaded_by(*args: str) -> set[str]:
    """The top-level packages of interest that `grpoctl ARGS` imported, in a fresh process."""
    watched = (*NEVER, "scipy", *REGISTRY)
    out = subprocess.run(
        [sys.executable, "-c", PROBE % (watched,), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stderr.splitlines() if x.startswith("LOADED"))
    return set(line.split()[1:])


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """Two variants of two seeds each, with evals; the spec names no baseline."""
    path = tmp_path_factory.mktemp("startup") / "registry.db"
    with Registry(str(path)) as registry:
        sweep = registry.get_or_create_sweep("study", "ablation", {"file": "study.yaml"})
        for variant, lr, finals in (("base", "1e-4", (0.60, 0.64)), ("hot", "3e-4", (0.70, 0.72))):
            for seed, final in enumerate(finals):
                cfg = load_config(None, [f"seed={seed}", f"optimizer.lr={lr}", "loop.n_grpo_steps=20"])
                run = registry.create_run(
                    name=f"{variant}-s{seed}",
                    config=to_dict(cfg),
                    config_diff=config_diff(cfg),
                    config_hash=config_hash(cfg),
                    seed=seed,
                    total_steps=20,
                    group="study",
                    variant=variant,
                )
                for step, accuracy in ((0, 0.3), (10, final - 0.05), (20, final)):
                    registry.log_step(run.id, step, {"train/reward": accuracy})
                    registry.add_eval(
                        run_id=run.id,
                        step=step,
                        n=512,
                        accuracy=accuracy,
                        format_rate=1.0,
                        mean_response_length=10.0,
                        data_hash="d",
                        subset_hash="s",
                        template_hash="t",
                        decoding=json.dumps({"greedy": True}),
                        grader="exact",
                    )
                registry.set_status(run.id, "finished")
                registry.add_sweep_member(sweep.id, run.config_hash, variant, seed)
    return path


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_no_registry_and_nothing_heavy(args):
    assert loaded_by(*args) == set()


def test_runs_list_and_compare_import_nothing_heavy(study):
    db = ["--db", str(study)]
    assert loaded_by("runs", "list", *db) == set(REGISTRY)
    assert loaded_by("compare", "study", *db) == set(REGISTRY)
    # Testing each variant against the baseline is what needs scipy.stats.
    assert loaded_by("compare", "study", "--baseline", "base", *db) == {*REGISTRY, "scipy"}


def test_help_lists_every_command_with_its_own_one_line_help():
    """The lines --help shows without importing a command are each command's own first
    paragraph, and every command the modules register is listed."""
    for name, (module, line) in COMMANDS.items():
        command = load_command(name, module)
        own = " ".join((command.help or "").split("\n\n")[0].split())
        assert line == own, f"{name}: COMMANDS says {line!r}, the command says {own!r}"
    from grpoctl.cli import app

    out = subprocess.run(
        [sys.executable, "-m", "grpoctl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr
    listed = [row.split()[1] for row in out.stdout.splitlines() if row.startswith("│ ") and len(row.split()) > 2]
    assert [n for n in listed if n in COMMANDS] == list(COMMANDS)
    assert app.registered_commands == [] and app.registered_groups == []  # all of them lazy


def test_the_registry_skips_pydantic_s_plugin_scan_and_leaves_plugins_on_for_others():
    probe = (
        "import os; os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)\n"
        "import grpoctl.registry\n"
        "from pydantic.plugin import _loader\n"
        "assert _loader._plugins is None, 'the registry scanned for plugins'\n"
        "assert 'PYDANTIC_DISABLE_PLUGINS' not in os.environ, 'the setting leaked'\n"
        "import pydantic\n"
        "class Later(pydantic.BaseModel):\n"
        "    x: int = 0\n"
        "assert _loader._plugins is not None, 'a later model found no plugins'\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
