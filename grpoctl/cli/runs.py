"""`grpoctl runs ...`: list, show, read and tidy up the runs in the registry.

Everything here only reads the registry (except `tag` and `rm`), so it imports no torch
and starts in a fraction of a second. Text goes through rich; `--format json` writes
plain JSON to stdout and nothing else, so it can be piped into jq.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from grpoctl import metrics
from grpoctl.cli.options import DbOption, RunArgument, open_registry
from grpoctl.errors import UserError
from grpoctl.formatting import STATUS_STYLES, format_number, json_safe
from grpoctl.registry import Registry, Run, effective_status
from grpoctl.registry.models import utcnow
from grpoctl.registry.outcomes import decode as decode_outcomes
from grpoctl.rules import SHOWN_STATUSES, headline_accuracy
from grpoctl.run_identity import flatten
from grpoctl.views.fit_table import Column, FitTable

runs_app = typer.Typer(help="List, show and inspect the runs in the registry.", no_args_is_help=True)


def console() -> Console:
    """The console of one command, made when it runs: its width is the terminal's then."""
    return Console()


REWARD_METRIC = metrics.REWARD  # the mean reward over a step's rollouts, as the trainer names it


def register(app: typer.Typer) -> None:
    from grpoctl.cli import run_control  # runs logs, runs stop

    run_control.add_commands(runs_app)
    app.add_typer(runs_app, name="runs")


# ---- formatting ---------------------------------------------------------------------


def _when(moment: datetime | None, short: bool = False) -> str:
    if moment is None:
        return "-"
    return moment.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M UTC")


def _duration(run: Run, now: datetime) -> str:
    status = effective_status(run, now)
    end = run.finished_at or (now if status == "running" else run.heartbeat_at)
    seconds = max(0, int((end - run.created_at).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _status(run: Run, now: datetime | None = None) -> Text:
    status = effective_status(run, now)
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _progress(run: Run) -> str:
    # GRPO steps count from 1; step 0 holds only the eval before training.
    return f"{max(run.last_step, 0)}/{run.total_steps}"


def _accuracy(curve) -> float | None:
    """A run's headline accuracy (grpoctl.rules.headline_accuracy), as `compare` shows it too."""
    point = headline_accuracy(curve)
    return None if point is None else point[1]


def _jsonable(row) -> dict:
    out = {}
    for column in row.__table__.columns:  # in the table's order, unlike model_dump()
        key, value = column.key, getattr(row, column.key)
        if isinstance(value, datetime):
            value = value.isoformat()
        out[key] = json_safe(value)
    return out


def _clip(text: str, head: int = 160, tail: int = 320) -> str:
    # Prompts are a long template with the question at the end: keep both ends.
    if len(text) <= head + tail + 20:
        return text
    return f"{text[:head]} [... {len(text) - head - tail} characters ...] {text[-tail:]}"


# ---- commands -------------------------------------------------------------------------


@runs_app.command("list")
def list_runs(
    group: Annotated[str | None, typer.Option(help="Only runs of this sweep/ablation.")] = None,
    status: Annotated[
        str | None, typer.Option(help="running, finished, failed, diverged, interrupted or stale.")
    ] = None,
    tag: Annotated[str | None, typer.Option(help="Only runs with this tag.")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many (newest first).")] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column on one line, even past the terminal's width.")
    ] = False,
    db: DbOption = None,
) -> None:
    """List runs, newest first."""
    if status is not None and status not in SHOWN_STATUSES:
        raise UserError(f"unknown status '{status}' (expected one of {', '.join(SHOWN_STATUSES)})")
    if limit is not None and limit < 1:
        raise UserError("--limit must be at least 1")
    registry = open_registry(db)
    runs = registry.list_runs(group=group, status=status, tag=tag, limit=limit)
    if not runs:
        filtered = any(x is not None for x in (group, status, tag))
        console().print("No runs match." if filtered else "No runs yet. Start one with `grpoctl train`.")
        return
    ids = [r.id for r in runs]
    last, curves = registry.last_metrics(ids, (REWARD_METRIC,)), registry.eval_curves(ids)
    now = utcnow()
    listing = FitTable(
        [
            Column("id", right=True, key=True),
            Column("name", wrap="name", key=True),
            Column("group", wrap="name", secondary=True),
            Column("status"),
            Column("step", right=True, secondary=True),
            Column("eval acc", right=True),
            Column("reward", right=True, secondary=True),
            Column("created", secondary=True),
            Column("duration", secondary=True),
        ],
        title=f"{len(runs)} run{'s' if len(runs) != 1 else ''}",
        fit=False if wide else None,
        left_out="--wide shows them",
    )
    for run in runs:
        status = effective_status(run, now)
        listing.add_row(
            str(run.id),
            run.name,
            run.group or "",
            (status, STATUS_STYLES.get(status, "")),
            _progress(run),
            format_number(_accuracy(curves[run.id])),
            format_number(last[run.id].get(REWARD_METRIC)),
            _when(run.created_at, short=True),
            _duration(run, now),
        )
    console().print(listing, crop=False)


@runs_app.command("show")
def show(
    run_ref: RunArgument,
    format: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    db: DbOption = None,
) -> None:
    """Show one run: its settings, config diff, last metrics, evals and checkpoints."""
    if format not in ("text", "json"):
        raise UserError(f"--format must be 'text' or 'json', not '{format}'")
    registry = open_registry(db)
    run = registry.get_run(run_ref)
    if format == "json":
        _show_json(registry, run)
    else:
        _show_text(registry, run)


def _show_json(registry: Registry, run: Run) -> None:
    record = _jsonable(run)
    record["config"] = json.loads(run.config)
    record["config_diff"] = json.loads(run.config_diff)
    record["data_fingerprint"] = json.loads(run.data_fingerprint or "{}")
    record["effective_status"] = effective_status(run)
    record["tags"] = registry.tags(run.id)
    evals = []
    for result in registry.evals(run.id):
        row = _jsonable(result)
        row["decoding"] = json.loads(result.decoding or "{}")
        if result.outcomes is not None:  # right samples per problem, in the problems' id order
            decoded = decode_outcomes(result.outcomes)
            row["outcomes"] = {"samples": decoded.samples, "correct": decoded.correct, "levels": decoded.levels}
        evals.append(row)
    document = {
        "run": record,
        "metrics": {
            name: [[step, json_safe(value)] for step, value in points]
            for name, points in registry.metric_series(run.id).items()
        },
        "evals": evals,
        "checkpoints": [_jsonable(c) for c in registry.checkpoints(run.id, include_deleted=True)],
    }
    typer.echo(json.dumps(document, indent=2, allow_nan=False))


def _data_line(run: Run) -> str | None:
    """The run's data fingerprint in one line; None for runs recorded before it existed."""
    data = json.loads(run.data_fingerprint or "{}")
    if not data:
        return None
    train, held_out = data.get("train", {}), data.get("eval", {})

    def dropped(side: dict) -> str:
        count = side.get("overlong_dropped", 0)
        return f", {count} dropped as overlong" if count else ""

    parts = []
    if train.get("hash"):
        drawn = ", drawn by a level curriculum" if train.get("curriculum") else ""
        parts.append(f"train {train['hash']} ({train.get('problems', 0)} problems{dropped(train)}{drawn})")
    parts.append(f"eval {held_out.get('hash', '?')} (subset {held_out.get('subset', 0)}{dropped(held_out)})")
    return "  ".join(parts)


def _show_text(registry: Registry, run: Run) -> None:
    console().print(_run_panel(registry, run))
    _print_config_diff(run)
    _print_last_metrics(registry, run)
    _print_evals_and_checkpoints(registry, run)


def _run_panel(registry: Registry, run: Run) -> Panel:
    """Who the run is: its status, group, progress, seed, times, machine, code, data, paths, tags."""
    now = utcnow()
    title = Text.assemble((f"run {run.id}  ", "dim"), (run.name, "bold"), "  ", _status(run, now))
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="dim")
    fields.add_column()
    tags = registry.tags(run.id)
    for label, value in (
        ("group", f"{run.group}  (variant {run.variant})" if run.group else None),
        ("steps", f"{_progress(run)} done"),
        ("seed", str(run.seed)),
        ("created", f"{_when(run.created_at)}  ({_duration(run, now)})"),
        ("finished", _when(run.finished_at) if run.finished_at else None),
        ("heartbeat", _when(run.heartbeat_at) if run.status == "running" else None),
        ("host", f"{run.host}  ({run.device})"),
        ("code", f"grpoctl {run.version}" + (f"  git {run.git_commit[:12]}" if run.git_commit else "")),
        ("data", _data_line(run)),
        ("output", run.output_dir),
        ("from", run.parent),
        ("tags", ", ".join(tags) if tags else None),
        ("error", Text(run.error, style="red") if run.error else None),
    ):
        if value is not None:
            fields.add_row(label, value if isinstance(value, Text) else Text(value))
    return Panel(fields, title=title, title_align="left")


def _print_config_diff(run: Run) -> None:
    diff = list(flatten(json.loads(run.config_diff)).items())  # config diffs read best as dotted keys
    console().print("[bold]Config diff from defaults[/]" + ("" if diff else ": none"))
    for key, value in diff:
        console().print(Text.assemble(("  " + key, "cyan"), f" = {json.dumps(value)}"))


def _print_last_metrics(registry: Registry, run: Run) -> None:
    last = registry.last_metrics([run.id])[run.id]
    if last:
        console().print(f"\n[bold]Last metrics[/] (step {run.last_step})")
        table = Table.grid(padding=(0, 2))
        table.add_column(style="dim")
        table.add_column(justify="right")
        for name in sorted(last):
            table.add_row(name, format_number(last[name], 4))
        console().print(table)


def _print_evals_and_checkpoints(registry: Registry, run: Run) -> None:
    evals = registry.evals(run.id)
    if evals:
        table = FitTable(
            [
                Column("step", right=True, key=True),
                Column("n", right=True),
                Column("accuracy", right=True),
                Column("format", right=True),
                Column("mean len", right=True),
                Column("data", wrap="name", secondary=True),
                Column("grader", wrap="words", secondary=True),
            ],
            title="Evals",
        )
        for e in evals:
            table.add_row(
                "-" if e.step is None else str(e.step),
                str(e.n),
                format_number(e.accuracy),
                format_number(e.format_rate),
                f"{e.mean_response_length:.0f}",
                f"{e.eval_set}: {e.data_source}" if e.eval_set else e.data_source,  # eval.sets' name
                e.grader,
            )
        console().print(table, crop=False)

    checkpoints = registry.checkpoints(run.id, include_deleted=True)
    if checkpoints:
        table = FitTable(
            [
                Column("step", right=True, key=True),
                Column("path", wrap="name"),
                Column("eval acc", right=True),
                Column("on disk"),
            ],
            title="Checkpoints",
        )
        for c in checkpoints:
            table.add_row(str(c.step), c.path, format_number(c.eval_accuracy), "deleted" if c.deleted else "yes")
        console().print(table, crop=False)


@runs_app.command("samples")
def samples(
    run_ref: RunArgument,
    step: Annotated[int | None, typer.Option(help="GRPO step [default: the latest with samples].")] = None,
    kind: Annotated[str | None, typer.Option(help="train or eval.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many completions.")] = 4,
    db: DbOption = None,
) -> None:
    """Read a run's stored completions: prompt, response, ground truth and rewards."""
    if kind is not None and kind not in ("train", "eval"):
        raise UserError(f"--kind must be 'train' or 'eval', not '{kind}'")
    if limit < 1:
        raise UserError("--limit must be at least 1")
    registry = open_registry(db)
    run = registry.get_run(run_ref)
    if step is None:  # the latest step that stored any (of this kind)
        latest = registry.samples(run.id, kind=kind, limit=1)
        step = latest[0].step if latest else None
    rows = registry.samples(run.id, step=step, kind=kind, limit=limit) if step is not None else []
    if not rows:
        where = f" at step {step}" if step is not None else ""
        console().print(f"Run '{run.name}' has no {kind + ' ' if kind else ''}samples{where}.", markup=False)
        return
    for sample in rows:
        style = "green" if sample.reward > 0 else "red"
        title = Text.assemble(
            f"step {sample.step} · {sample.kind} · ",
            (f"reward {format_number(sample.reward, 2)}", f"bold {style}"),
            f" (format {format_number(sample.format_reward, 2)}, answer {format_number(sample.answer_reward, 2)})",
        )
        body = Group(
            Text("prompt", style="dim"),
            Text(_clip(sample.prompt)),
            Text("\nresponse", style="dim"),
            Text(sample.response),
            Text.assemble(("\nground truth  ", "dim"), (sample.ground_truth, "bold")),
        )
        console().print(Panel(body, title=title, title_align="left", border_style=style))


@runs_app.command("tag")
def tag(
    run_ref: RunArgument,
    tag_name: Annotated[str, typer.Argument(metavar="TAG", help="The tag, e.g. best or broken.")],
    remove: Annotated[bool, typer.Option("--remove", help="Remove the tag instead.")] = False,
    db: DbOption = None,
) -> None:
    """Tag a run (or untag it with --remove); `runs list --tag` filters on tags."""
    registry = open_registry(db, write=True)
    run = registry.get_run(run_ref)
    if remove:
        registry.remove_tag(run.id, tag_name)
        console().print(f"Removed tag '{tag_name}' from run '{run.name}'.", markup=False)
    else:
        registry.add_tag(run.id, tag_name)
        console().print(f"Tagged run '{run.name}' with '{tag_name}'.", markup=False)


def _unsafe_to_delete(path: Path) -> bool:
    # An output_dir of "." or "~" (a config typo) must not take the project with it.
    resolved = path.resolve()
    protected = (Path.cwd().resolve(), Path.home().resolve())
    return resolved == resolved.parent or any(p == resolved or p.is_relative_to(resolved) for p in protected)


@runs_app.command("rm")
def remove(
    run_ref: RunArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOption = None,
) -> None:
    """Delete a run from the registry, with its checkpoints and output directory on disk."""
    registry = open_registry(db, write=True)
    run = registry.get_run(run_ref)
    paths = [c.path for c in registry.checkpoints(run.id, include_deleted=True)]
    paths += [run.output_dir] if run.output_dir else []
    on_disk = [Path(p) for p in dict.fromkeys(paths) if Path(p).exists()]
    # Checkpoints usually live inside output_dir: removing it covers them.
    on_disk = [p for p in on_disk if not any(o != p and p.is_relative_to(o) for o in on_disk)]
    if not yes:
        plural = "s" if len(on_disk) != 1 else ""
        what = f" and {len(on_disk)} path{plural} on disk" if on_disk else ""
        console().print(f"Run {run.id} '{run.name}' ({effective_status(run)}, {_progress(run)} steps)", markup=False)
        for path in on_disk:
            console().print(f"  {path}", markup=False)
        typer.confirm(f"Delete run '{run.name}'{what}?", abort=True)
    registry.delete_run(run.id)
    where = registry.url.render_as_string()
    console().print(f"Deleted run {run.id} '{run.name}' from {where}.", markup=False)
    for path in on_disk:
        if _unsafe_to_delete(path):
            console().print(f"[yellow]Kept {escape(str(path))}: it holds the current or home directory.[/]")
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        console().print(f"Removed {path}", markup=False)
