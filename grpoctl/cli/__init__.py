"""The `grpoctl` command line: thin wrappers that parse flags and call the library.

Each command module registers its commands on the app (`register(app)`), and is
imported only when its command runs (cli/lazy.py), so `grpoctl --help` and
`--version` import no registry, torch, scipy or matplotlib. Heavy imports (torch,
transformers, matplotlib) happen inside the commands that need them, so `grpoctl runs`
and `grpoctl compare` start fast too.
"""

from __future__ import annotations

from typing import Annotated

import typer

import grpoctl
from grpoctl.cli.lazy import LazyGroup
from grpoctl.errors import UserError

try:  # typer >= 0.29 carries its own copy of click (and no longer needs click itself)
    from typer._click import exceptions as click_errors
except ImportError:  # older typer raises click's own exceptions
    from click import exceptions as click_errors

# Raised (in non-standalone mode) when a group is called with no subcommand.
NoArgsIsHelpError = getattr(click_errors, "NoArgsIsHelpError", ())

# Every command, in --help's order: the module that registers it, and its one-line help
# (the first paragraph of its own; tests/test_cli_startup.py checks that they agree).
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "grpoctl.cli.train",
        "Run GRPO. CONFIG is a yaml diff from the defaults or a built-in name: lab (the default: the embedded "
        "lab, a 1M-parameter model on CPU) or addition (the tiny addition task); key=value overrides follow "
        "(dotted paths or short aliases: lr, loss, group_size, steps, ...).",
    ),
    "eval": ("grpoctl.cli.train", "Evaluate a checkpoint directory on a deterministic subset and record the result."),
    "sweep": ("grpoctl.cli.sweep", "Run a sweep or an ablation: every variant a run in the registry, grouped by name."),
    "compare": (
        "grpoctl.cli.compare",
        "Compare runs: the config keys that differ, eval accuracy, speed, health flags, and each variant against "
        "the baseline (difference, 95% CI, p-value, verdict, seeds needed).",
    ),
    "report": (
        "grpoctl.cli.report",
        "Write a markdown report of a sweep: what varied, results, each variant against the baseline, curves, health.",
    ),
    "runs": ("grpoctl.cli.runs", "List, show and inspect the runs in the registry."),
    "db": ("grpoctl.cli.db", "The registry's schema: status and upgrade."),
    "ui": (
        "grpoctl.cli.ui",
        "Serve a live, read-only dashboard of the registry in a web browser: runs, studies, curves, samples.",
    ),
}
LazyGroup.lazy_commands = COMMANDS

app = typer.Typer(
    name="grpoctl",
    cls=LazyGroup,
    help="GRPO for small math LLMs, with every run in an experiment registry.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"grpoctl {grpoctl.__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print grpoctl's version and exit.")
    ] = False,
) -> None:
    """GRPO for small math LLMs, with every run in an experiment registry."""


def fail(message: str, code: int = 2) -> None:
    """Print one line and exit 2: the convention for bad input everywhere in the CLI."""
    typer.echo(f"error: {message}", err=True)
    raise SystemExit(code)


def main() -> None:
    try:
        # standalone_mode=False: exceptions reach us instead of click printing them its
        # way, and an exit code (typer.Exit, --help) comes back as the return value.
        code = app(standalone_mode=False)
    except UserError as exc:
        fail(str(exc), exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(130) from None
    except NoArgsIsHelpError as exc:
        # `grpoctl` or `grpoctl runs` alone asks what there is: help (typer's rich help
        # is already printed by the time this is raised; plain help is the message).
        if exc.format_message().strip():
            typer.echo(exc.format_message())
        raise SystemExit(0) from None
    except click_errors.UsageError as exc:
        # click's own usage errors are multi-line; keep the one line that says what is wrong
        message = (exc.format_message() or str(exc)).strip().splitlines()[0]
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        fail(message + hint)
    except click_errors.ClickException as exc:
        fail(exc.format_message())
    except Exception as exc:
        # A registry failure met after it opened (a corrupt page, a server gone away) is
        # still one line; anything else is a bug and keeps its traceback.
        from grpoctl.registry.open import as_user_error

        user_error = as_user_error(exc)
        if user_error is None:
            raise
        fail(str(user_error))
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
