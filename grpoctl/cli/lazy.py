"""Commands imported when they run, not when `grpoctl` starts.

`grpoctl --help` and `--version` would otherwise import every command module, and
through them the registry (SQLAlchemy and SQLModel: most of a second). Each command is
listed by name with its one-line help (cli/__init__.py: COMMANDS) and stands in the
group as a placeholder; the group swaps in the real command, importing its module,
only once the command line names it. `--help` lists the placeholders' lines, and
tests/test_cli_startup.py checks each line against its command's own help.
"""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperCommand, TyperGroup


class Placeholder(TyperCommand):
    """A command not imported yet: its name and one-line help, for `--help` to list."""


def load_command(name: str, module_name: str) -> typer.core.click.Command:
    """The click command `name` as module `module_name` registers it (its register(app))."""
    module = importlib.import_module(module_name)
    scratch = typer.Typer()
    scratch.callback()(lambda: None)  # with a callback, get_command builds a group even for one command
    module.register(scratch)
    return typer.main.get_command(scratch).commands[name]  # type: ignore[attr-defined]


class LazyGroup(TyperGroup):
    """The top-level group: `commands` (name -> (module, one-line help)) are loaded on use."""

    lazy_commands: dict[str, tuple[str, str]] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, (_, help_line) in self.lazy_commands.items():
            self.commands.setdefault(name, Placeholder(name=name, help=help_line, callback=None))

    def resolve_command(self, ctx, args):
        if args and isinstance(self.commands.get(args[0]), Placeholder):
            self.commands[args[0]] = load_command(args[0], self.lazy_commands[args[0]][0])
        return super().resolve_command(ctx, args)
