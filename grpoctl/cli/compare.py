"""`grpoctl compare NAME|RUN...`: a sweep's runs side by side (numbers: analysis/compare.py;
the tables: views/compare_view.py).

Reads only: no torch, no matplotlib, not even omegaconf, so it answers in under a second
on a registry of a hundred runs. Testing each variant against a baseline imports
scipy.stats, which costs about as much again (benchmarks/bench_compare.py times both).
"""

from __future__ import annotations

from typing import Annotated

import typer

from grpoctl.analysis.baseline import LAST_K  # cheap: scipy is imported only when a test runs
from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError

FORMATS = ("table", "markdown", "csv", "json")

# Also `report`'s options.
BaselineOption = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        metavar="VARIANT",
        help="Set every variant against this one (default: the sweep spec's baseline).",
        show_default=False,
    ),
]
LastKOption = Annotated[
    int,
    typer.Option(
        "--last-k",
        metavar="K",
        help="The verdicts' measure: each run's mean accuracy over its last K evals (1: the final eval).",
    ),
]

HeadlineOption = Annotated[
    str | None,
    typer.Option(
        "--headline",
        metavar="SET",
        help="Read this eval set (eval.sets) as each run's headline: its accuracy, pass@k and maj@k "
        "(default: each run's own, the first of its eval.sets).",
        show_default=False,
    ),
]

FindingsOption = Annotated[
    str | None,
    typer.Option(
        "--findings",
        metavar="SPEC",
        help="Test the declared findings in this family: a study spec or a page file listing studies "
        "(default: the sweep's own spec).",
        show_default=False,
    ),
]


def compare(
    refs: Annotated[
        list[str],
        typer.Argument(metavar="NAME|RUN...", help="A sweep, ablation or group name, or runs (names or ids)."),
    ],
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            "-m",
            help="Rank by this metric's final value (default: eval accuracy); eval/pass@K and eval/maj@K are "
            "tested against the baseline as accuracy is.",
        ),
    ] = None,
    at_step: Annotated[
        int | None, typer.Option("--at-step", help="Values at this GRPO step instead of the end.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, markdown, csv or json.")] = "table",
    baseline: BaselineOption = None,
    last_k: LastKOption = LAST_K,
    findings: FindingsOption = None,
    headline: HeadlineOption = None,
    db: DbOption = None,
) -> None:
    """Compare runs: the config keys that differ, eval accuracy, speed, health flags, and
    each variant against the baseline (difference, 95% CI, p-value, verdict, seeds needed)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}")
    from grpoctl.analysis.compare import build_compare_table
    from grpoctl.registry import Registry
    from grpoctl.views import compare_view as tables

    with Registry(db, must_exist=True, readonly=True) as registry:
        options = dict(baseline=baseline, last_k=last_k, findings=findings, headline=headline)
        table = build_compare_table(registry, refs, metric=metric, at_step=at_step, **options)

    if fmt in ("json", "csv"):
        # Machine formats own stdout; warnings still reach a human, on stderr.
        for warning in table.warnings:
            typer.echo(f"warning: {warning}", err=True)
        from grpoctl.views import compare_records

        typer.echo(compare_records.to_json(table) if fmt == "json" else compare_records.to_csv(table), nl=False)
    elif fmt == "markdown":
        for warning in table.warnings:
            typer.echo(f"> warning: {warning}\n")
        typer.echo(tables.markdown(table))
        typer.echo(tables.versus_markdown(table), nl=False)
        if tables.learned_forgot_rows(table):
            typer.echo("\n" + tables.learned_forgot_markdown(table), nl=False)
        if table.findings:
            typer.echo("\n" + tables.findings_markdown(table), nl=False)
    else:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:  # piped or redirected: legends in long lines too
            console = Console(width=max(console.width, 240))
        for warning in table.warnings:
            console.print(f"[yellow]warning:[/] {warning}", highlight=False)
        # The comparison that decides first; the tables fit a terminal and stay whole elsewhere.
        if table.versus is not None:
            console.print(tables.versus_rich_table(table), crop=False)
            learned = tables.learned_forgot_rich_table(table)
            if learned is not None:
                console.print(learned, crop=False)
        console.print(tables.rich_table(table), crop=False)
        if table.findings:
            console.print(tables.findings_rich_table(table), crop=False)
        elif table.baseline_note:
            console.print(f"[dim]{table.baseline_note}[/]", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
