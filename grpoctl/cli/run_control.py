"""`grpoctl runs logs RUN [--follow]` and `grpoctl runs stop RUN`: a run started anywhere.

Both go through the registry, so they work from any machine that reaches it, whichever
executor started the run: a sweep member's output is stored there as it comes (see
grpoctl/sweep/member.py), and a stop request is read by the run's own trainer, which
then stops as it does on SIGTERM (it finishes its step, checkpoints and ends
`interrupted`; `grpoctl train --resume RUN`, or the sweep run again, continues it).
"""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from grpoctl.cli.options import DbOption, RunArgument, open_registry
from grpoctl.errors import UserError
from grpoctl.registry import effective_status

FOLLOW_POLL_S = 1.0
# After the run has ended, keep following this long for the last lines (its sweep member
# stores them a moment after the trainer exits).
FOLLOW_TAIL_S = 3.0


def add_commands(runs_app: typer.Typer) -> None:
    runs_app.command("logs")(logs)
    runs_app.command("stop")(stop)


def logs(
    run_ref: RunArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends.")] = False,
    db: DbOption = None,
) -> None:
    """Show what a sweep member's trainer printed (stored in the registry, wherever it ran)."""
    registry = open_registry(db)
    try:
        name = registry.get_run(run_ref).name
    except UserError:
        if not registry.log_chunks(run_ref):  # a member that never created its run still left a log
            raise
        name = run_ref
    last_id = _print(registry.log_chunks(name))
    if last_id == 0 and not follow:
        typer.echo(
            f"run '{name}' has no stored log (only sweep members store theirs; a `grpoctl train` "
            "prints to its terminal)",
            err=True,
        )
        return
    if not follow:
        return
    quiet_since = None
    try:
        while True:
            time.sleep(FOLLOW_POLL_S)
            new = registry.log_chunks(name, after_id=last_id)
            last_id = _print(new) or last_id
            run = registry.runs_named([name]).get(name)
            ended = run is None or effective_status(run) != "running"
            if not ended or new:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= FOLLOW_TAIL_S:
                return
    except KeyboardInterrupt:
        return


def _print(chunks: list[tuple[int, str, str]]) -> int:
    for _, _, text in chunks:
        sys.stdout.write(text)
    sys.stdout.flush()
    return chunks[-1][0] if chunks else 0


def stop(run_ref: RunArgument, db: DbOption = None) -> None:
    """Ask a running run to stop: it finishes its step, checkpoints and ends `interrupted`."""
    registry = open_registry(db, write=True)
    run = registry.get_run(run_ref)
    status = effective_status(run)
    if status == "stale":
        raise UserError(
            f"run '{run.name}' is stale (no heartbeat for minutes): its trainer is gone, there is "
            f"nothing to stop; `grpoctl train --resume {run.name}` continues it"
        )
    if status != "running":
        raise UserError(f"run '{run.name}' is not running (it is {status})")
    registry.request_stop(run.id)
    typer.echo(
        f"asked run {run.name} (pid {run.claim_pid or run.pid} on {run.claim_host or run.host}) to stop: "
        "within seconds it finishes its step, checkpoints and ends interrupted; "
        f"`grpoctl train --resume {run.name}` (or its sweep, run again) continues it"
    )
