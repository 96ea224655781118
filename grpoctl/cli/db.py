"""`grpoctl db status|upgrade`: which schema a registry has, and bringing it to this grpoctl's.

    grpoctl db status  [--db URL]     # revision, head, and what to do
    grpoctl db upgrade [--db URL]     # SQLite: after a copy to registry.db.bak-<revision>

SQLite registries also upgrade by themselves when a command that writes opens them;
PostgreSQL ones only here, under an advisory lock, so one person decides when a shared
registry changes. There is no downgrade.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from grpoctl.cli.options import DbOption

db_app = typer.Typer(help="The registry's schema: status and upgrade.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")


@db_app.command("status")
def status(db: DbOption = None) -> None:
    """Show the registry's schema revision and whether it needs `grpoctl db upgrade`."""
    from grpoctl.registry.migrate import describe_status

    typer.echo(describe_status(db))


@db_app.command("upgrade")
def upgrade(
    paths_root: Annotated[
        str | None,
        typer.Option(
            "--paths-root",
            help="Directory that relative checkpoint paths in an old registry were "
            "relative to (default: the SQLite file's directory, else the current one).",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Create the registry, or upgrade it to this grpoctl's schema (there is no downgrade)."""
    from grpoctl.registry.migrate import upgrade_registry

    root = os.path.abspath(paths_root) if paths_root else None
    typer.echo(upgrade_registry(db, paths_root=root))
