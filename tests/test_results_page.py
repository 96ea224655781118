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
