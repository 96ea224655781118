"""A `CompareTable` as text: tables fitted to the terminal (views/fit_table.py), markdown, or records for JSON and CSV.

The view of analysis/compare.py, which only works out the numbers: `report` reuses the
markdown, and scripts read the JSON (raw numbers, no formatting, the spreads alongside;
a number that is not finite is null, so strict JSON parsers accept it).
"""

from __future__ import annotations

from grpoctl import metrics
from grpoctl.analysis import paired, stats
from grpoctl.analysis.baseline import BaselineComparison, Versus
from grpoctl.analysis.compare import THROUGHPUT_COLUMNS, CompareTable, Row, Stat
from grpoctl.formatting import STATUS_STYLES, MiB, format_bytes, format_config_value, format_number
from grpoctl.views.fit_table import Cell, Column, FitTable

ACCURACY_COLUMNS = ("final_acc", "best_acc")
STEP_COLUMNS = ("best_step", "metric_step")
SCORE_COLUMNS = ("metric", "metric_best")  # shown like accuracy when the metric is pass@k or maj@k (it has an SE)
LEGEND = (
    "± … SE: the binomial standard error sqrt(p(1-p)/n) of one run's eval; "
    "± … sd: the standard deviation over a row's seeds"
)


def _memory(mib: float) -> str:
    return format_bytes(mib * MiB)


def cell(column: str, stat: Stat | None) -> str:
    if stat is None:
        return ""
    if column in STEP_COLUMNS or (column in THROUGHPUT_COLUMNS and stat.k == 1):
        return f"{stat.mean:.0f}"  # a step, or tokens per second
    if column in ACCURACY_COLUMNS or (column in SCORE_COLUMNS and stat.se is not None):
        text = f"{stat.mean:.3f}"
        if stat.k > 1:
            return text + f" ± {stat.sd:.3f} sd"
        return text + (f" ± {stat.se:.3f} SE" if stat.se is not None else "")
    text = _memory(stat.mean) if column == "peak_mem" else format_number(stat.mean)
    if stat.k > 1 and stat.sd:
        text += f" ± {_memory(stat.sd) if column == 'peak_mem' else f'{stat.sd:.2g}'} sd"
    return text


def _columns(table: CompareTable) -> list[tuple[str, str]]:
    """The number columns that at least one row has a value for."""
    return [(c, h) for c, h in table.columns if any(c in r.values for r in table.rows)]


def _has_seeds(table: CompareTable) -> bool:
    return any(len(r.runs) > 1 for r in table.rows)


def _cells(table: CompareTable, row: Row) -> list[str]:
    out = ["★" if row.best else "", row.label]
    out += [format_config_value(row.config.get(short)) for short in table.keys.values()]
    if _has_seeds(table):
        out.append(str(len(row.runs)))
    out += [cell(c, row.values.get(c)) for c, _ in _columns(table)]
    out += [row.status, ", ".join(row.flags)]
    return out


def headers(table: CompareTable) -> list[str]:
    out = ["best", "variant", *table.keys.values()]
    if _has_seeds(table):
        out.append("seeds")
    return out + [h for _, h in _columns(table)] + ["status", "health"]


def rich_table(table: CompareTable) -> FitTable:
    """The runs side by side, for a terminal: the best mark, the variant, the ranking
    measure, status and health first; what varied, seeds and the other figures beside
    them where the width allows, else in a further table."""
    head = headers(table)
    rows = [_cells(table, row) for row in table.rows]
    numbers = [c for c, _ in _columns(table)]
    first_number = len(head) - 2 - len(numbers)
    columns = []
    for i, header in enumerate(head):
        number = numbers[i - first_number] if first_number <= i < len(head) - 2 else None
        columns.append(
            Column(
                "" if header == "best" else header,
                right=number is not None or header == "seeds",
                wrap="name" if header == "variant" else ("words" if i == len(head) - 1 else "never"),
                key=header == "variant",
                # what decides: the mark, the ranking measure, status and health
                secondary=not (header == "best" or number == table.rank_by or i >= len(head) - 2),
            )
        )
    out = FitTable(columns, title=table.title, caption=LEGEND)
    for row, cells in zip(table.rows, rows, strict=True):
        styled: list[Cell] = list(cells)
        styled[-2] = (row.status, STATUS_STYLES.get(row.status, ""))
        if row.flags:  # one flag a line keeps the column narrow
            styled[-1] = ("\n".join(row.flags), "red")
        out.add_row(*styled, style="bold" if row.best else "")
    return out


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown(table: CompareTable) -> str:
    head = headers(table)
    lines = [_line(head), _line(["---"] * len(head))]
    lines += [_line(_cells(table, row)) for row in table.rows]
    return "\n".join(lines) + f"\n\n{LEGEND}.\n"


# --------------------------------------------------------------------------- against the baseline


def measure_name(comparison: BaselineComparison) -> str:
    what = measured(comparison)
    if comparison.last_k == 1:
        return f"final {what}"
    return f"{what}, mean of last {comparison.last_k} evals"


def measured(comparison: BaselineComparison) -> str:
    """What the comparison measures: acc, or pass@8 / maj@8 (compare --metric eval/pass@8)."""
    if comparison.metric and metrics.is_sampled_score(comparison.metric):
        return comparison.metric.removeprefix(metrics.EVAL_PREFIX)
    return "acc"


def _interval(low: float, high: float, signed: bool = True) -> str:
    return f"[{low:+.3f}, {high:+.3f}]" if signed else f"[{low:.3f}, {high:.3f}]"


def pvalue(p: float | None) -> str:
    return "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.3f}")


def _has_bca(comparison: BaselineComparison) -> bool:
    return any(v.bca for v in comparison.rows)


def versus_headers(comparison: BaselineComparison) -> list[str]:
    head = ["variant", "seeds", measure_name(comparison), f"Δ vs {comparison.baseline} (95% CI)"]
    if _has_bca(comparison):
        head.append("Δ, BCa 95% CI")
    return head + ["p", "p Holm", "test", "verdict", "seeds needed", f"Δ best {measured(comparison)} (95% CI)", "MDE"]


def versus_cells(comparison: BaselineComparison, v: Versus) -> list[str]:
    measure = ""
    if v.measure is not None:
        measure = f"{v.measure:.3f}"
        if v.measure_sd is not None:
            measure += f" ± {v.measure_sd:.3f} sd"
        elif v.measure_ci is not None:
            measure += f" {_interval(*v.measure_ci, signed=False)} Wilson CI"
    base = v.verdict == "baseline"
    diff = "" if base else "-"
    if v.diff is not None:
        diff = f"{v.diff.diff:+.3f} {_interval(v.diff.low, v.diff.high)}"
    out = [v.label, str(v.seeds), measure, diff]
    if _has_bca(comparison):
        out.append(_interval(*v.bca) if v.bca else ("" if base else "-"))
    needed = "" if base else "-"
    if v.seeds_needed is not None:
        needed = f"> {v.seeds_needed}" if v.seeds_needed_capped else str(v.seeds_needed)
    best = "" if base else "-"
    if v.best_diff is not None:
        best = f"{v.best_diff:+.3f}" + (f" {_interval(*v.best_ci)}" if v.best_ci else "")
    p, p_holm = ("", "") if base else (pvalue(v.diff.p if v.diff else None), pvalue(v.p_holm))
    mde = f"{v.mde:.3f}" if v.mde is not None else ("" if base else "-")
    test = "" if base else (v.test or "-")
    return out + [p, p_holm, test, v.verdict, needed, best, mde]


# What each test is, said once per comparison that ran it (paired.TESTS has their names).
TEST_LEGENDS = {
    "paired": "paired t (seeds): the arms ran the same seeds, so the 95% CI and p are the paired t's over the "
    "per-seed differences",
    "paired+problems": "paired t (seeds) + problems: the paired t over seeds plus the variance of a bootstrap "
    "of the problems (the same problems resampled in both arms), with Satterthwaite's df",
    "welch": "Welch t (unmatched seeds): the arms' seeds do not match, so the 95% CI and p are Welch's t over "
    "each arm's seeds",
    "mcnemar": "McNemar exact (one run each): the binomial test on the problems one run got right and the other "
    "wrong; it says whether these two runs differ, never which arm is better",
    "problems": "paired t (problems, one run each): the paired t over the problems' per-problem measures; it "
    "says whether these two runs differ, never which arm is better",
    "two-proportion": "two-proportion (one eval each): with one seed per arm and no per-problem outcomes, "
    "Newcombe's score interval and a two-proportion test on the evals' counts, the accuracy's interval "
    "Wilson's; it says whether these two runs differ, never which arm is better",
}


def versus_legend(comparison: BaselineComparison) -> str:
    """What the comparison's columns are, for the tests it actually ran."""
    tests = list(dict.fromkeys(v.choice.test for v in comparison.rows if v.choice is not None and v.diff))
    levels = list(dict.fromkeys(v.problem_level for v in comparison.rows if v.diff and v.problem_level))
    m = comparison.tested
    what = measured(comparison)
    parts = [
        f"Δ: variant minus {comparison.baseline} (the baseline, from {comparison.source}), in "
        + ("accuracy" if what == "acc" else what)
    ]
    if what != "acc":
        parts.append(f"{what} is tested as accuracy is, over the problems sampled (one seed: as a proportion)")
    parts += [TEST_LEGENDS[t] for t in tests]
    if paired.LABELS["problems not recorded"] in levels:
        parts.append(
            f"{paired.LABELS['problems not recorded']}: these runs stored no per-problem outcomes, so the interval "
            "covers the seeds only"
        )
    if _has_bca(comparison):
        parts.append(f"BCa: bootstrap interval (shown from {stats.BCA_MIN_SEEDS} seeds per arm)")
    parts.append(
        f"p Holm: p corrected by Holm's method for the {m} comparison{'s' if m != 1 else ''} "
        f"in this study; the verdict is better or worse when p Holm < {stats.ALPHA:g}, else within noise"
        + ("; for one run per arm, whether these two runs differ" if set(tests) & set(paired.RUN_TESTS) else "")
    )
    if set(tests) - set(paired.RUN_TESTS):
        parts.append(
            f"Seeds needed: per arm, to detect this Δ at α {stats.ALPHA:g} with power "
            f"{stats.POWER:g} under the test applied (noncentral t; a paired test plans from the spread of the "
            "per-seed differences)"
        )
        parts.append(
            f"MDE: the smallest Δ these seeds detect at α {stats.ALPHA:g} with power {stats.POWER:g} under the test "
            "applied; a Δ below it being within noise says little"
        )
    parts.append(f"Best {what} is biased upward (the best of several noisy evals): shown, not the verdict's basis")
    return ". ".join(parts)


def versus_notes(comparison: BaselineComparison) -> list[str]:
    return [f"{v.label}: {note}" for v in comparison.rows for note in (v.note, v.unpaired) if note]


def versus_markdown(table: CompareTable, notes: bool = True) -> str:
    """The comparison against the baseline as markdown (with a line per variant's caveat
    when `notes`), or the line saying why there is none."""
    comparison = table.versus
    if comparison is None:
        return f"{table.baseline_note}.\n" if table.baseline_note else ""

    head = versus_headers(comparison)
    lines = [_line(head), _line(["---"] * len(head))]
    lines += [_line(versus_cells(comparison, v)) for v in comparison.rows]
    text = "\n".join(lines) + f"\n\n{versus_legend(comparison)}.\n"
    caveats = versus_notes(comparison) if notes else []
    if caveats:
        text += "\n" + "\n".join(f"- {n}" for n in caveats) + "\n"
    return text


# What decides a comparison, first on a terminal after the variant: Δ with its interval
# (the header that starts so), the p-values and the verdict; the rest may move aside.
DECIDING_PREFIX = "Δ vs "
DECIDING = ("p", "p Holm", "verdict")


def versus_rich_table(table: CompareTable) -> FitTable:
    comparison = table.versus
    caption = versus_legend(comparison) + "".join(f"\n{n}" for n in versus_notes(comparison))
    head = versus_headers(comparison)
    deciding = [i for i, h in enumerate(head) if i == 0 or h.startswith(DECIDING_PREFIX) or h in DECIDING]
    order = deciding + [i for i in range(len(head)) if i not in deciding]
    columns = [
        Column(
            head[i],
            right=i != 0 and head[i] != "verdict",
            wrap="name" if i == 0 else ("words" if head[i] == "verdict" else "never"),
            key=i == 0,
            secondary=i not in deciding,
        )
        for i in order
    ]
    out = FitTable(
        columns, title=f"{table.title}: against {comparison.baseline} (from {comparison.source})", caption=caption
    )
    for v in comparison.rows:
        cells = versus_cells(comparison, v)
        out.add_row(*(cells[i] for i in order), style={"better": "green", "worse": "red"}.get(v.verdict, ""))
    return out


# --------------------------------------------------------------------------- learned / forgot

LEARNED_HEADERS = ["variant", "level", "problems", *paired.CHANGES]


def learned_forgot_rows(table: CompareTable) -> list[list[str]]:
    """One row per variant and level (its "all" first) of the per-problem table."""
    comparison = table.versus
    rows = []
    for v in comparison.rows if comparison else []:
        for level, counts in (v.learned_forgot or {}).items():
            rows.append([v.label, level, str(counts["problems"]), *(str(counts[k]) for k in paired.CHANGES)])
    return rows


def learned_forgot_legend(table: CompareTable) -> str:
    base = table.versus.baseline if table.versus else "the baseline"
    return (
        f"Per problem, on the comparison's measure (each arm's mean over its seeds): learned = right in the variant "
        f"(above 1/2) and wrong in {base} (below 1/2), forgot = the reverse; split: exactly 1/2 in either arm. "
        "Only variants whose runs, and the baseline's, recorded per-problem outcomes of the same problems"
    )


def learned_forgot_markdown(table: CompareTable) -> str:
    rows = learned_forgot_rows(table)
    if not rows:
        return ""
    lines = [_line(LEARNED_HEADERS), _line(["---"] * len(LEARNED_HEADERS))] + [_line(r) for r in rows]
    return "\n".join(lines) + f"\n\n{learned_forgot_legend(table)}.\n"


def learned_forgot_rich_table(table: CompareTable):
    from rich.table import Table

    rows = learned_forgot_rows(table)
    if not rows:
        return None
    out = Table(
        title=f"learned / forgot against {table.versus.baseline}, by level",
        title_justify="left",
        caption=learned_forgot_legend(table),
        caption_justify="left",
    )
    for i, header in enumerate(LEARNED_HEADERS):
        out.add_column(header, justify="left" if i < 2 else "right")
    for row in rows:
        out.add_row(*row)
    return out


# --------------------------------------------------------------------------- declared findings

FINDINGS_HEADERS = [
    "finding",
    "variant",
    "measure",
    "can this setup show it?",
    "Δ (95% CI)",
    "p family",
    "test",
    "verdict",
]


def findings_cells(r) -> list[str]:

    f = r.finding
    rule = r.deciding.rule if r.deciding is not None else f.testable[0]
    if r.not_run:
        show = "not run"
    elif r.rule_value is None:
        show = "unknown"
    elif not r.testable and all(c.holds for c in r.checks):  # every rule holds, the measure cannot be read
        show = f"no: {r.note}"
    else:
        needs = rule.describe().split(rule.label, 1)[1].strip()
        show = f"{'yes' if r.testable else 'no'}: {rule.label} {r.rule_value:.3g} (needs {needs})"
        if len(f.testable) > 1:
            show += f"; {'every' if r.testable else 'the first failing'} of {len(f.testable)} rules"
    diff = f"{r.diff.diff:+.3f} {_interval(r.diff.low, r.diff.high)}" if r.diff else "-"
    test = r.test + (" + TOST" if r.equivalence is not None else "") if r.test else "-"
    return [f.id, f.variant, f.measure_text, show, diff, pvalue(r.p_family), test, r.verdict]


def findings_legend(table: CompareTable) -> str:
    fam = table.family or {}
    return (
        f"Declared in {fam.get('declared_in')}: each finding on its own measure, expected direction and rule. "
        f"p family: Holm over the family's {fam.get('tested')} testable findings, each under the test its design "
        "allows (named in its row; TOST on the same difference for 'same'); a finding its rule rules out has no p "
        "and no verdict, and one whose arms both sit at the ceiling no equivalence verdict. Not reproduced: the 95% "
        "CI lies wholly short of the seed's effect or a declared minimum. Variants no finding names are "
        "exploratory: their p above is adjusted within this study only"
    )


def findings_markdown(table: CompareTable) -> str:
    if not table.findings:
        return ""
    lines = [_line(FINDINGS_HEADERS), _line(["---"] * len(FINDINGS_HEADERS))]
    lines += [_line(findings_cells(r)) for r in table.findings]
    return "\n".join(lines) + f"\n\n{findings_legend(table)}.\n"


def findings_rich_table(table: CompareTable) -> FitTable:
    """Each declared finding: its id, variant, Δ, p and verdict first; its measure and
    whether this setup can show it beside them where the width allows."""
    prose = ("measure", "can this setup show it?", "verdict")
    columns = [
        Column(
            header,
            right=header in ("Δ (95% CI)", "p family"),
            wrap="name" if header in ("finding", "variant") else ("words" if header in prose else "never"),
            key=header == "finding",
            secondary=header in prose[:2],
        )
        for header in FINDINGS_HEADERS
    ]
    out = FitTable(columns, title="declared findings", caption=findings_legend(table))
    for r in table.findings:
        out.add_row(*findings_cells(r))
    return out
