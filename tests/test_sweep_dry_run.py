"""`grpoctl sweep SPEC --dry-run` against a registry where another study already ran some
of its arms: the plan lists them as `skip` (found by config hash, as the real sweep finds
them), before this study is recorded, and writes nothing."""

from __future__ import annotations

import re

import pytest
from cli import invoke

from grpoctl.registry import Registry
from grpoctl.sweep.spec import ablation

FIRST = """name: first
base: {loop: {n_grpo_steps: 2}}
baseline: a
variants:
  a: {optimizer.lr: 1.0e-4}
  b: {optimizer.lr: 3.0e-4}
"""
# shares `a` with the first study (the same resolved config), under another label
SECOND = """name: second
base: {loop: {n_grpo_steps: 2}}
baseline: same
variants:
  same: {optimizer.lr: 1.0e-4}
  other: {optimizer.lr: 1.0e-5}
"""


def plan_lines(stdout: str) -> dict[str, str]:
    """{variant: action} from the dry run's `  new|resume|retry|skip ` lines (the format
    scripts/run_lab_studies.sh greps)."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^  (new|resume|retry|skip) +(\S+) \(seed", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


@pytest.mark.slow  # two in-process sweeps' plans: 2-7 s, most of it the config's resolution
def test_a_dry_run_skips_the_arms_another_study_finished(tmp_path):
    (tmp_path / "first.yaml").write_text(FIRST)
    (tmp_path / "second.yaml").write_text(SECOND)
    db = tmp_path / "r.db"
    first = ablation(tmp_path / "first.yaml")
    shared = next(v for v in first.variants if v.label == "a")
    with Registry(str(db)) as registry:
        run = registry.create_run(
            name=shared.run_name,
            config={},
            config_diff={},
            config_hash=shared.config_hash,
            seed=shared.seed,
            total_steps=2,
            group="first",
        )
        registry.set_status(run.id, "finished")
    before = db.read_bytes()
    out = invoke("sweep", str(tmp_path / "second.yaml"), "--dry-run", "--db", str(db), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert plan_lines(out.stdout) == {"same": "skip", "other": "new"}, out.stdout
    assert "  skip    same (seed 0): finished" in out.stdout
    assert db.read_bytes() == before and not (tmp_path / "outputs").exists()  # nothing recorded, nothing written
    # an interrupted shared arm is resumed under its own name, whichever study made it
    with Registry(str(db)) as registry:
        registry.set_status(run.id, "interrupted")
    out = invoke("sweep", str(tmp_path / "second.yaml"), "--dry-run", "--db", str(db), cwd=tmp_path)
    assert plan_lines(out.stdout) == {"same": "resume", "other": "new"}, out.stdout
    assert f"--resume {shared.run_name}" in out.stdout
