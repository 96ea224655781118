"""`grpoctl report NAME`: a markdown report with PNG plots (written by cli/report_view.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpoctl.analysis.baseline import LAST_K
from grpoctl.cli.compare import BaselineOption, FindingsOption, HeadlineOption, LastKOption
from grpoctl.cli.options import DbOption


def report(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A sweep, ablation or group name.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder for report.md and the plots (default: reports/NAME/).")
    ] = None,
    baseline: BaselineOption = None,
    last_k: LastKOption = LAST_K,
    findings: FindingsOption = None,
    headline: HeadlineOption = None,
    db: DbOption = None,
) -> None:
    """Write a markdown report of a sweep: what varied, results, each variant against the
    baseline, curves, health."""
    from grpoctl.registry import Registry
    from grpoctl.views.report_view import write_report

    with Registry(db, must_exist=True, readonly=True) as registry:
        path = write_report(registry, name, out, baseline=baseline, last_k=last_k, findings=findings, headline=headline)
    typer.echo(f"wrote {path} (and its plots in {path.parent}/)")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
