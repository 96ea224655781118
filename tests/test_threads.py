"""The thread rule: fixed by config, core count and $GRPOCTL_THREADS, never by load or identity."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from grpoctl.config import load_config
from grpoctl.registry import Registry
from grpoctl.rules import config_hash
from grpoctl.sweep import launcher, spec
from grpoctl.threads import THREADS_ENV, per_child_cap, resolve_threads


@pytest.fixture(autouse=True)
def no_cap(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)


def test_tiny_models_get_one_thread_large_ones_every_core(tmp_path):
    assert resolve_threads(load_config(None, []), cores=8)[0] == 1
    assert resolve_threads(load_config(None, ["model.path=tiny@100"]), cores=8)[0] == 1
    qwen = load_config(None, ["model.path=Qwen/Qwen2.5-Math-1.5B"])  # known config, nothing downloaded
    assert resolve_threads(qwen, cores=8) == (8, "auto: one per core (8)")
    unknown = load_config(None, [f"model.path={tmp_path / 'nowhere'}"])
    assert resolve_threads(unknown, cores=3)[0] == 3


def test_explicit_threads_win_and_the_cap_bounds_auto(monkeypatch):
    assert resolve_threads(load_config(None, ["runtime.threads=3"]), cores=8) == (3, "runtime.threads")
    qwen = load_config(None, ["model.path=Qwen/Qwen2.5-Math-1.5B"])
    monkeypatch.setenv(THREADS_ENV, "2")
    count, why = resolve_threads(qwen, cores=8)
    assert count == 2 and THREADS_ENV in why
    assert resolve_threads(load_config(None, ["runtime.threads=3"]), cores=8)[0] == 3  # explicit beats the cap


def test_per_child_cap_shares_the_cores():
    assert [per_child_cap(k, cores=4) for k in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]


def test_thread_count_is_not_part_of_the_config():
    cfg = load_config(None, [])
    before = config_hash(cfg)
    resolve_threads(cfg)
    assert config_hash(cfg) == before and cfg.runtime.threads == 0


def test_configure_sets_passive_waiting_before_torch_starts():
    code = (
        "import os, sys; from grpoctl.config import load_config; from grpoctl.threads import configure_threads; "
        "assert 'torch' not in sys.modules; n, _ = configure_threads(load_config(None, [])); import torch; "
        "print(os.environ['OMP_WAIT_POLICY'], n, torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", THREADS_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PASSIVE", "1", "1"]


ENV_DUMP = r"""
import os, sys
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.rules import config_hash
from grpoctl.registry import Registry
args = sys.argv[1:]
db = args[args.index("--db") + 1]
path = args[0] if "=" not in args[0] and not args[0].startswith("--") else None  # a sweep's run config file
cfg = load_config(path, [a for a in args if "=" in a and not a.startswith("--")])
registry = Registry(db)
run = registry.create_run(name=cfg.name, config=to_dict(cfg), config_diff=config_diff(cfg), config_hash=config_hash(cfg),
                          seed=cfg.seed, total_steps=0, group=cfg.group, variant=cfg.variant)
with open(os.environ["ENV_OUT"], "a") as out:
    out.write(f"{os.environ.get('GRPOCTL_THREADS')} {os.environ.get('OMP_WAIT_POLICY')}\n")
registry.set_status(run.id, "finished")
"""


@pytest.mark.parametrize("parallel,cap", [(1, "None"), (2, str(per_child_cap(2)))])
def test_parallel_sweep_children_share_the_cores(tmp_path, monkeypatch, parallel, cap):
    script = tmp_path / "dump_env.py"
    script.write_text(ENV_DUMP)
    monkeypatch.setenv("GRPOCTL_TRAIN_CMD", f"{sys.executable} {script}")
    monkeypatch.setenv("ENV_OUT", str(tmp_path / "env.txt"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.chdir(tmp_path)
    registry = Registry(str(tmp_path / "r.db"))
    launcher.run_sweep(
        spec.param_sweep("lr", "1e-4,3e-4", overrides=["steps=1"]), registry, parallel=parallel, log_root=Path("logs")
    )
    lines = (tmp_path / "env.txt").read_text().split("\n")[:-1]
    assert lines == [f"{cap} PASSIVE"] * 2
