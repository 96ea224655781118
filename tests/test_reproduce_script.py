"""scripts/reproduce_tiny_ablations.sh [all|pages|lab|addition]: what each mode runs, with
the grpoctl and python commands replaced by recorders (nothing is trained or written)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "reproduce_tiny_ablations.sh"


def recorder(path: Path, log: Path) -> str:
    path.write_text(f'#!/usr/bin/env bash\necho "$(basename "$0") $*" >> {log}\n')
    path.chmod(0o755)
    return str(path)


def run(mode: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "calls.log"
    log.write_text("")
    environ = dict(
        os.environ,
        GRPOCTL=recorder(tmp_path / "grpoctl", log),
        PYTHON=recorder(tmp_path / "python", log),
        ADDITION_DB=str(tmp_path / "registry.db"),
        **env,
    )
    out = subprocess.run(["bash", str(SCRIPT), mode], capture_output=True, text=True, timeout=60, env=environ)
    return out, log.read_text().splitlines()


@pytest.mark.slow  # subprocesses
def test_each_mode_runs_what_it_says(tmp_path):
    out, calls = run("addition", tmp_path, SEEDS="0,1")
    assert out.returncode == 0, out.stderr
    sweeps = [c for c in calls if c.startswith("grpoctl sweep")]
    assert [c.split()[2] for c in sweeps] == [
        f"experiments/{s}.yaml"
        for s in ("tiny-lr-sweep", "tiny-baseline-ablation", "tiny-length-normalization", "tiny-std-normalization")
        + ("tiny-off-policy", "tiny-sft-init")
    ]
    assert all(f"--seeds 0,1 --parallel 2 --db {tmp_path / 'registry.db'}" in c for c in sweeps)
    assert calls[-1].startswith("python scripts/results_page.py experiments/pages/addition.yaml --db")

    # pages: no sweep; the lab's page needs its registry, and says so in one line
    out, calls = run("pages", tmp_path, LAB_DB=str(tmp_path / "nope.db"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no lab registry at" in out.stderr
    assert calls == [c for c in calls if c.startswith("python scripts/results_page.py experiments/pages/addition")]
    (tmp_path / "lab.db").write_text("")
    out, calls = run("pages", tmp_path, LAB_DB=str(tmp_path / "lab.db"), KNOBS_DB=str(tmp_path / "nope.db"))
    assert (
        out.returncode == 2
        and out.stderr.count("\n") == 1
        and f"no lab registry at {tmp_path / 'nope.db'}" in out.stderr
    )
    (tmp_path / "knobs.db").write_text("")
    (tmp_path / "pass.db").write_text("")
    (tmp_path / "studies.db").write_text("")
    dbs = dict(
        LAB_DB=str(tmp_path / "lab.db"),
        STUDIES_DB=str(tmp_path / "studies.db"),
        KNOBS_DB=str(tmp_path / "knobs.db"),
        PASS_AT_K_DB=str(tmp_path / "pass.db"),
    )
    out, calls = run("pages", tmp_path, **dbs)
    assert out.returncode == 0, out.stderr
    # the seven studies' page (the second round, then the first round's beside it), then the
    # knob studies' page and the pass@k page
    assert calls[-4:] == [
        f"python scripts/results_page.py experiments/pages/studies.yaml --db {tmp_path / 'studies.db'}"
        " --out docs/results",
        f"python scripts/results_page.py experiments/pages/lab.yaml --db {tmp_path / 'lab.db'}"
        " --out docs/results/first-lab",
        f"python scripts/results_page.py experiments/pages/lab-knobs.yaml --db {tmp_path / 'knobs.db'}"
        " --out docs/results/knobs",
        f"python scripts/pass_at_k_page.py --db {tmp_path / 'pass.db'} --out docs/results/pass-at-k",
    ]

    out, calls = run("everything", tmp_path)
    assert out.returncode == 2 and "usage:" in out.stderr and calls == []
