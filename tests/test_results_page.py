"""docs/results/addition/ is what scripts/results_page.py computes from the committed
registry and the declared findings: regenerate its table here and hold the committed page
to it, so no number in its tables is typed in by hand. The figures the lab page's prose
quotes (experiments/pages/lab.yaml: the lr re-run, the off-policy drift) are recomputed
from docs/results/lab.db.xz and held to the committed page."""

from __future__ import annotations

import os
import statistics
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
    # -14.6 points on 3 pairs that barely correlate: the paired t's 2 df leave it unresolved after Holm
    assert "-14.6 pts (minimum eval after warm-up from step 10)" in aggressive and "| paired t (seeds);" in aggressive
    assert "**inconclusive: not resolved at these seeds**" in aggressive
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
    assert "**not run**" in aggressive and "paired t" not in aggressive
    std = rows["Dividing by the group's reward std gives higher accuracy (Qwen: 0.72 against 0.65)."]
    assert "| paired t (seeds); problem level: not recorded |" in std  # its 2 ended seeds, paired with the baseline's
    sft = rows["... and a mid checkpoint beats the final one."]
    assert "not run yet: `warmstart_200` has no ended run yet" in sft and "**not run**" in sft


@pytest.mark.slow
def test_an_empty_registry_and_a_bad_page(tmp_path):
    from grpoctl.registry import Registry

    Registry(str(tmp_path / "empty.db")).close()
    out = page_script("experiments/pages/lab.yaml", "--db", str(tmp_path / "empty.db"), "--out", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "p" / "index.md").read_text()
    # each finding twice: as declared and under the page's re-analysis
    assert text.count("**not run**") == 2 * 21 and "No study of this page has an ended run yet" in text
    assert "Verdicts the re-analysis changes: 0 of 21." in text
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nregistry: r.db\nout: o\nstudies: [x.yaml]\nflavour: 1\n")
    out = page_script(str(bad), "--out", str(tmp_path / "never"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown key 'flavour'" in out.stderr
    assert not (tmp_path / "never").exists()


def test_the_knobs_page_reads_the_knob_studies_registry_and_writes_beside_the_lab_page(monkeypatch):
    """experiments/pages/lab-knobs.yaml (issue 22's and issue 40's studies): its paths resolve from its own
    folder, as results_page.py resolves them, to their own registry and folder in docs/results/."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import results_page

    from grpoctl.analysis import findings as F

    page = ROOT / "experiments" / "pages" / "lab-knobs.yaml"
    spec = results_page.read_page(page)
    assert (page.parent / spec["registry"]).resolve() == ROOT / "docs" / "results" / "lab-knobs.db.xz"
    assert (page.parent / spec["out"]).resolve() == ROOT / "docs" / "results" / "knobs"
    studies = [F.read_findings(p)[0] for p in F.family_specs(page)]
    assert studies == [
        "lab-overlong",
        "lab-dynamic-sampling",
        "lab-entropy-bonus",
        "lab-cispo",
        "lab-entropy-strong",
        "lab-kl",
        "lab-group-shape",
        "lab-curriculum",
    ]


def _member_runs(registry, study: str, variant: str):
    return [run for member, run in registry.sweep_members(study) if member.variant == variant and run is not None]


def _best_minus_final(registry, run) -> float:
    accuracies = [e.accuracy for e in registry.evals(run.id) if e.kind == "greedy" and e.headline]
    return max(accuracies) - accuracies[-1]


def test_the_lab_pages_drift_note_is_what_the_registry_holds(committed_registry):
    """The lab page's note on e4_tb16_ga1's drift quotes figures read after the studies ran
    (experiments/pages/lab.yaml, `notes`): each is recomputed here from lab.db.xz, read-only,
    and must be the one the committed page prints."""
    from grpoctl.analysis import stats
    from grpoctl.registry import Registry

    with Registry(str(committed_registry("lab.db")), readonly=True) as registry:
        drifting = _member_runs(registry, "lab-off-policy", "e4_tb16_ga1")
        on_policy = _member_runs(registry, "lab-off-policy-full", "e1_tb64_ga1")
        names = ("train/ratio_max", "train/ratio_min", "train/clip_fraction")
        last_ten = {name: [] for name in names}  # per run: its mean over steps 41-50
        for run in drifting:
            series = registry.metric_series(run.id, names)
            for name in names:
                last_ten[name].append(statistics.mean(v for step, v in series[name] if 41 <= step <= 50))
        drops = [_best_minus_final(registry, run) for run in drifting]
        against = [_best_minus_final(registry, run) for run in on_policy]
    assert len(drifting) == 8 and len(on_policy) == 6
    difference = stats.welch(drops, against)
    page = (ROOT / "docs" / "results" / "first-lab" / "index.md").read_text()
    note = next(line for line in page.splitlines() if "16 updates per rollout batch drift" in line)
    assert f"largest probability ratio π/π_old is {statistics.mean(last_ten['train/ratio_max']):.1f}" in note
    assert f"its smallest {statistics.mean(last_ten['train/ratio_min']):.3f}" in note
    assert f"{100 * statistics.mean(last_ten['train/clip_fraction']):.1f}% of its tokens are clipped" in note
    assert f"falls {100 * statistics.mean(drops):.1f} points from its best on average" in note
    assert f"per run: {100 * min(drops):.1f} to {100 * max(drops):.1f}" in note
    assert (
        f"{100 * difference.diff:.1f} points [{100 * difference.low:.1f}, {100 * difference.high:.1f}] more than"
        in note
    )


def test_the_lab_pages_lr_disclosure_is_what_the_registry_holds(committed_registry):
    """The lab page says its lr runs are a re-run from the commit that reported the winner,
    with that commit's means; the registry must hold exactly that."""
    from grpoctl.registry import Registry

    with Registry(str(committed_registry("lab.db")), readonly=True) as registry:
        arms = {member.variant: [] for member, _ in registry.sweep_members("lab-lr-sweep")}
        commits = set()
        for member, run in registry.sweep_members("lab-lr-sweep"):
            commits.add(run.git_commit[:7])
            arms[member.variant].append([(e.step, e.accuracy) for e in registry.evals(run.id) if e.kind == "greedy"])
    last3 = {
        arm: statistics.mean(statistics.mean(a for _, a in evals[-3:]) for evals in runs) for arm, runs in arms.items()
    }
    lowest_from_30 = min(a for evals in arms["lr=1e-4"] for step, a in evals if step >= 30)
    page = (ROOT / "docs" / "results" / "first-lab" / "index.md").read_text()
    assert commits == {"58f5b3b"} and f"recorded from commit {commits.pop()}" in page
    assert max(last3, key=last3.__getitem__) == "lr=3.3e-5"
    assert f"last-3 mean of {last3['lr=3.3e-5']:.4f} against {last3['lr=1e-4']:.4f} at 1e-4" in page
    assert f"its lowest eval from step 30 on is {lowest_from_30:.3f}" in page


@pytest.mark.slow
def test_every_lab_verdict_follows_its_rule(committed_registry):
    """On the committed lab registry, as declared and under the re-analysis: "not reproduced"
    exactly where the family leaves a direction unresolved and the 95% interval lies wholly
    short of the declared effect; std reads it because [low, high] excludes -7 points."""
    from grpoctl.analysis import findings as F
    from grpoctl.analysis import verdicts
    from grpoctl.analysis.compare import family_results
    from grpoctl.registry import Registry

    pages = ROOT / "experiments" / "pages"
    with Registry(str(committed_registry("lab.db")), readonly=True) as registry:
        declared, tables = family_results(registry, F.family_findings(pages / "lab.yaml"))
        again, _ = family_results(registry, F.family_findings(pages / "lab-reanalysis.yaml"), tables)
    for result in declared + again:
        f, d = result.finding, result.diff
        effects = [e for e in (f.seed_effect, f.min_effect) if e is not None]
        unresolved = result.testable and d is not None and result.p_family is not None and result.p_family >= 0.05
        short = unresolved and f.expect != "same" and any(verdicts.short_of(d.low, d.high, e) for e in effects)
        assert result.verdict.startswith("not reproduced") == short, (f.id, result.verdict)
        if result.verdict.startswith("inconclusive: not resolved"):
            assert unresolved and not short, f.id
        if not result.testable and not result.not_run:
            assert result.verdict == "not testable here" and result.p_family is None, f.id
        if result.equivalence is not None and result.equivalence.outcome:
            assert result.verdict == "both at ceiling: equivalence uninformative" and result.p_family is None
    std = next(r for r in again if r.finding.id == "lab-std-norm-higher-accuracy")
    assert std.diff.low > -0.07 and std.verdict == "not reproduced: the interval excludes the seed's effect"
    changed = {a.finding.id for a, b in zip(declared, again, strict=True) if a.verdict != b.verdict}
    assert changed == {
        "lab-no-baseline-peaks-then-declines",
        "lab-length-norm-constant-same-accuracy",
        "lab-length-norm-microbatch-same-accuracy",
        "lab-length-norm-constant-lower-grad-norm",
        "lab-aggressive-reuse-collapses",
        "lab-mild-reuse-2-epochs-as-good",
        "lab-mild-reuse-half-batches-as-good",
    }
