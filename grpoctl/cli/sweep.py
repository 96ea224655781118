"""`grpoctl sweep`: one run per value of a parameter, or per variant of an ablation spec.

    grpoctl sweep lr --values 1e-6..1e-4 --config experiments/h100.yaml steps=100
    grpoctl sweep experiments/baseline-ablation.yaml --parallel 2

Everything is resolved and validated before the registry is touched; re-running the
same command later skips finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError


def sweep(
    target: Annotated[str, typer.Argument(
        metavar="PARAM|SPEC.yaml",
        help="A config key to sweep (short alias like lr, or a dotted path), or an ablation spec file.")],
    overrides: Annotated[Optional[list[str]], typer.Argument(
        metavar="[KEY=VALUE]...", help="Overrides applied to every run.", show_default=False)] = None,
    values: Annotated[Optional[str], typer.Option(
        "--values", "-v", help="a..b (1-3-10 log series), a..b:n (n log-spaced points) or a,b,c.")] = None,
    config: Annotated[Optional[str], typer.Option(
        "--config", "-c", help="Base config yaml (for a spec: replaces its base).")] = None,
    parallel: Annotated[int, typer.Option(
        "--parallel", "-p", help="Runs at once, as separate processes (one per GPU when there are several).")] = 1,
    name: Annotated[Optional[str], typer.Option(
        "--name", help="Sweep name, also the runs' group (default: PARAM-sweep, or the spec's name).")] = None,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="Repeat every variant with each seed, e.g. 0,1,2.")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Run failed and diverged variants again (as new runs).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would run, and how; run nothing.")] = False,
    db: DbOption = None,
) -> None:
    """Run a sweep or an ablation: every variant a run in the registry, grouped by name."""
    from grpoctl.sweep import spec

    overrides = list(overrides or [])
    for item in overrides:
        if "=" not in item:
            raise UserError(f"unexpected argument '{item}': overrides are key=value")
    if parallel < 1:
        raise UserError(f"--parallel must be at least 1, got {parallel}")
    is_spec = target.endswith((".yaml", ".yml")) or Path(target).is_file()
    if is_spec:
        if values is not None:
            raise UserError("--values is for a parameter sweep; an ablation spec lists its own variants")
        plan = spec.ablation(target, overrides, seeds=seeds, name=name, base=config)
    else:
        if values is None:
            raise UserError(f"give the values to try, e.g. `grpoctl sweep {target} --values 1e-6..1e-4`"
                            " (or pass an ablation spec .yaml)")
        plan = spec.param_sweep(target, values, base=config, overrides=overrides, seeds=seeds, name=name)

    from rich.console import Console

    from grpoctl.registry import Registry
    from grpoctl.sweep import launcher

    console = Console()
    if dry_run:
        _show_plan(plan, db, console)
        return
    with Registry(db) as registry:
        result = launcher.run_sweep(plan, registry, parallel=parallel, retry_failed=retry_failed,
                                    console=console)
        console.print(launcher.summary_table(plan, result, registry))
    again = shlex.join(["grpoctl", *sys.argv[1:]])
    if result.interrupted:
        console.print(f"interrupted. Run `{again}` again to resume where it stopped.", highlight=False, soft_wrap=True)
        raise SystemExit(130)
    failed = [j for j in result.jobs if j.outcome == "failed" or j.outcome.startswith("did not start")]
    if failed:
        console.print(f"{len(failed)} run(s) failed: see their logs ({failed[0].log.parent}/); "
                      f"`{again} --retry-failed` runs them again.", highlight=False, soft_wrap=True)
        raise SystemExit(1)
    where = "" if db is None else " --db " + shlex.quote(registry.public_url)
    console.print(f"compare them: grpoctl compare {plan.name}{where}", highlight=False, soft_wrap=True)


def _show_plan(plan, db: str | None, console) -> None:
    """What a real invocation would do, without writing anything (not even a new registry)."""
    from grpoctl.registry import NoRegistry, Registry
    from grpoctl.registry.engine import public_url, resolve_url
    from grpoctl.sweep import launcher

    try:
        registry = Registry(db, must_exist=True, readonly=True)
    except NoRegistry:  # no registry yet: everything is new
        registry = None
    command = launcher.train_command()
    if registry is None:
        db_url = public_url(resolve_url(db)) if db else "registry.db"
        decided = launcher.SweepResult(jobs=[
            launcher.Job(v, "new", v.run_name, plan.train_args(v) + ["--db", db_url], Path())
            for v in plan.variants
        ])
    else:
        with registry:
            decided = launcher.decide(plan, registry, retry_failed=False, log_root=Path("outputs/sweeps"))
    console.print(f"{plan.kind} {plan.name}: {len(plan.variants)} run(s)", highlight=False, soft_wrap=True)
    for variant, why, run in decided.skipped:
        console.print(f"  skip    {variant.label} (seed {variant.seed}): {why}", highlight=False, soft_wrap=True)
    for job in decided.jobs:
        console.print(f"  {job.action:7} {job.variant.label} (seed {job.variant.seed}, {job.variant.config_hash})\n"
                      f"          {shlex.join(command + job.args)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
