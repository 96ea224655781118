"""`grpoctl sweep`: one run per value of a parameter, or per variant of an ablation spec.

    grpoctl sweep lr --values 1e-6..1e-4 --config experiments/h100.yaml steps=100
    grpoctl sweep experiments/baseline-ablation.yaml --parallel 2
    grpoctl sweep lr --values 1e-6..1e-4 --executor ray --ray-address HEAD:6379 --db postgresql+psycopg://...

Everything is resolved and validated before the registry is touched (and, with
`--executor ray`, the cluster checked); re-running the same command later skips
finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError
from grpoctl.rules import check_claim_timings


def sweep(
    target: Annotated[
        str,
        typer.Argument(
            metavar="PARAM|SPEC.yaml",
            help="A config key to sweep (short alias like lr, or a dotted path), or an ablation spec file.",
        ),
    ],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(metavar="[KEY=VALUE]...", help="Overrides applied to every run.", show_default=False),
    ] = None,
    values: Annotated[
        str | None,
        typer.Option("--values", "-v", help="a..b (1-3-10 log series), a..b:n (n log-spaced points) or a,b,c."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            help="Base config yaml or built-in name (default: lab, as for train; for a spec: replaces its base).",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel", "-p", help="Runs at once, as separate processes (one per GPU when there are several)."
        ),
    ] = 1,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Sweep name, also the runs' group (default: PARAM-sweep, or the spec's name)."),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Repeat every variant with each seed, e.g. 0,1,2; or auto: an internal pilot sizes the sweep "
            "for its spec's declared effects.",
        ),
    ] = None,
    pilot_seeds: Annotated[
        int | None, typer.Option("--pilot-seeds", help="With --seeds auto: seeds per arm in the pilot (default 3).")
    ] = None,
    max_seeds: Annotated[
        int | None, typer.Option("--max-seeds", help="With --seeds auto: the most seeds per arm (default 12).")
    ] = None,
    first_seed: Annotated[
        int | None, typer.Option("--first-seed", help="With --seeds auto: the first seed (default 0).")
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Run failed and diverged variants again: a failed run with a checkpoint resumes from it, "
            "any other starts as a new run.",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would run, and how; run nothing.")] = False,
    executor: Annotated[
        str,
        typer.Option("--executor", help="local (processes on this machine) or ray (a task per run on a Ray cluster)."),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="The Ray cluster to join (default: $RAY_ADDRESS, else a new local one).",
            show_default=False,
        ),
    ] = None,
    max_retries: Annotated[
        int,
        typer.Option("--max-retries", help="With --executor ray: attempts after a member's trainer or node is lost."),
    ] = 3,
    cpus_per_run: Annotated[
        int | None,
        typer.Option(
            "--cpus-per-run",
            help="With --executor ray: CPUs each run reserves (default: its runtime.threads, else 1).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Run a sweep or an ablation: every variant a run in the registry, grouped by name."""
    overrides = list(overrides or [])
    for item in overrides:
        if "=" not in item:
            raise UserError(f"unexpected argument '{item}': overrides are key=value")
    _check_executor(executor, parallel, ray_address, max_retries, cpus_per_run)
    check_claim_timings()  # its members' trainers read them too: refused here, before any plan or row
    auto = _auto_seeds(target, values, seeds, pilot_seeds, max_seeds, first_seed)
    if auto is not None:
        _sweep_auto(target, overrides, name, config, auto, parallel, retry_failed, dry_run, executor, db)
        return
    plan = _plan(target, values, overrides, seeds, name, config)

    from rich.console import Console

    from grpoctl.cli.sweep_view import SweepView, summary_table
    from grpoctl.registry import Registry
    from grpoctl.sweep import launcher

    console = Console()
    if dry_run:
        _show_plan(plan, db, executor, console)
        return
    cluster = _join_cluster(db, ray_address, max_retries, cpus_per_run) if executor == "ray" else None
    try:
        with Registry(db) as registry:
            result = launcher.run_sweep(
                plan,
                registry,
                parallel=parallel,
                retry_failed=retry_failed,
                watcher=SweepView(plan, registry, console),
                cluster=cluster,
            )
            console.print(summary_table(plan, result, registry), crop=False)
    finally:
        if cluster is not None:
            cluster.close()
    _say_how_it_ended(plan, result, db, registry.public_url, console)


def _auto_seeds(target: str, values, seeds, pilot_seeds, max_seeds, first_seed):
    """What `--seeds auto` asks for (None without it), checked; its options need it."""
    from grpoctl.sweep import auto_seeds

    if seeds != auto_seeds.AUTO:
        for flag, given in (("--pilot-seeds", pilot_seeds), ("--max-seeds", max_seeds), ("--first-seed", first_seed)):
            if given is not None:
                raise UserError(f"{flag} goes with --seeds auto")
        return None
    default = auto_seeds.AutoSeeds()
    auto = auto_seeds.AutoSeeds(
        default.pilot if pilot_seeds is None else pilot_seeds,
        default.maximum if max_seeds is None else max_seeds,
        default.first if first_seed is None else first_seed,
    )
    auto_seeds.check_auto(target, values, auto)
    return auto


def _sweep_auto(target, overrides, name, config, auto, parallel, retry_failed, dry_run, executor, db) -> None:
    """`--seeds auto`: the pilot, the blinded re-estimate, the remaining seeds (sweep/auto_seeds.py)."""
    from rich.console import Console

    from grpoctl.analysis import internal_pilot
    from grpoctl.cli.sweep_view import SweepView, summary_table
    from grpoctl.registry import NoRegistry, Registry
    from grpoctl.sweep import auto_seeds, launcher

    if executor != "local":
        raise UserError("--seeds auto runs with the local executor")
    auto_seeds.sized_findings(target)
    pilot = auto_seeds.plan_for(target, overrides, name, config, auto, auto.pilot)
    console = Console()
    try:
        reader = Registry(db, must_exist=True, readonly=True)
    except NoRegistry:
        reader = None
    try:
        design = auto_seeds.recorded_design(reader, pilot, auto)
    finally:
        if reader is not None:
            reader.close()
    if dry_run:
        for line in internal_pilot.describe(design) or [f"pilot: {auto.pilot} seeds per arm, then the re-estimate"]:
            console.print(line, highlight=False, soft_wrap=True)
        shown = (
            pilot
            if "final" not in design
            else auto_seeds.plan_for(target, overrides, name, config, auto, design["final"])
        )
        _show_plan(shown, db, executor, console)
        return

    def say(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    with Registry(db) as registry:

        def run_stage(plan):
            result = launcher.run_sweep(
                plan, registry, parallel=parallel, retry_failed=retry_failed, watcher=SweepView(plan, registry, console)
            )
            console.print(summary_table(plan, result, registry), crop=False)
            return result

        plan, result = auto_seeds.run_auto(target, overrides, name, config, auto, registry, run_stage, say)
    _say_how_it_ended(plan, result, db, registry.public_url, console)


def _plan(target: str, values: str | None, overrides: list[str], seeds: str | None, name: str | None, config):
    """The sweep's plan: an ablation spec's variants, or one parameter's values."""
    from grpoctl.sweep import spec

    if target.endswith((".yaml", ".yml")) or Path(target).is_file():
        if values is not None:
            raise UserError("--values is for a parameter sweep; an ablation spec lists its own variants")
        return spec.ablation(target, overrides, seeds=seeds, name=name, base=config)
    if values is None:
        raise UserError(
            f"give the values to try, e.g. `grpoctl sweep {target} --values 1e-6..1e-4`"
            " (or pass an ablation spec .yaml)"
        )
    return spec.param_sweep(target, values, base=config, overrides=overrides, seeds=seeds, name=name)


def _say_how_it_ended(plan, result, db: str | None, public_url: str, console) -> None:
    """The last line: how to resume (exit 130), how to retry what failed (exit 1), or how to compare."""
    again = shlex.join(["grpoctl", *sys.argv[1:]])
    if result.interrupted:
        console.print(f"interrupted. Run `{again}` again to resume where it stopped.", highlight=False, soft_wrap=True)
        raise SystemExit(130)
    failed = result.not_ended()
    if failed:
        console.print(
            f"{len(failed)} run(s) did not finish ({', '.join(sorted({j.outcome for j in failed}))}): see their "
            f"logs ({failed[0].log.parent}/); `{again} --retry-failed` runs them again.",
            highlight=False,
            soft_wrap=True,
        )
        raise SystemExit(1)
    where = "" if db is None else " --db " + shlex.quote(public_url)
    console.print(f"compare them: grpoctl compare {plan.name}{where}", highlight=False, soft_wrap=True)


def _check_executor(
    executor: str, parallel: int, ray_address: str | None, max_retries: int, cpus_per_run: int | None
) -> None:
    if executor not in ("local", "ray"):
        raise UserError(f"--executor must be local or ray, not '{executor}'")
    if parallel < 1:
        raise UserError(f"--parallel must be at least 1, got {parallel}")
    if executor == "local":
        for flag, given in (
            ("--ray-address", ray_address is not None),
            ("--max-retries", max_retries != 3),
            ("--cpus-per-run", cpus_per_run is not None),
        ):
            if given:
                raise UserError(f"{flag} goes with --executor ray")
        return
    if parallel != 1:
        raise UserError(
            "--parallel is for the local executor: on Ray each run takes one GPU (or CPUs, "
            "--cpus-per-run) and runs when the cluster has room"
        )
    if max_retries < 0:
        raise UserError(f"--max-retries must be 0 or more, got {max_retries}")
    if cpus_per_run is not None and cpus_per_run < 1:
        raise UserError(f"--cpus-per-run must be at least 1, got {cpus_per_run}")


def _join_cluster(db: str | None, address: str | None, max_retries: int, cpus_per_run: int | None):
    """Connect to Ray and check the cluster, before the registry is created or written."""
    from grpoctl.registry import Registry
    from grpoctl.registry.engine import resolve_url

    Registry.check(db, write=True)
    try:
        from grpoctl.sweep.on_ray import RayCluster
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'grpoctl[ray]'") from None
    return RayCluster(resolve_url(db), address, max_retries=max_retries, cpus_per_run=cpus_per_run)


def _show_plan(plan, db: str | None, executor: str, console) -> None:
    """What a real invocation would do, without writing anything (not even a new registry)."""
    from grpoctl.cli.sweep_view import show_plan
    from grpoctl.registry import NoRegistry, Registry
    from grpoctl.registry.engine import public_url, resolve_url
    from grpoctl.sweep.member import train_command
    from grpoctl.sweep.planning import decide

    try:
        registry = Registry(db, must_exist=True, readonly=True)
    except NoRegistry:  # no registry yet: everything is new
        registry = None
    db_url = registry.public_url if registry is not None else public_url(resolve_url(db))
    decided = decide(plan, registry, retry_failed=False, log_root=Path("outputs/sweeps"))
    if registry is not None:
        registry.close()
    show_plan(plan, decided, train_command(), db_url, executor, console)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
