"""`grpoctl sweep SPEC --seeds auto` end to end: the pilot, the blinded re-estimate, a kill
between the stages, the resume from the stage the registry recorded, and the report."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import REPO, grpoctl_cmd, lab_overrides

from grpoctl.registry import Registry


def test_a_sweeps_design_is_recorded_and_read_back(db_url):
    with Registry(db_url) as registry:
        sweep = registry.get_or_create_sweep("s", "ablation", {"seeds": "auto"})
        assert json.loads(registry.get_sweep("s").design) == {}  # a sweep with fixed seeds has none
        registry.set_sweep_design(sweep.id, {"stage": "final", "final": 5})
        assert json.loads(registry.get_sweep("s").design) == {"stage": "final", "final": 5}


def _spec(tmp_path) -> str:
    common = "\n".join(f"  {o.split('=', 1)[0]}: {o.split('=', 1)[1]}" for o in lab_overrides("lab", tmp_path))
    text = f"""name: auto
base: {REPO / "experiments" / "lab.yaml"}
common:
{common}
baseline: std_on
variants:
  std_on: {{loss.use_std_normalization: true}}
  std_off: {{loss.use_std_normalization: false}}
findings:
  - id: tiny-gap
    claim: "a gap in gradient norm smaller than the seeds can show"
    variant: std_off
    measure: grad_norm
    expect: lower
    seed_effect: -1.0e-6
    testable: {{rule: step1_grad_norm_gap, in: variant, at_most: 0.1}}
"""
    path = tmp_path / "auto.yaml"
    path.write_text(text)
    return str(path)


def _design(db: str) -> dict:
    try:
        with Registry(db, must_exist=True, readonly=True) as registry:
            return json.loads(registry.get_sweep("auto").design)
    except Exception:  # not created yet, or mid-migration
        return {}


@pytest.mark.slow
def test_an_auto_sweep_killed_between_stages_resumes_from_its_stage(tmp_path):
    spec, db = _spec(tmp_path), str(tmp_path / "registry.db")
    args = ["sweep", spec, "--seeds", "auto", "--pilot-seeds", "2", "--max-seeds", "3", "--db", db]
    sweep = subprocess.Popen(grpoctl_cmd(*args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while _design(db).get("stage") != "final" and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)  # the pilot ended and the final n is recorded: stop here
    out = sweep.communicate(timeout=300)[0].decode()
    assert sweep.returncode in (130, -signal.SIGTERM), out
    design = _design(db)
    assert design["stage"] == "final" and design["final"] == 3, design  # capped: the declared gap is tiny
    (estimate,) = design["estimates"]
    assert estimate["finding"] == "tiny-gap" and estimate["pilot_pairs"] == 2 and estimate["capped"]
    with Registry(db, readonly=True) as registry:
        pilot = {r.name: r.id for r in registry.runs_in_group("auto") if r.seed in (0, 1)}
    assert len(pilot) == 4

    # asked differently: refused in one line before anything is written
    other = subprocess.run(grpoctl_cmd(*args[:-4], "--max-seeds", "4", "--db", db), cwd=tmp_path, capture_output=True)
    assert other.returncode == 2 and len(other.stderr.decode().strip().splitlines()) == 1, other.stderr

    resumed = subprocess.run(grpoctl_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "stage 1, the pilot" not in resumed.stdout  # it resumed at the final stage
    assert "final: 3 seeds per arm (capped at the maximum, 3" in resumed.stdout
    with Registry(db, readonly=True) as registry:
        runs = registry.runs_in_group("auto")
        assert {r.name: r.id for r in runs if r.seed in (0, 1)} == pilot  # the pilot was not run again
        assert sorted((r.variant, r.seed) for r in runs) == sorted(
            (v, s) for v in ("std_on", "std_off") for s in (0, 1, 2)
        )
        assert all(r.status == "finished" for r in runs)
    assert _design(db)["stage"] == "done"

    reported = subprocess.run(
        grpoctl_cmd("report", "auto", "-o", str(tmp_path / "rep"), "--db", db), cwd=tmp_path, capture_output=True
    )
    assert reported.returncode == 0, reported.stderr
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "## Seeds chosen by an internal pilot" in report
    assert "pilot: 2 seeds per arm (seeds 0-1), at most 3; stage reached: done" in report
    assert "re-estimate, tiny-gap: blinded sd of the per-seed differences" in report
    assert "final: 3 seeds per arm (capped at the maximum, 3" in report
