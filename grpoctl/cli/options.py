"""Options and arguments shared by the commands, and how a read command opens the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from grpoctl.registry import Registry

# Parentheses, not brackets: rich's help rendering eats "[default: ...]" as markup.
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Registry: SQLAlchemy URL or SQLite path (default: $GRPOCTL_DB, else ./registry.db)",
        show_default=False,
    ),
]

RunArgument = Annotated[str, typer.Argument(metavar="RUN", help="Run id, name, or a unique prefix of its name.")]


def open_registry(db: str | None, write: bool = False) -> Registry:
    """The registry at `db` for a command that names runs in it.

    Reading must not create an empty registry.db as a side effect of a typo'd --db, and
    opens read-only (so it works on a registry the user may only read).
    """
    from grpoctl.registry import Registry  # SQLAlchemy: only once a command runs

    return Registry(db, must_exist=True, readonly=not write)
