"""`grpoctl compare NAME|RUN...`: a sweep's runs side by side (see analysis/compare.py).

Reads only: no torch, no matplotlib, not even omegaconf, so it answers in well under a
second on a registry of a hundred runs.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError

FORMATS = ("table", "markdown", "csv", "json")


def compare(
    refs: Annotated[list[str], typer.Argument(
        metavar="NAME|RUN...", help="A sweep, ablation or group name, or runs (names or ids).")],
    metric: Annotated[Optional[str], typer.Option(
        "--metric", "-m", help="Rank by this metric's final value (default: eval accuracy).")] = None,
    at_step: Annotated[Optional[int], typer.Option(
        "--at-step", help="Values at this GRPO step instead of the end.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, markdown, csv or json.")] = "table",
    db: DbOption = None,
) -> None:
    """Compare runs: the config keys that differ, eval accuracy, speed, health flags."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}")
    from grpoctl.analysis import tables
    from grpoctl.analysis.compare import build_compare_table
    from grpoctl.registry import Registry

    with Registry(db, must_exist=True, readonly=True) as registry:
        table = build_compare_table(registry, refs, metric=metric, at_step=at_step)

    if fmt in ("json", "csv"):
        # Machine formats own stdout; warnings still reach a human, on stderr.
        for warning in table.warnings:
            typer.echo(f"warning: {warning}", err=True)
        typer.echo(tables.to_json(table) if fmt == "json" else tables.to_csv(table), nl=False)
    elif fmt == "markdown":
        for warning in table.warnings:
            typer.echo(f"> warning: {warning}\n")
        typer.echo(tables.markdown(table))
    else:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:  # piped or redirected: whole rows, not an 80-column squeeze
            console = Console(width=max(console.width, 240))
        for warning in table.warnings:
            console.print(f"[yellow]warning:[/] {warning}", highlight=False)
        console.print(tables.rich_table(table))


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
