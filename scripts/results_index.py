"""Write docs/results/index.md: for each finding of the seed's ablation studies, what the
tiny suite measured (a difference with its 95% interval over seeds) and a verdict.

    python scripts/results_index.py --db docs/results/registry.db --out docs/results/index.md

The numbers are `grpoctl compare`'s (analysis/compare.py and analysis/baseline.py: the
mean of each run's last 3 evals, Welch's t over seeds, Holm within a study), so the
index and the study pages cannot disagree. Two findings are about gradient norms, which
compare does not test: for those each run's mean `train/grad_norm` over its steps is
one value per seed, and the same Welch test (analysis/stats.py) sets variant against
baseline.

A finding that something *matters* is reproduced when the tiny suite's verdict has its
direction. A finding that something does *not* matter cannot be proven by a test that
fails to reject; it counts as reproduced only when the 95% interval also lies within
+-EQUIVALENCE of zero (the suite would have seen a difference that large), and as
"within noise" when the interval is wider than that.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from grpoctl.analysis import stats
from grpoctl.analysis.compare import build_compare_table
from grpoctl.errors import UserError
from grpoctl.registry import Registry

EQUIVALENCE = 0.05  # accuracy; 5 points is about 2.5 binomial SEs of one 512-problem eval


@dataclass(frozen=True)
class Finding:
    claim: str  # the seed's finding, in one line, with its own number
    study: str  # the experiments/ spec of its tiny counterpart
    variant: str  # set against the spec's baseline
    expect: str  # "better" / "worse" / "same" / "not better" (accuracy); "lower" (grad norm)
    measure: str = "accuracy"  # or "grad_norm"


FINDINGS = [
    Finding(
        "A learning rate 3.3x the best collapses the policy (Qwen: 1e-4 against 3e-5).",
        "tiny-lr-sweep",
        "lr=1e-3",
        "worse",
    ),
    Finding("The best learning rate beats one 3x lower (Qwen: 3e-5 over 1e-5).", "tiny-lr-sweep", "lr=1e-4", "worse"),
    Finding(
        "Without the group-mean baseline REINFORCE peaks early and declines (with it: ~0.61).",
        "tiny-baseline-ablation",
        "no_baseline",
        "worse",
    ),
    Finding(
        "Length normalization barely matters: constant reaches mean's accuracy.",
        "tiny-length-normalization",
        "constant",
        "same",
    ),
    Finding(
        "Length normalization barely matters: microbatch reaches mean's accuracy.",
        "tiny-length-normalization",
        "microbatch",
        "same",
    ),
    Finding(
        "constant normalization gives lower gradient norms than mean.",
        "tiny-length-normalization",
        "constant",
        "lower",
        "grad_norm",
    ),
    Finding(
        "Dividing by the group's reward std gives higher accuracy (Qwen: 0.72 against 0.65).",
        "tiny-std-normalization",
        "std_off",
        "worse",
    ),
    Finding(
        "Without std normalization gradient norms are lower.", "tiny-std-normalization", "std_off", "lower", "grad_norm"
    ),
    Finding(
        "Aggressive rollout reuse (16 optimizer steps per GRPO step) collapses.",
        "tiny-off-policy",
        "e4_tb64_ga2",
        "worse",
    ),
    Finding(
        "Mild reuse (2 epochs over the rollouts) does not beat on-policy.",
        "tiny-off-policy",
        "e2_tb256_ga8",
        "not better",
    ),
    Finding(
        "Mild reuse (2 optimizer steps of half batches) does not beat on-policy.",
        "tiny-off-policy",
        "e1_tb128_ga4",
        "not better",
    ),
    Finding(
        "The more SFT a GRPO start has seen, the lower its ceiling: an early checkpoint beats the final one.",
        "tiny-sft-init",
        "warmstart_100",
        "better",
    ),
    Finding("... and a mid checkpoint beats the final one.", "tiny-sft-init", "warmstart_200", "better"),
]
# Measured beside the seed's modes, with no claim of the seed's to test.
BEYOND_THE_SEED = [("tiny-length-normalization", "token", "DAPO's token-mean (loss.length_normalization=token)")]

PROMPT_NOT_TESTABLE = (
    "The prompt ablation (r1_zero against question-only) has no tiny counterpart: the seed's finding rests "
    "on what Qwen2.5-Math learned in pre-training (it already answers in \\boxed{} and solves half the "
    "problems question-only), while the tiny model starts from random weights and learns its one answer "
    "format in the supervised warm-start, so swapping the template would test the warm-start, not the prompt."
)

# What the tiny setup can and cannot show, study by study: facts read off the study pages.
READING = {
    "tiny-length-normalization": (
        "responses run to about 29.7 of their 32-token limit (the pages' length column), so dividing by 32 "
        "(constant) is within about 8% of dividing by each response's length (mean). The seed's responses "
        "were 300-400 of 1024 tokens; the tiny setup cannot show its 2-2.5x gap in gradient scale, only that "
        "accuracy does not move."
    ),
    "tiny-off-policy": (
        "at equal GRPO steps, reuse takes 2-16x the optimizer steps on the same rollouts, and the tiny model, "
        "60 steps from its start and far from its ceiling, turns them into faster learning: mild reuse is "
        "ahead at step 60. The seed's on-policy win was over 200 steps, at Qwen's own learning rate. The "
        "aggressive variant (16 optimizer steps) does show the instability: every seed falls from 0.40 to "
        "0.24-0.30 at step 10, then recovers."
    ),
    "tiny-sft-init": (
        "the tiny warm-start's checkpoints at steps 100 and 200 answer almost nothing (eval 0.006 before "
        "GRPO and 0.00-0.02 after it; a train reward of at most 0.03 at any step): nearly every group's "
        "rewards are all 0, so GRPO has almost no signal to learn from. The seed's "
        "base model already solved some problems; the tiny model has no such base, so this measures a start "
        "with too little supervised training for RL, not SFT narrowing the policy."
    ),
    "tiny-std-normalization": (
        "removing the std division halves the gradient norm, as the seed saw; its accuracy cost (-2.6 "
        "points) is in the seed's direction but not resolved by 3 seeds."
    ),
}

STUDIES = [
    "tiny-lr-sweep",
    "tiny-baseline-ablation",
    "tiny-length-normalization",
    "tiny-std-normalization",
    "tiny-off-policy",
    "tiny-sft-init",
]


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _verdict(verdict: str, measured: str) -> str:
    """The verdict, and what was measured when the verdict's word does not say it."""
    return verdict if measured == verdict else f"{verdict}: {measured}"


def accuracy_row(table, finding: Finding) -> tuple[str, str, str, str]:
    """(measured, p, verdict, seeds needed) of an accuracy finding from compare's comparison."""
    versus = {v.label: v for v in table.versus.rows} if table.versus else {}
    v = versus.get(finding.variant)
    if v is None or v.diff is None:
        return "no comparison", "", "not run", ""
    d = v.diff
    measured = f"{pts(d.diff)} pts [{pts(d.low)}, {pts(d.high)}]"
    if finding.expect in ("better", "worse"):
        opposite = "worse" if finding.expect == "better" else "better"
        verdict = {finding.expect: "reproduced", opposite: "not reproduced"}.get(v.verdict, "within noise")
    elif finding.expect == "not better":
        verdict = "not reproduced" if v.verdict == "better" else "reproduced"
    else:  # "same"
        if v.verdict != "within noise":
            verdict = "not reproduced"
        else:
            verdict = "reproduced" if max(abs(d.low), abs(d.high)) <= EQUIVALENCE else "within noise"
    needed = "" if v.seeds_needed is None else f"{'>' if v.seeds_needed_capped else ''}{v.seeds_needed}"
    return measured, f"{v.p_holm:.3g}", _verdict(verdict, v.verdict), needed


def grad_norm_row(table, finding: Finding) -> tuple[str, str, str, str]:
    """(measured, p, verdict, "") of a gradient-norm finding: Welch over per-seed mean grad norms."""

    def per_seed(label):
        row = next((r for r in table.rows if r.label == label), None)
        if row is None:
            return []
        return [
            statistics.fmean(v for _, v in rd.series["train/grad_norm"])
            for rd in row.runs
            if rd.series.get("train/grad_norm")
        ]

    variant, base = per_seed(finding.variant), per_seed(table.versus.baseline if table.versus else "")
    if len(variant) < 2 or len(base) < 2:
        return "no comparison", "", "not run", ""
    d = stats.welch(variant, base)
    ratio = statistics.fmean(variant) / statistics.fmean(base)
    measured = f"{d.diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}] ({ratio:.2f}x)"
    direction = stats.verdict(d.diff, d.p)
    verdict = {"worse": "reproduced", "better": "not reproduced"}.get(direction, "within noise")
    label = {"worse": "lower", "better": "higher"}.get(direction, direction)
    return measured, f"{d.p:.3g}", _verdict(verdict, label), ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="docs/results/registry.db")
    parser.add_argument("--out", default="docs/results/index.md")
    parser.add_argument("--wall-s", type=float, default=None, help="How long the regeneration took.")
    args = parser.parse_args()

    tables = {}
    with Registry(args.db, readonly=True) as registry:
        for study in STUDIES:
            try:
                tables[study] = build_compare_table(registry, [study])
            except UserError as exc:  # not run yet: the page says so rather than failing
                print(f"warning: {study}: {exc}", file=sys.stderr)

    lines = [
        "# What grpoctl shows you: the seed's ablations, in miniature",
        "",
        "Each study of the seed's GRPO ablations (Qwen2.5-Math-1.5B on MATH, one run per variant) has a tiny",
        "counterpart in `experiments/`: the embedded tiny model on 2-digit addition, 60 GRPO steps, on CPU,",
        "**3 seeds per variant**. Every number below is what `grpoctl compare` prints for that study; each",
        "study's page is `grpoctl report`'s output. Regenerate all of it with",
        "`scripts/reproduce_tiny_ablations.sh` (finished runs in the registry are skipped).",
        "",
        "The measure is each run's mean greedy accuracy over its last 3 evals (steps 40, 50, 60; 512 held-out",
        "problems), averaged over seeds. Differences are in accuracy points, variant minus the study's baseline,",
        "with Welch's 95% interval over seeds; p is Holm-corrected within the study; a verdict needs p < 0.05.",
        "A finding that something does not matter counts as reproduced only when the interval lies within",
        f"+-{100 * EQUIVALENCE:.0f} points.",
        "",
        "| Seed's finding | Tiny study: variant vs baseline | Measured | p | Verdict | Seeds needed |",
        "|---|---|---|---|---|---|",
    ]
    for finding in FINDINGS:
        table = tables.get(finding.study)
        if table is None:
            lines.append(f"| {finding.claim} | {finding.study}: `{finding.variant}` | | | not run yet | |")
            continue
        base = table.versus.baseline if table.versus else "?"
        measured, p, verdict, needed = (grad_norm_row if finding.measure == "grad_norm" else accuracy_row)(
            table, finding
        )
        what = "grad norm: " if finding.measure == "grad_norm" else ""
        lines.append(
            f"| {finding.claim} | [{finding.study}]({finding.study}/report.md): {what}"
            f"`{finding.variant}` vs `{base}` | {measured} | {p} | {verdict} | {needed} |"
        )
    lines.append("| The r1_zero prompt beats question-only. | none | | | not testable at this scale | |")
    lines += [
        "",
        "Seeds needed: per arm, for the observed accuracy difference at alpha 0.05 and power 0.8 "
        "(noncentral t; >100 when it is too close to zero to resolve).",
        "",
        "## Reading the verdicts",
        "",
        PROMPT_NOT_TESTABLE,
        "",
    ]
    lines += [f"- **{study}**: {note}" for study, note in READING.items() if study in tables]
    lines += ["", "Beyond the seed:", ""]
    for study, variant, what in BEYOND_THE_SEED:
        if study not in tables:
            continue
        measured, p, verdict, _ = accuracy_row(tables[study], Finding("", study, variant, "same"))
        base = tables[study].versus.baseline if tables[study].versus else "?"
        lines.append(f"- {what}: `{variant}` vs `{base}` {measured}, p {p}: {verdict}.")

    steps_s = sum(
        (rd.s_per_step or 0) * (rd.run.last_step or 0) for t in tables.values() for r in t.rows for rd in r.runs
    )
    runs = {rd.run.id for t in tables.values() for r in t.rows for rd in r.runs}
    lines += ["", "## The studies", ""]
    for study in tables:
        rows = tables[study].rows
        lines.append(f"- [{study}]({study}/report.md): {len(rows)} variants, {sum(len(r.runs) for r in rows)} runs")
    lines += [
        "",
        f"{len(runs)} distinct runs (a config shared by two studies, such as their common baseline, "
        f"is run once), {steps_s / 3600:.2f} h of single-thread training steps (median s/step x steps).",
    ]
    if args.wall_s is not None:
        lines.append(f"This page was regenerated in {args.wall_s:.0f} s.")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
