"""A `CompareTable` as text: a rich table, markdown, or records for JSON and CSV.

Kept apart from compare.py, which only works out the numbers: `report` reuses the
markdown, and scripts read the JSON (raw numbers, no formatting, the spreads alongside).
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from grpoctl.analysis.compare import CompareTable, Row, Stat

ACCURACY_COLUMNS = ("final_acc", "best_acc")
STEP_COLUMNS = ("best_step", "metric_step")
LEGEND = "± is the standard error sqrt(p(1-p)/n) of one run's eval, or the sd over seeds when a row folds several runs"
STATUS_STYLE = {"finished": "green", "failed": "red", "diverged": "red", "stale": "yellow",
                "interrupted": "yellow", "running": "cyan"}


def _number(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _memory(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def cell(column: str, stat: Stat | None) -> str:
    if stat is None:
        return ""
    if column in STEP_COLUMNS:
        return f"{stat.mean:.0f}"
    if column in ACCURACY_COLUMNS:
        text = f"{stat.mean:.3f}"
        spread = stat.sd if stat.k > 1 else stat.se
        return text + (f" ± {spread:.3f}" if spread is not None else "")
    text = _memory(stat.mean) if column == "peak_mem" else _number(stat.mean)
    if stat.k > 1 and stat.sd:
        text += f" ± {_memory(stat.sd) if column == 'peak_mem' else f'{stat.sd:.2g}'}"
    return text


def config_cell(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value and abs(value) < 0.01:  # learning rates: 3e-5
        mantissa, exponent = f"{value:.3e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value)


def _columns(table: CompareTable) -> list[tuple[str, str]]:
    """The number columns that at least one row has a value for."""
    return [(c, h) for c, h in table.columns if any(c in r.values for r in table.rows)]


def _has_seeds(table: CompareTable) -> bool:
    return any(len(r.runs) > 1 for r in table.rows)


def _cells(table: CompareTable, row: Row) -> list[str]:
    out = ["★" if row.best else "", row.label]
    out += [config_cell(row.config.get(short)) for short in table.keys.values()]
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


def rich_table(table: CompareTable):
    from rich.table import Table

    out = Table(title=table.title, title_justify="left", caption=LEGEND, caption_justify="left")
    head = headers(table)
    rows = [_cells(table, row) for row in table.rows]
    numeric = len(head) - 2 - len(_columns(table))
    for i, header in enumerate(head):
        right = numeric <= i < len(head) - 2
        if i == len(head) - 1:  # health: the one column that gives way on a narrow terminal
            out.add_column(header, overflow="fold", ratio=1)
        else:
            width = max([len(header) if i else 1] + [len(r[i]) for r in rows])
            out.add_column("" if header == "best" else header, justify="right" if right else "left",
                           no_wrap=True, min_width=width)
    for row, cells in zip(table.rows, rows):
        style = STATUS_STYLE.get(row.status)
        cells[-2] = f"[{style}]{row.status}[/]" if style else row.status
        if row.flags:  # one flag a line keeps the column narrow
            cells[-1] = "[red]" + "\n".join(row.flags) + "[/]"
        out.add_row(*cells, style="bold" if row.best else None)
    return out


def markdown(table: CompareTable) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    head = headers(table)
    lines = [line(head), line(["---"] * len(head))]
    lines += [line(_cells(table, row)) for row in table.rows]
    return "\n".join(lines) + f"\n\n{LEGEND}.\n"


def records(table: CompareTable) -> list[dict]:
    """One dict per row with raw numbers (spreads as COLUMN_sd / COLUMN_se)."""
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
        out.append(record)
    return out


def to_json(table: CompareTable) -> str:
    payload = {"title": table.title, "at_step": table.at_step, "rank_by": table.rank_by,
               "warnings": table.warnings, "rows": records(table)}
    return json.dumps(payload, indent=2, default=str) + "\n"


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
