"""Write a results page (docs/results/addition/): the seed's findings that a page file
declares, tested on a registry, with what this setup can and cannot show.

    python scripts/results_page.py experiments/pages/addition.yaml [--db REGISTRY] [--out DIR]

Everything on the page is computed here from the registry and the study specs; nothing
is typed in by hand. It writes, into the page's folder:

- index.md: the findings table (can this setup show it, by the finding's own rule and
  the number behind it; what it measured, with its 95% interval, p after Holm over the
  page's testable findings, the minimum detectable effect, the verdict), the same
  comparisons under other measures (last-3, final, area under the curve), the
  exploratory comparisons nobody declared (unadjusted), and the setup card;
- forest.png: each finding's difference with its interval and per-seed dots, the seed's
  own effect where it gives one, the MDE and equivalence bands;
- lengths.png: the distribution of the stored completions' lengths;
- one `grpoctl report` folder per study.

It succeeds scripts/results_index.py (docs/results/index.md), whose verdicts rested on
one measure for every claim, a Holm family per study and a "+-5 points" rule for "does
not matter" that 3 seeds can hardly meet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grpoctl, whatever is installed

from grpoctl.analysis import findings as F  # noqa: E402
from grpoctl.analysis import stats  # noqa: E402
from grpoctl.analysis.compare import build_compare_table, family_results  # noqa: E402
from grpoctl.errors import UserError  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402

UNITS = {"grad_norm": "grad norm"}  # every other measure is accuracy, shown in points


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def amount(measure: str, x: float) -> str:
    return f"{x:+.3f}" if measure == "grad_norm" else f"{pts(x)} pts"


def interval(measure: str, low: float, high: float) -> str:
    if measure == "grad_norm":
        return f"[{low:+.3f}, {high:+.3f}]"
    return f"[{pts(low)}, {pts(high)}]"


def pvalue(p: float | None) -> str:
    return "" if p is None else ("<0.001" if p < 0.001 else f"{p:.3g}")


def rule_text(r: F.Result) -> str:
    """ "yes: 72% of groups mixed at step 1 (>= 20%, every arm)"."""
    rule = r.finding.testable
    if r.rule_value is None:
        return f"unknown: {r.note}"
    percent = rule.rule in ("mixed_groups_at_start",)
    value = f"{100 * r.rule_value:.1f}%" if percent else f"{r.rule_value:.3f}"
    bound = rule.at_least if rule.at_least is not None else rule.at_most
    sign = ">=" if rule.at_least is not None else "<="
    limit = f"{100 * bound:g}%" if percent else f"{bound:g}"
    where = {"every_arm": "worst arm", "baseline": "baseline", "variant": "variant"}[rule.arms]
    per_arm = ""
    if rule.arms == "every_arm" and len(set(round(v, 4) for v in r.rule_values.values())) > 1:
        per_arm = "; " + ", ".join(
            f"{k} {100 * v:.1f}%" if percent else f"{k} {v:.3f}" for k, v in r.rule_values.items()
        )
    return f"{'yes' if r.testable else '**no**'}: {F.RULES[rule.rule]} {value} ({where}; needs {sign} {limit}{per_arm})"


def measured_text(r: F.Result) -> str:
    f = r.finding
    if r.diff is None:
        values = sorted(set(round(v, 4) for v in r.variant_values + r.baseline_values))
        if r.variant_values and len(values) == 1:
            return f"{F.MEASURES[f.measure]}: {values[0]:g} in every run of both arms"
        return r.note or "no comparison"
    text = f"{amount(f.measure, r.diff.diff)} ({F.MEASURES[f.measure]}"
    if f.measure == "collapse" and f.after_step > 1:
        text += f" from step {f.after_step}"
    text += ")"
    if f.measure == "grad_norm":
        ratio = statistics.fmean(r.variant_values) / statistics.fmean(r.baseline_values)
        text += f", {ratio:.2f}x"
    if r.equivalence is not None:
        text += f"; 90% CI {interval(f.measure, r.equivalence.low, r.equivalence.high)} vs ±{100 * f.delta:g}"
    return text


def mde_text(r: F.Result) -> str:
    if r.mde is None:
        return ""
    unit = (lambda x: f"{x:.3f}") if r.finding.measure == "grad_norm" else (lambda x: f"{100 * x:.1f}")
    text = unit(r.mde)
    if r.mde_family is not None:
        text += f" ({unit(r.mde_family)} at α/m)"
    return text


def seeds_text(r: F.Result) -> str:
    if r.diff is None:
        return ""
    n, capped = stats.seeds_needed(r.diff.diff, stats.pooled_sd(r.variant_values, r.baseline_values))
    text = f">{n}" if capped else str(n)
    if r.seeds_for_seed_effect is not None:
        m, c = r.seeds_for_seed_effect
        text += f"; for the seed's {amount(r.finding.measure, r.finding.seed_effect)}: {'>' if c else ''}{m}"
    return text


def p_text(r: F.Result) -> str:
    if r.p_family is not None:
        kind = "TOST" if r.equivalence is not None else "Welch"
        return f"{pvalue(r.p_family)} ({kind})"
    if r.p is not None:
        return f"not in the family (raw {pvalue(r.p)})"
    return ""


def _signs(r: F.Result) -> dict[str, str]:
    """Per robustness measure: "+" / "-" where its 95% interval excludes 0, else "0"."""
    out = {}
    for name in ("last-3", "final", "AUC"):
        d = r.robustness.get(name)
        if d is not None:
            out[name] = ("+" if d.diff > 0 else "-") if (d.low > 0 or d.high < 0) else "0"
    return out


def robust_text(r: F.Result) -> str:
    signs = _signs(r)
    if not signs:
        return ""
    text = " / ".join(signs.values())
    return f"yes ({text})" if len(set(signs.values())) == 1 else f"**no** ({text})"


def findings_table(results: list[F.Result]) -> list[str]:
    lines = [
        "| Seed's finding | Study: variant vs baseline | Can this setup show it? | What it measured | 95% CI "
        "| p (page Holm) | MDE, pts | Seeds needed | Robust? (last-3, final, AUC) | Verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        f = r.finding
        ci = interval(f.measure, r.diff.low, r.diff.high) if r.diff else ""
        where = f"[{f.study}]({f.study}/report.md): `{f.variant}` vs `{r.baseline}`"
        lines.append(
            f"| {f.claim} | {where} | {rule_text(r)} | {measured_text(r)} | {ci} | {p_text(r)} | {mde_text(r)} "
            f"| {seeds_text(r)} | {robust_text(r)} | **{r.verdict}** |"
        )
    lines.append(
        "| The r1_zero prompt beats question-only. | none: not run | no: the tiny model learns its one answer "
        "format in the warm-start, so a template swap would test the warm-start | | | | | | | **not run** |"
    )
    return lines


def robustness_table(results: list[F.Result]) -> list[str]:
    lines = [
        "| Finding | last-3 mean | final eval | area under the curve | the three agree? |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if not r.robustness:
            continue
        cells, signs = [], set()
        for name in ("last-3", "final", "AUC"):
            d = r.robustness.get(name)
            if d is None:
                cells.append("")
                continue
            resolved = d.low > 0 or d.high < 0
            signs.add(("+" if d.diff > 0 else "-") if resolved else "0")
            cells.append(f"{pts(d.diff)} [{pts(d.low)}, {pts(d.high)}]" + (" *" if resolved else ""))
        agree = "yes" if len(signs) == 1 else "**no**: " + ", ".join(sorted(signs))
        lines.append(f"| `{r.finding.id}` | " + " | ".join(cells) + f" | {agree} |")
    return lines


def exploratory(tables: dict, results: list[F.Result]) -> list[str]:
    declared = {(r.finding.study, r.finding.variant) for r in results}
    lines = [
        "| Study: variant vs baseline | Δ last-3 mean | 95% CI | p (unadjusted) | MDE, pts |",
        "|---|---|---|---|---|",
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
                f"| [{pts(d.low)}, {pts(d.high)}] | {pvalue(d.p)} | {mde} |"
            )
    return lines


# --------------------------------------------------------------------------- the forest plot


def forest(results: list[F.Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = [r for r in results if r.finding.measure != "grad_norm" and (r.diff is not None or r.variant_values)]
    grad = [r for r in results if r.finding.measure == "grad_norm" and r.diff is not None]
    fig, axes = plt.subplots(
        2, 1, figsize=(10, 0.55 * (len(acc) + len(grad)) + 2.6), dpi=120, height_ratios=[len(acc), max(len(grad), 1)]
    )
    for ax, rows, scale, unit in ((axes[0], acc, 100, "accuracy points"), (axes[1], grad, 1, "grad norm")):
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
        ax.set_yticklabels([f"{r.finding.id}\n({F.MEASURES[r.finding.measure]})" for r in reversed(rows)], fontsize=7.5)
        ax.axvline(0, color="0.3", lw=0.8)
        ax.set_xlabel(f"variant minus baseline ({unit})")
        ax.grid(axis="x", alpha=0.3)
        ax.set_ylim(-0.7, len(rows) - 0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    legend = [
        Line2D([], [], color="black", marker="D", lw=2, label="difference, 95% Welch CI"),
        Line2D([], [], color="black", marker="o", lw=0, alpha=0.7, label="each seed minus the baseline's mean"),
        Line2D([], [], color="tab:red", marker="*", lw=0, markersize=11, label="the seed's own effect"),
        Patch(color="tab:orange", alpha=0.25, label="± MDE at these seeds (α 0.05, power 0.8)"),
        Patch(color="tab:green", alpha=0.35, label="± δ, the equivalence margin"),
        Line2D([], [], color="0.6", marker="D", lw=2, label="grey: not testable by its rule"),
    ]
    axes[0].legend(handles=legend, fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=3, frameon=False)
    axes[0].set_title("The seed's findings on tiny addition: effect, interval, seeds", loc="left", fontsize=11, pad=38)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


# --------------------------------------------------------------------------- the setup card


def lengths_plot(groups: dict[str, list[int]], max_tokens: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.4), dpi=120)
    low = min(min(v) for v in groups.values() if v)
    bins = [x - 0.5 for x in range(low - 1, max_tokens + 3)]  # one bar per length, centred on it
    for label, values in sorted(groups.items(), key=lambda kv: int(kv[0].split()[1].split("-")[0])):
        ax.hist(values, bins=bins, alpha=0.55, label=f"{label} ({len(values)} completions)")
    ax.axvline(max_tokens, color="tab:red", lw=1, ls="--", label=f"token limit ({max_tokens})")
    ax.set_xlabel("completion length (bytes = tokens on the tiny model)")
    ax.set_ylabel("stored completions")
    ax.set_title("Response lengths of the stored train completions", loc="left", fontsize=11)
    ax.legend(fontsize=8, frameon=False)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def setup_card(registry, tables: dict, out: Path) -> list[str]:
    rows = {(s, r.label): r for s, t in tables.items() for r in t.rows}
    reference = next(iter(tables.values()))
    base_row = next(r for r in reference.rows if r.label == reference.versus.baseline)
    run = sorted(base_row.runs, key=lambda rd: rd.run.seed)[0].run
    config = json.loads(run.config)
    lines = ["## Setup card", ""]
    lines += [
        f"What every run shares (from `{run.name}`, the default `grpoctl train` config; each study's spec changes "
        "only what it ablates):",
        "",
    ]
    opt, loop, roll, ev = config["optimizer"], config["loop"], config["rollout"], config["eval"]
    lines += [
        f"- **Schedule:** {loop['n_grpo_steps']} GRPO steps of {roll['rollout_batch_size']} rollouts "
        f"({roll['rollout_batch_size'] // roll['group_size']} prompts x {roll['group_size']}); lr {opt['lr']:g}, "
        f"{opt['warmup_steps']} optimizer steps of linear warm-up, then {opt['lr_schedule']} decay to "
        f"{opt['min_lr_ratio']:g}x; AdamW betas {opt['betas']}, grad clip {opt['max_grad_norm']:g}; sampling "
        f"temperature {roll['temperature']:g}, {roll['min_tokens']}-{roll['max_tokens']} new tokens; "
        f"{'greedy' if ev['greedy'] else 'sampled'} eval on {ev['subset']} held-out problems every {ev['every']} steps "
        "and before training.",
    ]
    ws = config["model"]["warmstart"]
    starts = []
    for (study, _label), row in rows.items():
        if study != "tiny-sft-init":
            continue
        first = [rd.evals[0][1] for rd in row.runs if rd.evals and rd.evals[0][0] == 0]
        path = json.loads(row.runs[0].run.config)["model"]["path"]
        if first:
            starts.append(f"`{path}` {statistics.fmean(first):.3f}")
    lines.append(
        f"- **Warm-start:** `model.path: {config['model']['path']}`, the tiny model's own supervised run on worked "
        f"solutions (up to {ws['steps']} steps, batch {ws['batch_size']}, lr {ws['lr']:g}, stopped at a probe "
        f"accuracy of {ws['target_accuracy']:g}; checkpoints kept at steps {ws['save_steps']}). Eval accuracy before "
        "GRPO, per start: " + ", ".join(dict.fromkeys(starts)) + "."
    )
    # completions at the start and the end
    lines += ["", f"Sample completions of `{run.name}` (train rollouts as stored; reward after the arrow):", ""]
    for step in (1, run.last_step):
        samples = registry.samples(run.id, step=step, kind="train")[:3]
        lines.append(f"- step {step}:")
        for s in samples:
            text = (s.prompt + s.response).replace("\n", "⏎")
            lines.append(f"  - `{text}` → {s.reward:g} (truth {s.ground_truth})")
    # lengths
    stored: dict[str, list[int]] = defaultdict(list)
    for rd in base_row.runs:
        for s in registry.samples(rd.run.id, kind="train"):
            when = (
                "steps 1-10"
                if s.step <= 10
                else (f"steps {run.last_step - 9}-{run.last_step}" if s.step > run.last_step - 10 else None)
            )
            if when:
                stored[when].append(len(s.response.encode()))
    every = [n for v in stored.values() for n in v]
    lengths_plot(dict(stored), roll["max_tokens"], out / "lengths.png")
    mean_len = statistics.fmean(every)
    lines += [
        "",
        f"- **Response lengths** (stored completions of `{base_row.label}`, {len(every)} of them): "
        f"{min(every)}-{max(every)} bytes, median {statistics.median(every):g}, sd/mean "
        f"{statistics.stdev(every) / mean_len:.3f}, against a limit of {roll['max_tokens']} tokens. With every "
        f"response within a few bytes of {mean_len:.0f}, the per-sequence length normalizations are one "
        "operation: the length-normalization study is an A/A test here, and its rules say so.",
        "",
        "![response lengths](lengths.png)",
        "",
    ]
    # health flags that cannot fire here
    early = mean_len
    lines.append(
        f"- **Health flags on this setup:** length blow-up by its 3x route needs {3 * early:.0f} tokens, past the "
        f"{roll['max_tokens']}-token limit, so only its cut-off route (over half the responses at the limit) can "
        f"fire; length collapse needs responses under {0.4 * early:.0f} tokens (min_tokens is {roll['min_tokens']}). "
        "Every flag's definition is in each study's report, under Health."
    )
    # code commits: every run once, then each study's own mix (shared runs count in each study)
    everyone: dict[str, set[int]] = defaultdict(set)
    for t in tables.values():
        for r in t.rows:
            for rd in r.runs:
                everyone[rd.run.git_commit or "unknown"].add(rd.run.id)
    lines += ["", "- **Code commit of every run** (the `git_commit` each run recorded):", ""]
    for commit, ids in everyone.items():
        lines.append(f"  - `{commit[:12]}`: {len(ids)} runs")
    if len(everyone) > 1:
        lines += ["", f"  **These runs came from {len(everyone)} different commits.** Study by study:", ""]
        for study, t in tables.items():
            by_commit: dict[str, list[str]] = defaultdict(list)
            for r in t.rows:
                for commit in dict.fromkeys(rd.run.git_commit or "unknown" for rd in r.runs):
                    n = sum((rd.run.git_commit or "unknown") == commit for rd in r.runs)
                    by_commit[commit].append(f"{r.label} ({n})")
            if len(by_commit) == 1:
                lines.append(f"  - {study}: every run from `{next(iter(by_commit))[:12]}`.")
            else:
                parts = "; ".join(f"`{c[:12]}`: {', '.join(v)}" for c, v in by_commit.items())
                lines.append(f"  - {study}: **its comparisons are across commits**: {parts}.")
    return lines


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="the page file (experiments/pages/addition.yaml)")
    parser.add_argument("--db", help="the registry (default: the page's)")
    parser.add_argument("--out", help="the page's folder (default: the page's)")
    parser.add_argument("--no-reports", action="store_true", help="skip the per-study reports")
    args = parser.parse_args()
    start = time.monotonic()
    page = Path(args.page)
    spec = yaml.safe_load(page.read_text())
    # paths as the page file names them, relative to here when they can be: the reports print the registry's
    db = args.db or os.path.relpath((page.parent / spec["registry"]).resolve())
    out = Path(args.out or os.path.relpath((page.parent / spec["out"]).resolve()))
    out.mkdir(parents=True, exist_ok=True)
    declared = [f for path in F.family_specs(page) for f in F.read_findings(path)[1]]
    studies = list(dict.fromkeys(F.read_findings(p)[0] for p in F.family_specs(page)))

    with Registry(db, readonly=True) as registry:
        tables = {}
        for study in studies:
            try:
                tables[study] = build_compare_table(registry, [study])
            except UserError as exc:
                print(f"warning: {study}: {exc}", file=sys.stderr)
        results, tables = family_results(registry, declared, tables)
        if not args.no_reports:
            from grpoctl.cli.report_view import write_report

            for study in tables:
                write_report(registry, study, out / study, findings=str(page))  # the page's one family
        card = setup_card(registry, tables, out)
    forest(results, out / "forest.png")

    tested = sum(r.p_family is not None for r in results)
    runs = {rd.run.id for t in tables.values() for r in t.rows for rd in r.runs}
    lines = [
        f"# What the tiny suite can and cannot say about the seed's findings: {spec['name']}",
        "",
        "Each finding of the seed's GRPO ablations (Qwen2.5-Math-1.5B on MATH) is declared in a tiny study's spec "
        'in `experiments/`: its measure, its expected direction, for "does not matter" claims a margin δ, and a '
        "rule, with a threshold, for whether this setup can show it at all. This page only reads those "
        "declarations; nothing on it is judged afterwards. For these six studies, though, the declarations were "
        "written after the runs (from issue 18, which had seen an earlier page's numbers): they are fixed rules, "
        "not a pre-registration. A study declared before it runs earns the stronger reading. The tiny model "
        "trains on 2-digit addition, 60 GRPO steps, 3 seeds per variant, "
        f"{len(runs)} distinct runs in `docs/results/registry.db`.",
        "",
        "How to read it:",
        "",
        "- **Can this setup show it?** The finding's rule, evaluated on the runs (the number and its threshold). "
        "A finding that fails its rule gets no verdict and stays out of the Holm family.",
        "- **What it measured:** variant minus baseline on the finding's own measure (the mean of the last 3 evals "
        'for a plateau, the lowest eval after warm-up for "collapses", best minus final for "peaks then '
        "declines\", the mean per-step grad norm), with Welch's 95% interval over seeds.",
        f"- **p (page Holm):** Holm's correction over the page's {tested} testable findings at once "
        "(Welch's t for a direction, TOST for equivalence). Comparisons nobody declared are listed below as "
        "exploratory, unadjusted.",
        "- **MDE:** the smallest difference these seeds detect at α 0.05 with power 0.8 (noncentral t), and in "
        'brackets at α/m, Holm\'s first step over the family. A "not resolved" below it says little.',
        "- **Seeds needed:** per arm, to resolve the observed difference; and the seed's own effect, where it gives "
        "one. **Verdict:** reproduced / contradicted (resolved, in the other direction) / inconclusive; for "
        f'"does not matter", equivalence by TOST within ±δ ({100 * stats.EQUIVALENCE_DELTA:g} points by default).',
        "",
        "## Findings",
        "",
        *findings_table(results),
        "",
        "![forest plot](forest.png)",
        "",
        "## The same comparisons under other measures",
        "",
        "Variant minus baseline in accuracy points, 95% Welch interval; * marks an interval that excludes 0. A "
        "finding whose measures disagree rests on where the curves happen to be, not on how the runs learned.",
        "",
        *robustness_table(results),
        "",
        "## Exploratory: comparisons no finding declared",
        "",
        "Each study's other variants against its baseline, on the last-3 mean. Nothing here was declared, so "
        "nothing here is adjusted or given a verdict: a small p is a lead for a study that declares it.",
        "",
        *exploratory(tables, results),
        "",
        *card,
        "",
        "## The studies",
        "",
    ]
    for study, t in tables.items():
        lines.append(f"- [{study}]({study}/report.md): {len(t.rows)} variants, {sum(len(r.runs) for r in t.rows)} runs")
    lines += [
        "",
        f"Regenerate: `python scripts/results_page.py {page}` ({time.monotonic() - start:.0f} s for this page), or "
        "`scripts/reproduce_tiny_ablations.sh` to rerun missing runs first.",
    ]
    (out / "index.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'index.md'}")
    print("\n".join(findings_table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
