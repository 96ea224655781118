"""docs/results/addition/ is what scripts/results_page.py computes from the committed
registry and the declared findings: regenerate its table here and hold the committed page
to it, so no number on the page is typed in by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "addition"


def table(text: str) -> list[str]:
    return [
        line for line in text.split("## Findings", 1)[1].split("![forest", 1)[0].splitlines() if line.startswith("|")
    ]


@pytest.mark.slow
def test_the_committed_page_is_what_the_script_computes(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "scripts/results_page.py",
            "experiments/pages/addition.yaml",
            "--out",
            str(tmp_path),
            "--no-reports",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stderr
    fresh = (tmp_path / "index.md").read_text()
    committed = (PAGE / "index.md").read_text()
    assert table(fresh) == table(committed)
    for png in ("forest.png", "lengths.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (PAGE / png).is_file()
    rows = {line.split(" | ")[0].strip("| "): line for line in table(fresh)[2:]}
    assert len(rows) == 14  # 13 declared findings and the prompt ablation, not run
    # every finding's testability is decided by its rule, with the number behind it
    assert all(": " in line.split(" | ")[2] for line in rows.values())
    sft = rows["The more SFT a GRPO start has seen, the lower its ceiling: an early checkpoint beats the final one."]
    assert "**no**: groups with mixed rewards at step 1 3.1%" in sft and "**not testable here**" in sft
    aggressive = rows["Aggressive rollout reuse (16 optimizer steps per GRPO step) collapses."]
    assert "-14.6 pts (minimum eval after warm-up from step 10)" in aggressive and "**reproduced**" in aggressive
    assert "**Code commit of every run**" in fresh and "These runs came from 2 different commits" in fresh
    assert "tiny-length-normalization: **its comparisons are across commits**" in fresh
    assert "Sample completions of" in fresh and "- step 60:" in fresh and "**Warm-start:**" in fresh
    for study in ("tiny-lr-sweep", "tiny-baseline-ablation", "tiny-length-normalization"):
        assert (PAGE / study / "report.md").is_file() and (PAGE / study / "eval_accuracy.png").is_file()


def page_script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "results_page.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.slow
def test_a_page_over_a_partial_registry_says_not_run(tmp_path, committed_registry):
    """While a suite runs: a study missing from the registry and a variant whose runs are
    gone or still running read "not run yet", outside the family; nothing raises."""
    import shutil

    from grpoctl.registry import Registry

    db = tmp_path / "partial.db"
    shutil.copy(committed_registry("registry.db"), db)
    with Registry(str(db)) as registry:
        for run in registry.list_runs(limit=None):
            if run.group in ("tiny-off-policy", "tiny-sft-init") or run.variant == "lr=1e-3":
                registry.delete_run(run.id)
        still = next(r for r in registry.list_runs(limit=None) if r.variant == "std_off")
        registry.set_status(still.id, "running")  # one seed of std_off is still running
    out = page_script("experiments/pages/addition.yaml", "--db", str(db), "--out", str(tmp_path / "p"), "--no-reports")
    assert out.returncode == 0, out.stderr
    rows = {line.split(" | ")[0].strip("| "): line for line in table((tmp_path / "p" / "index.md").read_text())[2:]}
    collapse = rows["A learning rate 3.3x the best collapses the policy (Qwen: 1e-4 against 3e-5)."]
    assert "not run yet: `lr=1e-3` has no ended run yet" in collapse and "**not run**" in collapse
    aggressive = rows["Aggressive rollout reuse (16 optimizer steps per GRPO step) collapses."]
    assert "**not run**" in aggressive and "(Welch)" not in aggressive
    std = rows["Dividing by the group's reward std gives higher accuracy (Qwen: 0.72 against 0.65)."]
    assert "(Welch)" in std  # measured on its 2 ended seeds against 3
    sft = rows["... and a mid checkpoint beats the final one."]
    assert "not run yet: `warmstart_200` has no ended run yet" in sft and "**not run**" in sft


@pytest.mark.slow
def test_an_empty_registry_and_a_bad_page(tmp_path):
    from grpoctl.registry import Registry

    Registry(str(tmp_path / "empty.db")).close()
    out = page_script("experiments/pages/lab.yaml", "--db", str(tmp_path / "empty.db"), "--out", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "p" / "index.md").read_text()
    assert text.count("**not run**") == 21 and "No study of this page has an ended run yet" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nregistry: r.db\nout: o\nstudies: [x.yaml]\nflavour: 1\n")
    out = page_script(str(bad), "--out", str(tmp_path / "never"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown key 'flavour'" in out.stderr
    assert not (tmp_path / "never").exists()


def test_the_knobs_page_reads_the_knob_studies_registry_and_writes_beside_the_lab_page(monkeypatch):
    """experiments/pages/lab-knobs.yaml (issue 22's studies): its paths resolve from its own
    folder, as results_page.py resolves them, to their own registry and folder in docs/results/."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import results_page

    from grpoctl.analysis import findings as F

    page = ROOT / "experiments" / "pages" / "lab-knobs.yaml"
    spec = results_page.read_page(page)
    assert (page.parent / spec["registry"]).resolve() == ROOT / "docs" / "results" / "lab-knobs.db.xz"
    assert (page.parent / spec["out"]).resolve() == ROOT / "docs" / "results" / "knobs"
    studies = [F.read_findings(p)[0] for p in F.family_specs(page)]
    assert studies == ["lab-overlong", "lab-dynamic-sampling", "lab-entropy-bonus"]
