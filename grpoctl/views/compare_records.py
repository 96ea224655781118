"""A `CompareTable` as records: JSON and CSV, raw numbers without formatting.

Scripts read the JSON (the spreads alongside each number; a number that is not finite
is null, so strict JSON parsers accept it); `compare --format csv` writes the records.
The tables a person reads are views/compare_view.py.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from grpoctl.analysis import paired, stats
from grpoctl.analysis.compare import CompareTable
from grpoctl.formatting import json_safe
from grpoctl.views.compare_view import measure_name


def _versus_record(table: CompareTable, label: str) -> dict[str, Any]:
    """The comparison fields of one row; the same keys (None) when there is none."""
    comparison = table.versus
    v = next((v for v in comparison.rows if v.label == label), None) if comparison else None
    d = v.diff if v else None
    choice = v.choice if v else None
    detail = choice.detail if choice else None
    return {
        "acc_last_k": v.measure if v else None,
        "acc_last_k_sd": v.measure_sd if v else None,
        "acc_last_k_ci_low": v.measure_ci[0] if v and v.measure_ci else None,
        "acc_last_k_ci_high": v.measure_ci[1] if v and v.measure_ci else None,
        "vs_baseline": comparison.baseline if comparison else None,
        "diff": d.diff if d else None,
        "diff_ci_low": d.low if d else None,
        "diff_ci_high": d.high if d else None,
        "diff_test": d.test if d else None,
        "diff_test_name": (v.test or None) if v else None,
        "problem_level": v.problem_level if v else None,
        "scope": choice.scope if choice else None,
        "pairs": (choice.pairs or None) if choice else None,
        "seeds_left_out": list(choice.left_out) if choice and choice.left_out else None,
        "df": detail.df if detail else None,
        "seed_var": detail.seed_var if detail else None,
        "problem_var": detail.problem_var if detail else None,
        "problems_not_paired": (v.unpaired or None) if v else None,
        "diff_bca_low": v.bca[0] if v and v.bca else None,
        "diff_bca_high": v.bca[1] if v and v.bca else None,
        "p_value": d.p if d else None,
        "p_holm": v.p_holm if v else None,
        "verdict": v.verdict if v else None,
        "seeds_needed": v.seeds_needed if v else None,
        "seeds_needed_capped": v.seeds_needed_capped if v else None,
        "best_diff": v.best_diff if v else None,
        "best_diff_ci_low": v.best_ci[0] if v and v.best_ci else None,
        "best_diff_ci_high": v.best_ci[1] if v and v.best_ci else None,
        "best_diff_test": (v.best_test or None) if v else None,
        "comparison_note": (v.note or None) if v else None,
        "mde": v.mde if v else None,
        "tost_p": v.tost.p if v and v.tost else None,
        "tost_delta": v.tost.delta if v and v.tost else None,
        "tost_ci_low": v.tost.low if v and v.tost else None,
        "tost_ci_high": v.tost.high if v and v.tost else None,
        "tost_outcome": (v.tost.outcome or None) if v and v.tost else None,
        "learned_forgot": v.learned_forgot if v else None,
        **_family_record(table, label),
    }


def _finding_record(r) -> dict[str, Any]:
    f = r.finding
    return {
        "id": f.id,
        "claim": f.claim,
        "measure": f.measure,
        "expect": f.expect,
        "testable": r.testable,
        "rule": "; ".join(rule.describe() for rule in f.testable),
        "rule_value": r.rule_value,
        "rules": [{"rule": c.rule.describe(), "value": c.value, "holds": c.holds} for c in r.checks],
        "curve": f.curve,
        "axis": f.axis,
        "axis_budget": list(r.budget) if r.budget is not None else None,
        "steps": list(f.steps) if f.steps is not None else None,
        "diff": r.diff.diff if r.diff else None,
        "diff_ci_low": r.diff.low if r.diff else None,
        "diff_ci_high": r.diff.high if r.diff else None,
        "diff_test": r.diff.test if r.diff else None,
        "diff_test_name": r.test or None,
        "problem_level": r.problem_level,
        "problems_not_paired": r.unpaired or None,
        "p_value": r.p,
        "family_p_holm": r.p_family,
        "mde": r.mde,
        "seeds_needed": r.seeds_needed[0] if r.seeds_needed else None,
        "tost_p": r.equivalence.p if r.equivalence else None,
        "tost_outcome": (r.equivalence.outcome or None) if r.equivalence else None,
        "seed_effect": f.seed_effect,
        "min_effect": f.min_effect,
        "seeds_for_seed_effect": r.seeds_for_seed_effect[0] if r.seeds_for_seed_effect else None,
        "verdict": r.verdict,
        "note": r.note or None,
    }


def _family_record(table: CompareTable, label: str) -> dict[str, Any]:
    """A row's declared findings (its first one's family-adjusted p as family_p_holm);
    a variant no finding is declared on is exploratory: its p is unadjusted."""
    mine = [r for r in table.findings if r.finding.variant == label]
    first = next((r.p_family for r in mine if r.p_family is not None), None)
    base = table.versus is not None and label == table.versus.baseline
    return {
        "family_p_holm": first,
        "exploratory": None if table.versus is None or base else not mine,
        "findings": [_finding_record(r) for r in mine],
    }


def comparison_summary(table: CompareTable) -> dict[str, Any] | None:
    """What the comparison fields of the rows mean, for JSON readers."""
    c = table.versus
    if c is None:
        return None
    return {
        "variant": c.baseline,
        "from": c.source,
        "last_k": c.last_k,
        "measure": measure_name(c),
        "confidence": stats.CONFIDENCE,
        "alpha": stats.ALPHA,
        "power": stats.POWER,
        "correction": "holm",
        "comparisons": c.tested,
        "bca_min_seeds": stats.BCA_MIN_SEEDS,
        "seeds_cap": stats.SEEDS_CAP,
        "accuracy_interval": "wilson",
        "mde": f"the smallest difference the test applied (diff_test) detects over these seeds at alpha "
        f"{stats.ALPHA:g}, power {stats.POWER:g}",
        "tests": paired.TESTS,
        "tost_delta": stats.EQUIVALENCE_DELTA,
        "family": table.family,
    }


def records(table: CompareTable) -> list[dict]:
    """One dict per row with raw numbers (spreads as COLUMN_sd / COLUMN_se), then the
    comparison against the baseline (None throughout when there is none)."""
    out = []
    for row in table.rows:
        record: dict[str, Any] = {
            "variant": row.label,
            "best": row.best,
            "runs": [rd.run.name for rd in row.runs],
            "seeds": [rd.run.seed for rd in row.runs],
            **{k: row.config.get(k) for k in table.keys.values()},
        }
        for column, _ in table.columns:
            stat = row.values.get(column)
            record[column] = stat.mean if stat else None
            if stat and stat.sd is not None:
                record[f"{column}_sd"] = stat.sd
            if stat and stat.se is not None:
                record[f"{column}_se"] = stat.se
        record["status"] = row.status
        record["health"] = row.flags
        record.update(_versus_record(table, row.label))
        out.append(record)
    return out


def to_json(table: CompareTable) -> str:
    payload = {
        "title": table.title,
        "at_step": table.at_step,
        "rank_by": table.rank_by,
        "warnings": table.warnings,
        "baseline": comparison_summary(table),
        "baseline_note": table.baseline_note or None,
        "rows": records(table),
    }
    return json.dumps(json_safe(payload), indent=2, default=str, allow_nan=False) + "\n"


def to_csv(table: CompareTable) -> str:
    rows = records(table)
    fields: list[str] = []
    for record in rows:
        fields += [k for k in record if k not in fields]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    for record in rows:
        writer.writerow({k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in record.items()})
    return buffer.getvalue()
