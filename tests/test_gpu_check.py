"""benchmarks/gpu_check.py stays runnable: its scaled-down CPU mode runs both GPU presets end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
@pytest.mark.timeout(600)  # 269 s in CI, 300+ under load: two presets' engines, each compiled on CPU
def test_gpu_check_runs_scaled_down_on_cpu(tmp_path):
    # The checkout's grpoctl, not whichever one the interpreter has installed.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--scale",
            "cpu",
            "--steps",
            "1",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for preset in ("rtx4090", "h100"):
        assert f"== {preset}: 1 steps" in out.stdout
    assert out.stdout.count("peak of the step") == 2
    assert out.stdout.count("not measured") >= 2 or "vLLM sleep" in out.stdout
    for line in out.stdout.splitlines():
        if line.strip().startswith("peak of the step"):
            measured, estimated = map(float, line.split()[-2:])
            assert measured > 0 and estimated > 0
