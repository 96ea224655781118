"""Write a results page: the seed's findings that a page file declares, tested on a
registry, with what this setup can and cannot show.

    python scripts/results_page.py experiments/pages/addition.yaml [--db REGISTRY] [--out DIR]

Every number in the page's tables is computed here from the registry and the study specs;
the words (its title, what the task is, how to regenerate it, findings no study here
tests) come from the page file. Its prose (intro, notes) may quote a figure read from the
registry after the data were seen: it says how, and tests/test_results_page.py holds the
lab page's figures to the registry. It writes, into the page's folder:

- index.md: the findings table (can this setup show it, by the finding's own rules and
  the numbers behind them; what it measured, with its 95% interval, p after Holm over the
  page's testable findings, the minimum detectable effect, the verdict), the same
  comparisons under other measures (last-3, final, area under the curve), the
  exploratory comparisons nobody declared (unadjusted), and the setup card
  (scripts/results_card.py);
- forest.png: each finding's difference with its interval and per-seed dots, the seed's
  own effect where it gives one, the MDE and equivalence bands;
- lengths.png: the distribution of the stored completions' lengths, in tokens;
- one `grpoctl report` folder per study.

A page whose studies are still running is written all the same: a finding whose arms
have no ended run says "not run", and stays out of the family.

The page file's keys: name, registry, out, studies (the study specs), and optionally
title, intro (markdown), task (a few words, for the plot's title), start (the setup
card's words on the model), not_run (rows for findings no study of the page tests:
claim and why), notes (markdown printed under the exploratory comparisons: what was read
from the registry after the data were seen, with how), regenerate (the command that
remakes everything), testable (rules set on this page in place of a spec's:
analysis/findings.py), reanalysis (an overlay of rules written after the data were
seen: the page then shows each verdict as declared and under the re-analysis, with the
overlay's commit and date) and mechanisms (the section below).

With `mechanisms:`, the page also has a section on what the policy did in each study,
whether or not it agrees with the seed (grpoctl/analysis/mechanisms.py): a table per
study, one row per arm, of each series' mean over the last quarter of each ended run's
steps (mean over seeds ± sd), with entropy and length also at step 1; drift (ratio max
and min, clip fraction) only for a study where some run moved off-policy. Its keys, both
optional: `series` (metric names of grpoctl/metrics.py, `train/accuracy/L*` for each
level's sampled accuracy; default mechanisms.SERIES) and `level_plots` (studies of the
page whose report also draws each level's sampled accuracy, one panel a level: every lab
run records levels 1-5, so the figure is drawn only where a study is about them).
`mechanisms: {}` takes the defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grpoctl, whatever is installed

sys.path.insert(0, str(Path(__file__).resolve().parent))  # results_card, beside this script

from results_card import setup_card  # noqa: E402

from grpoctl import metrics  # noqa: E402
from grpoctl.analysis import findings as F  # noqa: E402
from grpoctl.analysis import mechanisms, stats, verdicts  # noqa: E402
from grpoctl.analysis.compare import build_compare_table, family_results  # noqa: E402
from grpoctl.analysis.testability import PAIR_RULES, PERCENT_RULES  # noqa: E402
from grpoctl.errors import UserError  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402
from grpoctl.spec_file import read_spec  # noqa: E402
from grpoctl.views.report_plots import save_figure  # noqa: E402

PAGE_KEYS = {
    "name",
    "registry",
    "out",
    "studies",
    "title",
    "intro",
    "task",
    "start",
    "not_run",
    "notes",
    "regenerate",
    "testable",
    "reanalysis",
    "mechanisms",
}
MECHANISM_KEYS = {"series", "level_plots"}


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


COUNTS = ("steps", *F.axes.UNITS.values())  # a speed measure's axis units, shown to one decimal


def amount(f: F.Finding, x: float) -> str:
    """A difference in the finding's unit: accuracy (and reward) in points, steps, a grad norm."""
    if f.unit == "grad norm":
        return f"{x:+.3f}"
    if f.unit in COUNTS:
        return f"{x:+.1f} {f.unit}"
    if f.unit not in F.POINT_UNITS:  # a series in its own unit
        return f"{x:+.3g} {f.unit}"
    return f"{pts(x)} pts"


def interval(f: F.Finding, low: float, high: float) -> str:
    if f.unit == "grad norm":
        return f"[{low:+.3f}, {high:+.3f}]"
    if f.unit in COUNTS:
        return f"[{low:+.1f}, {high:+.1f}]"
    if f.unit not in F.POINT_UNITS:
        return f"[{low:+.3g}, {high:+.3g}]"
    return f"[{pts(low)}, {pts(high)}]"


def size(f: F.Finding, x: float) -> str:
    """An unsigned size (an MDE) in the finding's unit."""
    if f.unit == "grad norm":
        return f"{x:.3f}"
    if f.unit in COUNTS:
        return f"{x:.1f}"
    return f"{x:.3g}" if f.unit not in F.POINT_UNITS else f"{100 * x:.1f}"


def pvalue(p: float | None) -> str:
    return "" if p is None else ("<0.001" if p < 0.001 else f"{p:.3g}")


def _rule_value(rule, value: float) -> str:
    return f"{100 * value:.1f}%" if rule.rule in PERCENT_RULES else f"{value:.3f}"


def check_text(c) -> str:
    """ "groups with mixed rewards at step 1 72.0% (worst arm; needs >= 20%)"."""
    rule = c.rule
    if c.value is None:
        return f"{rule.label} not measured"
    if c.short_gain is not None:
        return (
            f"{rule.label}: a final gain of {100 * c.short_gain:.1f} pts (worst seed, {rule.arms}; needs a "
            f"gain >= {100 * (rule.min_gain or 0):g} pts)"
        )
    percent = rule.rule in PERCENT_RULES
    bound = rule.at_least if rule.at_least is not None else rule.at_most
    sign = ">=" if rule.at_least is not None else "<="
    limit = f"{100 * bound:g}%" if percent else f"{bound:g}"
    where = {"every_arm": "worst arm", "baseline": "baseline", "variant": "variant"}[rule.arms]
    if rule.rule in PAIR_RULES:
        where = "worst seed"
    elif rule.arms != "every_arm" or len(c.per_arm) > 1:
        where = f"worst seed, {where}"
    per_arm = ""
    if rule.arms == "every_arm" and len(set(round(v, 4) for v in c.per_arm.values())) > 1:
        per_arm = "; " + ", ".join(f"{k} {_rule_value(rule, v)}" for k, v in c.per_arm.items())
    return f"{rule.label} {_rule_value(rule, c.value)} ({where}; needs {sign} {limit}{per_arm})"


def rule_text(r: verdicts.Result, declared: verdicts.Result | None = None) -> str:
    """ "yes: <each rule's number and threshold>", or "**no**: <the failing ones>"; rules
    the declared finding (`declared`) did not have are marked as the re-analysis's."""
    if r.not_run:
        return f"not run yet: {r.note.removeprefix('not run: ')}" if r.note != "not run" else "not run yet"
    if not r.checks or any(c.value is None for c in r.checks):
        return f"unknown: {r.note}"
    if not r.testable and all(c.holds for c in r.checks):  # every rule holds, the measure cannot be read
        return f"**no**: {r.note}"
    own = set(declared.finding.testable) if declared is not None else set(r.finding.testable)

    def text(c) -> str:
        return check_text(c) + ("" if c.rule in own else " [re-analysis]")

    shown = r.checks if r.testable else [c for c in r.checks if not c.holds]
    return f"{'yes' if r.testable else '**no**'}: " + "; ".join(text(c) for c in shown)


def measured_text(r: verdicts.Result) -> str:
    if r.not_run:
        return ""
    text = _measured(r)
    if r.unended:
        text += f" ({r.unended} run{'s' if r.unended > 1 else ''} not ended yet, left out)"
    return text


def _measured(r: verdicts.Result) -> str:
    f = r.finding
    if r.diff is None:
        values = sorted(set(round(v, 4) for v in r.variant_values + r.baseline_values))
        if r.variant_values and len(values) == 1:
            return f"{f.measure_text}: {values[0]:g} in every run of both arms"
        return r.note or "no comparison"
    text = f"{amount(f, r.diff.diff)} ({f.measure_text}"
    if f.measure == "collapse" and f.after_step > 1:
        text += f" from step {f.after_step}"
    if f.curve != F.metrics.EVAL_ACCURACY and f.measure not in ("grad_norm", "series"):
        text += f", on {f.curve}"
    if r.budget is not None:
        text += f", {r.budget[0]:.4g}-{r.budget[1]:.4g} {F.axes.UNITS[f.axis]}"
    text += ")"
    if f.measure == "grad_norm":
        ratio = statistics.fmean(r.variant_values) / statistics.fmean(r.baseline_values)
        text += f", {ratio:.2f}x"
    if r.equivalence is not None:
        margin = f"±{100 * f.delta:g}" if f.unit in F.POINT_UNITS else f.margin
        text += f"; 90% CI {interval(f, r.equivalence.low, r.equivalence.high)} vs {margin}"
        if r.equivalence.outcome:
            text += f", both within ±{100 * f.delta:g} of the ceiling {f.ceiling:g}"
    return text


def test_text(r: verdicts.Result) -> str:
    """The test behind the interval and p, and whether the problems are in it."""
    if not r.test:
        return ""
    text = r.test + (" + TOST" if r.equivalence is not None else "")
    return text + (f"; {r.problem_level}" if r.problem_level else "")


def mde_text(r: verdicts.Result) -> str:
    if r.mde is None:
        return ""
    text = size(r.finding, r.mde)
    if r.mde_family is not None:
        text += f" ({size(r.finding, r.mde_family)} at α/m)"
    return text


def seeds_text(r: verdicts.Result) -> str:
    """Seeds to resolve the observed difference under the test applied (pairs for a paired
    test, per arm for Welch); and the seed's own effect, where it gives one."""
    if r.diff is None or r.seeds_needed is None:
        return ""
    n, capped = r.seeds_needed
    unit = " pairs" if r.choice is not None and r.choice.test in F.paired.PAIRED_TESTS else ""
    text = f"{'>' if capped else ''}{n}{unit}"
    if r.seeds_for_seed_effect is not None:
        m, c = r.seeds_for_seed_effect
        text += f"; for the seed's {amount(r.finding, r.finding.seed_effect)}: {'>' if c else ''}{m}"
    return text


def p_text(r: verdicts.Result) -> str:
    if r.p_family is not None:
        return pvalue(r.p_family)
    if r.equivalence is not None and r.equivalence.outcome:
        return "at the ceiling: not in the family"
    if r.p is not None:
        return f"not in the family (raw {pvalue(r.p)})"
    return ""


def _signs(r: verdicts.Result) -> dict[str, str]:
    """Per robustness measure: "+" / "-" where its 95% interval excludes 0, else "0"."""
    out = {}
    for name in ("last-3", "final", "AUC"):
        choice = r.robustness.get(name)
        d = choice.difference if choice is not None else None
        if d is not None:
            out[name] = ("+" if d.diff > 0 else "-") if (d.low > 0 or d.high < 0) else "0"
    return out


def robust_text(r: verdicts.Result) -> str:
    signs = _signs(r)
    if not signs:
        return ""
    text = " / ".join(signs.values())
    return f"yes ({text})" if len(set(signs.values())) == 1 else f"**no** ({text})"


def findings_table(
    results: list[verdicts.Result],
    not_run: list[dict] | None = None,
    reports: set | None = None,
    declared: list[verdicts.Result] | None = None,
) -> list[str]:
    """`reports`: the studies with a report folder to link (default: every study).
    `declared`: the same findings as declared, beside `results` under a re-analysis: the
    table then has both verdicts, and both families' p."""
    both = declared is not None
    head = (
        "| Seed's finding | Study: variant vs baseline | Can this setup show it? | What it measured | 95% CI | Test "
        + ("| p (page Holm: declared / re-analysis) " if both else "| p (page Holm) ")
        + "| MDE, pts | Seeds needed | Robust? (last-3, final, AUC) | "
        + ("Verdict as declared | Verdict, re-analysis |" if both else "Verdict |")
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, r in enumerate(results):
        f = r.finding
        old = declared[i] if declared is not None else None
        ci = interval(f, r.diff.low, r.diff.high) if r.diff else ""
        study = f"[{f.study}]({f.study}/report.md)" if reports is None or f.study in reports else f.study
        where = f"{study}: `{f.variant}` vs `{r.baseline or f.baseline}`"
        p = f"{p_text(old) or '-'} / {p_text(r) or '-'}" if old is not None else p_text(r)
        verdicts = f"**{old.verdict}** | **{r.verdict}**" if old is not None else f"**{r.verdict}**"
        lines.append(
            f"| {f.claim} | {where} | {rule_text(r, old)} | {measured_text(r)} | {ci} | {test_text(r)} | {p} "
            f"| {mde_text(r)} | {seeds_text(r)} | {robust_text(r)} | {verdicts} |"
        )
    for row in not_run or []:  # findings no study of the page tests, with the page's reason
        blank = "| " * (8 if both else 7)
        verdict = "**not run** | **not run**" if both else "**not run**"
        lines.append(f"| {row['claim']} | none: not run | no: {row['why']} {blank}| {verdict} |")
    return lines


def robustness_table(results: list[verdicts.Result]) -> list[str]:
    lines = [
        "| Finding | last-3 mean | final eval | area under the curve | the three agree? | test |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if not r.robustness:
            continue
        cells, signs, tests = [], set(), []
        for name in ("last-3", "final", "AUC"):
            choice = r.robustness.get(name)
            d = choice.difference if choice is not None else None
            if choice is None or d is None:
                cells.append("")
                continue
            tests.append(choice.name.split(",")[0])
            resolved = d.low > 0 or d.high < 0
            signs.add(("+" if d.diff > 0 else "-") if resolved else "0")
            cells.append(f"{pts(d.diff)} [{pts(d.low)}, {pts(d.high)}]" + (" *" if resolved else ""))
        agree = "yes" if len(signs) == 1 else "**no**: " + ", ".join(sorted(signs))
        lines.append(f"| `{r.finding.id}` | " + " | ".join(cells) + f" | {agree} | {', '.join(dict.fromkeys(tests))} |")
    return lines


def exploratory(tables: dict, results: list[verdicts.Result]) -> list[str]:
    declared = {(r.finding.study, r.finding.variant) for r in results}
    lines = [
        "| Study: variant vs baseline | Δ last-3 mean | 95% CI | p (unadjusted) | test | MDE, pts |",
        "|---|---|---|---|---|---|",
    ]
    for study, table in tables.items():
        if table.versus is None:
            continue
        for v in table.versus.rows:
            if v.verdict == "baseline" or (study, v.label) in declared or v.diff is None:
                continue
            d = v.diff
            mde = f"{100 * v.mde:.1f}" if v.mde is not None else ""
            lines.append(
                f"| [{study}]({study}/report.md): `{v.label}` vs `{table.versus.baseline}` | {pts(d.diff)} pts "
                f"| [{pts(d.low)}, {pts(d.high)}] | {pvalue(d.p)} | {v.test} | {mde} |"
            )
    return lines


# --------------------------------------------------------------------------- the mechanisms


def _cell(name: str, c: mechanisms.Cell | None, seeds: int) -> str:
    """ "0.243 ± 0.011": a length to one decimal, anything else (shares, nats, norms, ratios)
    to 3 significant digits and its sd to 2, so that a clip fraction of 0.0004 is not 0."""
    if c is None:
        return ""
    tokens = metrics.TABLE[name].unit == "tokens"
    text = f"{c.mean:.1f}" if tokens else f"{c.mean:.3g}"
    if c.sd is not None:
        text += f" ± {c.sd:.1f}" if tokens else f" ± {c.sd:.2g}"
    return text + (f" ({c.seeds} of {seeds} runs)" if c.seeds < seeds else "")


def _short(name: str) -> str:
    """`token_entropy` of `train/token_entropy`: the family is the same in every column."""
    return name.split("/", 1)[1]


def mechanism_table(m: mechanisms.StudyMechanism, window: tuple[int, int]) -> list[str]:
    """One row per arm: its ended runs, then each series (at step 1 too, for AT_START)."""
    head = ["arm", "runs"]
    for name in m.series:
        if name in mechanisms.AT_START:
            head.append(f"{_short(name)}, step 1")
        head.append(f"{_short(name)}, end" if name in mechanisms.AT_START else _short(name))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in m.arms:
        other = sorted({w for w in arm.windows if w != window})
        label = f"`{arm.label}`" + (f" (ended early: steps {', '.join(f'{a}-{b}' for a, b in other)})" if other else "")
        cells = [label, str(arm.seeds)]
        for name in m.series:
            if name in mechanisms.AT_START:
                cells.append(_cell(name, arm.start.get(name), arm.seeds))
            cells.append(_cell(name, arm.end.get(name), arm.seeds))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


MECHANISMS_HOW = (
    "What the policy did in each study, measured whether or not it agrees with the seed: each arm's per-step "
    "train series at the end of its runs, over the last quarter of each run's steps (the heading gives them), "
    "as the mean over its ended runs (finished or diverged; runs still going are left out) of each run's mean "
    "over those steps, ± their sd. Entropy and length are also given at step 1, the rollouts of the policy as "
    "it started. Drift (ratio max, ratio min, clip fraction) is shown only for a study where some run moved "
    "off-policy (a ratio pi/pi_old more than {tolerance:g} from 1); the sampled train accuracy of each level "
    "(`accuracy/L<n>`) for each level the study's runs drew. The curves are in each study's report."
)


def pending_words(pending: int) -> str:
    """How the Holm family counts the findings not run yet (analysis/verdicts.py: at p = 1)."""
    if not pending:
        return ""
    return (
        f", and the {pending} not run yet, each counted at p = 1 until it runs, so that a p here can only fall "
        "as the round goes on"
    )


def declared_members(spec_path: Path) -> int | None:
    """How many runs a study spec declares (variants x seeds), or None where its seeds are
    not listed (`--seeds auto`)."""
    spec = read_spec(spec_path)
    seeds = spec.get("seeds")
    return len(spec.get("variants") or {}) * len(seeds) if isinstance(seeds, list) else None


def mechanisms_section(
    registry: Registry,
    tables: dict,
    studies: list[str],
    series: list[str],
    reports: set | None = None,
    declared: dict[str, int | None] | None = None,
) -> list[str]:
    """The page's `mechanisms:` section: each study's arms on `series` (analysis/mechanisms.py),
    once every run its spec declares has ended (`declared`: runs per study), as the
    findings wait for every seed: nothing is read off part of a study."""
    lines = ["## Mechanisms: what the policy did", "", MECHANISMS_HOW.format(tolerance=mechanisms.OFF_POLICY_TOLERANCE)]
    for study in studies:
        wanted = (declared or {}).get(study)
        ended = sum(rd.run.status in F.ENDED for row in tables[study].rows for rd in row.runs) if study in tables else 0
        if wanted is not None and 0 < ended < wanted:
            lines += ["", f"### {study}", "", f"Running: {ended} of its {wanted} runs have ended; shown once all have."]
            continue
        m = mechanisms.study_mechanism(registry, tables[study], series) if study in tables else None
        if m is None:
            going = sum(len(row.runs) for row in tables[study].rows) if study in tables else 0
            going_text = f" ({going} run{'s' if going > 1 else ''} not ended yet)" if going else ""
            lines += ["", f"### {study}", "", f"Not run yet{going_text}."]
            continue
        name = f"[{study}]({study}/report.md)" if reports is None or study in reports else study
        window = Counter(w for arm in m.arms for w in arm.windows).most_common(1)[0][0]
        lines += ["", f"### {study}: steps {window[0]}-{window[1]} (the last quarter), and step 1", ""]
        said = [f"{name}: {sum(arm.seeds for arm in m.arms)} ended runs"]
        if m.unended:
            said.append(f"{m.unended} not ended yet, left out")
        if not m.off_policy:
            said.append(f"on-policy throughout (every ratio within {mechanisms.OFF_POLICY_TOLERANCE:g} of 1)")
        lines += ["; ".join(said) + ".", "", *mechanism_table(m, window)]
    return [*lines, ""]


# --------------------------------------------------------------------------- the re-analysis


def committed(path: Path) -> str:
    """ "`abc1234` of 2026-12-05": the last commit that changed `path`, and its date; said
    plainly when it was never committed or has changed since."""
    where = path.resolve()

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(where.parent), *args], capture_output=True, text=True, timeout=30, check=False
            )
        except OSError:
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    last = git("log", "-1", "--format=%h %cs", "--", where.name)
    if not last:
        return "not committed yet"
    commit, date = last.split()
    changed = git("status", "--porcelain", "--", where.name)
    return f"commit `{commit}` of {date}" + (", with changes not committed since" if changed else "")


def reanalysis_section(
    overlay: F.Reanalysis, results: list[verdicts.Result], declared: list[verdicts.Result]
) -> list[str]:
    """What the re-analysis adds and when it was written, and every verdict it changes."""
    rel = os.path.relpath(overlay.path.resolve(), Path(__file__).resolve().parents[1])
    lines = [
        "## The re-analysis",
        "",
        f"The last verdict column applies `{rel}` ({committed(overlay.path)}), written after these runs were seen. "
        "The specs stay as they were declared and ran; the overlay only adds rules (marked [re-analysis] in the "
        "table)"
        + (" and declares ceilings" if any("ceiling" in e for e in overlay.by_finding.values()) else "")
        + ", each finding is measured on the same runs, and its Holm family is the "
        f"findings testable under it. {overlay.why}",
        "",
    ]
    for measure, rules in overlay.by_measure.items():
        lines.append(f"- every `{measure}` finding: " + "; ".join(rule.describe() for rule in rules))
    for fid, entry in overlay.by_finding.items():
        said = [rule.describe() for rule in entry.get("testable", ())]
        said += [f"{key} {entry[key]:g}" for key in ("min_effect", "ceiling") if key in entry]
        lines.append(f"- `{fid}`: " + "; ".join(said))
    changed = [(old, new) for old, new in zip(declared, results, strict=True) if old.verdict != new.verdict]
    lines += ["", f"Verdicts the re-analysis changes: {len(changed)} of {len(results)}.", ""]
    if changed:
        lines += ["| Finding | as declared | re-analysis | why |", "|---|---|---|---|"]
        for old, new in changed:
            lines.append(f"| `{new.finding.id}` | {old.verdict} | {new.verdict} | {_why(old, new)} |")
        lines.append("")
    return lines


def _why(old: verdicts.Result, new: verdicts.Result) -> str:
    """The rule or declaration behind a changed verdict."""
    added = [c for c in new.checks if c.rule not in old.finding.testable and not c.holds]
    if added:
        return "; ".join(check_text(c) for c in added)
    if new.equivalence is not None and new.equivalence.outcome:
        return f"both arms within ±{100 * new.finding.delta:g} pts of the ceiling {new.finding.ceiling:g}"
    return "the re-analysis family's Holm correction"


# --------------------------------------------------------------------------- the forest plot


def forest(results: list[verdicts.Result], path: Path, task: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = [r for r in results if r.finding.unit in ("accuracy", "reward") and (r.diff is not None or r.variant_values)]
    grad = [r for r in results if r.finding.unit == "grad norm" and r.diff is not None]
    steps = [r for r in results if r.finding.unit == "steps" and r.diff is not None]
    # one panel per unit that has a measured finding (a partial page may have no grad norm yet): these
    # three, then the compute axes' counts and the series' own units, in the order the findings name them
    others = dict.fromkeys(
        r.finding.unit for r in results if r.finding.unit not in (*F.POINT_UNITS, "grad norm", "steps")
    )
    other_panels = [([r for r in results if r.finding.unit == u and r.diff is not None], 1, u) for u in others]
    other_panels = [panel for panel in other_panels if panel[0]]
    panels = [
        (rows, scale, unit)
        for rows, scale, unit in ((acc, 100, "accuracy points"), (grad, 1, "grad norm"), (steps, 1, "steps"))
        if rows
    ] + other_panels
    panels = panels or [(acc, 100, "accuracy points")]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(10, 0.55 * sum(max(len(rows), 1) for rows, _, _ in panels) + 1.6 + 1.2 * len(panels)),
        dpi=120,
        height_ratios=[max(len(rows), 1) for rows, _, _ in panels],
        gridspec_kw={"hspace": 0.35},
        squeeze=False,
    )
    axes = axes[:, 0]
    for ax, (rows, scale, unit) in zip(axes, panels, strict=True):
        for y, r in enumerate(reversed(rows)):
            f = r.finding
            color = "black" if r.testable else "0.6"
            if r.mde is not None:
                ax.fill_betweenx(
                    [y - 0.4, y + 0.4], -scale * r.mde, scale * r.mde, color="tab:orange", alpha=0.13, lw=0
                )
            if f.expect == "same":
                ax.fill_betweenx(
                    [y - 0.4, y + 0.4], -scale * f.delta, scale * f.delta, color="tab:green", alpha=0.22, lw=0
                )
            base = statistics.fmean(r.baseline_values)
            dots = [scale * (v - base) for v in r.variant_values]
            ax.scatter(dots, [y + 0.18] * len(dots), s=14, color=color, alpha=0.7, zorder=3, marker="o")
            if r.diff is not None:  # else every run of both arms measured the same: dots only
                ax.plot([scale * r.diff.low, scale * r.diff.high], [y, y], color=color, lw=2, zorder=4)
                ax.scatter([scale * r.diff.diff], [y], s=40, color=color, zorder=5, marker="D")
            if f.seed_effect is not None:
                ax.scatter([scale * f.seed_effect], [y], s=90, color="tab:red", marker="*", zorder=6)
            ax.text(1.01, y, r.verdict, transform=ax.get_yaxis_transform(), va="center", fontsize=7.5)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{r.finding.id}\n({r.finding.measure_text})" for r in reversed(rows)], fontsize=7.5)
        ax.axvline(0, color="0.3", lw=0.8)
        ax.set_xlabel(f"variant minus baseline ({unit})")
        ax.grid(axis="x", alpha=0.3)
        ax.set_ylim(-0.7, len(rows) - 0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    legend = [
        Line2D([], [], color="black", marker="D", lw=2, label="difference, 95% CI (its test: the page's table)"),
        Line2D([], [], color="black", marker="o", lw=0, alpha=0.7, label="each seed minus the baseline's mean"),
        Line2D([], [], color="tab:red", marker="*", lw=0, markersize=11, label="the seed's own effect"),
        Patch(color="tab:orange", alpha=0.25, label="± MDE at these seeds (α 0.05, power 0.8)"),
        Patch(color="tab:green", alpha=0.35, label="± δ, the equivalence margin"),
        Line2D([], [], color="0.6", marker="D", lw=2, label="grey: not testable by its rule"),
    ]
    axes[0].legend(handles=legend, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=3, frameon=False)
    title = f"The seed's findings on {task}: effect, interval, seeds"
    waiting = sum(r.not_run for r in results)
    if waiting:
        title += f" ({len(results) - waiting} of {len(results)} findings have run)"
    axes[0].set_title(title, loc="left", fontsize=11, pad=38)
    save_figure(fig, path, bbox_inches="tight")
    plt.close(fig)


# --------------------------------------------------------------------------- main


def read_page(path: Path) -> dict:
    """The page file, its keys checked: one line for the first problem."""
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read the page file {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise UserError(f"{path}: a page file is a mapping (name, registry, out, studies, ...)")
    unknown = sorted(set(map(str, spec)) - PAGE_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(PAGE_KEYS))})")
    for key in ("name", "registry", "out", "studies"):
        if key not in spec:
            raise UserError(f"{path}: missing '{key}'")
    for i, row in enumerate(spec.get("not_run") or []):
        if not isinstance(row, dict) or set(row) != {"claim", "why"}:
            raise UserError(f"{path}: not_run: row {i + 1} must have exactly 'claim' and 'why'")
    if "mechanisms" in spec:
        spec["mechanisms"] = read_mechanisms(spec["mechanisms"], path)
    return spec


def read_mechanisms(value, path: Path) -> dict:
    """The page's `mechanisms:` (empty, or a mapping of series and level_plots), defaults
    filled in: {"series": [metric names], "level_plots": [study names]}."""
    value = {} if value is None else value
    if not isinstance(value, dict) or set(map(str, value)) - MECHANISM_KEYS:
        raise UserError(f"{path}: mechanisms: a mapping of {' and '.join(sorted(MECHANISM_KEYS))}, or empty")
    lists = {key: value.get(key) for key in MECHANISM_KEYS if value.get(key) is not None}
    for key, names in lists.items():
        if not isinstance(names, list):
            raise UserError(f"{path}: mechanisms: {key} is a list")
    series = mechanisms.check_series(lists.get("series", mechanisms.SERIES), f"{path}: mechanisms: series")
    return {"series": series, "level_plots": [str(study) for study in lists.get("level_plots", [])]}


HOW_TO_READ = [
    "How to read it:",
    "",
    "- **Can this setup show it?** The finding's rules, evaluated on the runs (each number at its worst case, "
    "and its threshold). A finding that fails a rule gets no verdict and stays out of the Holm family; one whose "
    'arms have no ended run yet says "not run yet".',
    "- **What it measured:** variant minus baseline on the finding's own measure (the mean of the last 3 evals "
    'for a plateau, the lowest eval after warm-up for "collapses", best minus final for "peaks then '
    'declines", the area under the curve, the mean per-step grad norm), with its 95% interval.',
    "- **Test:** the test the design allows, behind the interval and p: arms run with the same seeds are paired "
    "seed by seed (paired t over the per-seed differences), and where the runs recorded which problems they got "
    "right the interval also covers the problems (a problem bootstrap of the same problems in both arms, "
    'Satterthwaite df); "problem level: not recorded" says the registry holds no per-problem outcomes, so the '
    "interval covers the seeds only. Seeds that do not match get Welch's t.",
    "- **p (page Holm):** Holm's correction over the page's {family}{pending} (TOST "
    "for equivalence, on the same difference). Comparisons nobody declared are listed below as exploratory, "
    "unadjusted.",
    "- **MDE:** the smallest difference these seeds detect under the test applied at α 0.05 with power 0.8 "
    '(noncentral t), and in brackets at α/m, Holm\'s first step over the family{mde_family}. A "not resolved" '
    "below it says little.",
    "- **Seeds needed:** to resolve the observed difference under the test applied (pairs of seeds for a paired "
    "test, per arm for Welch); and the seed's own effect, where it gives one. **Verdict:** reproduced / "
    "contradicted (resolved, in the other direction) / not reproduced (not resolved, and the 95% interval lies "
    "wholly short of the seed's own effect or a declared minimum) / inconclusive (neither); for \"does not "
    'matter", equivalence by TOST within ±δ ({delta:g} points by default), or "both at ceiling" when both '
    "arms sit within δ of the measure's ceiling, where no difference of δ fits.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="the page file (experiments/pages/addition.yaml)")
    parser.add_argument("--db", help="the registry (default: the page's)")
    parser.add_argument("--out", help="the page's folder (default: the page's)")
    parser.add_argument("--no-reports", action="store_true", help="skip the per-study reports")
    args = parser.parse_args()
    try:
        return write_page(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def write_page(args) -> int:
    start = time.monotonic()
    page = Path(args.page)
    spec = read_page(page)
    # paths as the page file names them, relative to here when they can be: the reports print the registry's
    db = args.db or os.path.relpath((page.parent / spec["registry"]).resolve())
    out = Path(args.out or os.path.relpath((page.parent / spec["out"]).resolve()))
    declared = F.family_findings(page)
    # each study once: its name, and the runs its spec declares (the mechanisms section waits for them)
    members = {F.read_findings(p)[0]: declared_members(p) for p in F.family_specs(page)}
    studies = list(members)
    for study in spec["mechanisms"]["level_plots"] if "mechanisms" in spec else []:
        if study not in studies:
            raise UserError(
                f"{page}: mechanisms: level_plots: {study!r} is no study of this page ({', '.join(studies)})"
            )
    if not Path(db).is_file() and "://" not in db:
        raise UserError(f"no registry at {db}")
    out.mkdir(parents=True, exist_ok=True)

    with Registry(db, readonly=True) as registry:
        tables, waiting = {}, []
        for study in studies:
            try:
                tables[study] = build_compare_table(registry, [study])
            except UserError:  # not recorded yet: its findings say "not run"
                waiting.append(study)
        if waiting:
            print(f"not run yet: {', '.join(waiting)}", file=sys.stderr)
        results, tables = family_results(registry, declared, tables)
        overlay = F.read_reanalysis(page.parent / spec["reanalysis"]) if spec.get("reanalysis") else None
        as_declared = None
        if overlay is not None:  # the same runs and tables, the overlay's rules added: a family of its own
            as_declared = results
            results, _ = family_results(registry, F.reanalysed(declared, overlay), tables)
        if not args.no_reports:
            from grpoctl.views.report_view import write_report

            level_plots = set(spec["mechanisms"]["level_plots"]) if "mechanisms" in spec else set()
            for study in tables:  # the page's one family
                write_report(registry, study, out / study, level_accuracy=study in level_plots, findings=str(page))
        mechanism_lines = []
        if "mechanisms" in spec:
            reports = set(tables) if not args.no_reports else None
            mechanism_lines = mechanisms_section(
                registry, tables, studies, spec["mechanisms"]["series"], reports, members
            )
        card = setup_card(registry, tables, out, spec)
    forest(results, out / "forest.png", str(spec.get("task") or spec["name"]))

    tested = sum(r.p_family is not None for r in results)
    # with a re-analysis the rules, MDE and seeds columns are its own; each family gives its p
    tested_declared = sum(r.p_family is not None for r in as_declared) if as_declared else None
    ran = sum(not r.not_run for r in results)
    runs = {rd.run.id for t in tables.values() for r in t.rows for rd in r.runs}
    title = spec.get("title") or f"What the seed's findings say here: {spec['name']}"
    intro = str(spec.get("intro") or "").strip()
    notes = str(spec.get("notes") or "").strip()
    counted = (
        f"{len(runs)} distinct runs in `{spec['registry'].removeprefix('../../')}`; {ran} of the {len(declared)} "
        f"declared findings have ended runs in both arms, {tested} of them testable and tested"
        + (f" under the re-analysis ({tested_declared} as declared)." if tested_declared is not None else ".")
    )
    family = (
        f"testable findings, each family at once: as declared ({tested_declared}) and under the re-analysis "
        f"({tested}), each giving its own p"
        if tested_declared is not None
        else f"{tested} testable findings at once"
    )
    lines = [
        f"# {title}",
        "",
        *([intro, ""] if intro else []),
        counted,
        "",
        *(
            line.format(
                family=family,
                pending=pending_words(len(declared) - ran),
                delta=100 * stats.EQUIVALENCE_DELTA,
                mde_family=" (the re-analysis's, as are the rules and seeds columns)" if as_declared else "",
            )
            for line in HOW_TO_READ
        ),
        "",
        "## Findings",
        "",
        *findings_table(results, spec.get("not_run"), set(tables) if not args.no_reports else None, as_declared),
        "",
        "![forest plot](forest.png)",
        "",
        *(reanalysis_section(overlay, results, as_declared) if overlay is not None and as_declared else []),
        "## The same comparisons under other measures",
        "",
        "Variant minus baseline in accuracy points, with the 95% interval of the test named in the last column; * "
        "marks an interval that excludes 0. A finding whose measures disagree rests on where the curves happen to "
        "be, not on how the runs learned.",
        "",
        *robustness_table(results),
        "",
        *mechanism_lines,
        "## Exploratory: comparisons no finding declared",
        "",
        "Each study's other variants against its baseline, on the last-3 mean. Nothing here was declared, so "
        "nothing here is adjusted or given a verdict: a small p is a lead for a study that declares it.",
        "",
        *exploratory(tables, results),
        "",
        *([notes, ""] if notes else []),
        *card,
        "",
        "## The studies",
        "",
    ]
    for study in studies:
        t = tables.get(study)
        if t is None:
            lines.append(f"- {study}: not run yet")
        else:
            lines.append(
                f"- [{study}]({study}/report.md): {len(t.rows)} variants, {sum(len(r.runs) for r in t.rows)} runs"
            )
    again = spec.get("regenerate") or f"python scripts/results_page.py {page}"
    lines += [
        "",
        f"Regenerate: `python scripts/results_page.py {page}` ({time.monotonic() - start:.0f} s for this page), or "
        f"`{again}` to run what is missing first.",
    ]
    (out / "index.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'index.md'}")
    print("\n".join(findings_table(results, spec.get("not_run"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
