"""Options shared by every command."""

from typing import Annotated

import typer

# Parentheses, not brackets: rich's help rendering eats "[default: ...]" as markup.
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Registry: SQLAlchemy URL or SQLite path (default: $GRPOCTL_DB, else ./registry.db)",
        show_default=False,
    ),
]
