"""Run a sweep's variants as `grpoctl train` child processes, and pick up where it stopped.

Each run is its own process (`python -m grpoctl train BASE.yaml key=value ... --db URL`),
so a crash, an OOM or a diverged run takes down only itself, and every run can be
re-run by hand from the command line printed in its log. The parent only decides what
to run, starts children, watches the registry, and prints a summary.

Re-invoking a sweep looks at each variant's run (found by config hash, see
registry/sweeps.py): finished runs are skipped, stale or interrupted ones are resumed
from their last checkpoint (`--resume RUN`), failed or diverged ones are retried as a new
run only with `--retry-failed` (a diverged lr=1e-4 is a result, not an accident).

Children get the registry's URL without its password (`--db` in argv is visible to
every user through `ps`, and lands in the logs and the printed plan); a password given
in the parent's URL reaches them as $PGPASSWORD in their environment, where libpq looks
for it, as it does for ~/.pgpass.

No torch here: counting GPUs goes through $CUDA_VISIBLE_DEVICES or `nvidia-smi -L`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table
from sqlmodel import Session, select

from grpoctl.errors import UserError
from grpoctl.registry import Registry, Run, effective_status
from grpoctl.sweep.spec import SweepPlan, Variant
from grpoctl.train.threads import THREADS_ENV, per_child_cap

# How long children get to record "interrupted" (and save what they save) after Ctrl-C.
INTERRUPT_GRACE_S = 120
POLL_S = 0.25


def train_command() -> list[str]:
    """The command that trains one run; $GRPOCTL_TRAIN_CMD replaces it (tests use a fake)."""
    custom = os.environ.get("GRPOCTL_TRAIN_CMD")
    if custom:
        return shlex.split(custom)
    return [sys.executable, "-m", "grpoctl", "train"]


def gpu_ids() -> list[str]:
    """The GPUs children may be pinned to, without importing torch in the parent."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        return [] if ids in ([], ["-1"]) else ids
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)]


@dataclass
class Job:
    variant: Variant
    action: str  # "new", "resume" or "retry"
    run_name: str
    args: list[str]  # after the train command
    log: Path
    proc: subprocess.Popen | None = None
    gpu: str | None = None
    started: float = 0.0
    outcome: str = "queued"  # then "running", then the run's final status


@dataclass
class SweepResult:
    jobs: list[Job] = field(default_factory=list)
    skipped: list[tuple[Variant, str, Run | None]] = field(default_factory=list)  # (variant, why, run)
    interrupted: bool = False


# --------------------------------------------------------------------------- what to run


def existing_runs(plan: SweepPlan, registry: Registry) -> dict[str, Run]:
    """{config_hash: run} for the plan's variants that some run already answers."""
    try:
        members = registry.sweep_members(plan.name)
    except UserError:  # no such sweep yet: nothing ran
        return {}
    return {m.config_hash: run for m, run in members if run is not None}


def decide(plan: SweepPlan, registry: Registry, retry_failed: bool,
           log_root: Path) -> SweepResult:
    """Split the plan into jobs to start and variants to leave alone (with why)."""
    runs = existing_runs(plan, registry)
    taken = _names_taken(registry, [v.run_name for v in plan.variants])
    db = registry.public_url
    result = SweepResult()
    for variant in plan.variants:
        run = runs.get(variant.config_hash)
        status = effective_status(run) if run else None
        if status == "running" and registry.claimable(run):
            status = "stale"  # its trainer's claim is dead (expired, or its process is gone)
        if run is None or (status in ("failed", "diverged") and retry_failed):
            name = _fresh_name(variant.run_name, taken)
            taken.add(name)
            args = plan.train_args(variant, name) + ["--db", db]
            action = "new" if run is None else "retry"
        elif status in ("stale", "interrupted"):
            name, args, action = run.name, ["--resume", run.name, "--db", db], "resume"
        else:
            why = {
                "finished": "finished",
                "running": "running elsewhere",
                "failed": "failed (--retry-failed to run it again)",
                "diverged": "diverged (--retry-failed to run it again)",
            }.get(status, status)
            result.skipped.append((variant, why, run))
            continue
        log = log_root / plan.name / f"{name}.log"
        result.jobs.append(Job(variant, action, name, args, log))
    return result


def _names_taken(registry: Registry, names: list[str]) -> set[str]:
    """Names in use among the plan's names and their retries (NAME-r2, NAME-r3, ...)."""
    taken: set[str] = set()
    with Session(registry.engine) as session:
        for name in names:
            query = select(Run.name).where(Run.name.startswith(name, autoescape=True))
            taken |= set(session.exec(query))
    return taken


def _fresh_name(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    attempt = 2
    while f"{name}-r{attempt}" in taken:
        attempt += 1
    return f"{name}-r{attempt}"


# --------------------------------------------------------------------------- running


def run_sweep(plan: SweepPlan, registry: Registry, *, parallel: int = 1,
              retry_failed: bool = False, log_root: Path = Path("outputs/sweeps"),
              console: Console | None = None) -> SweepResult:
    """Record the sweep and its members, then run what is left to run."""
    console = console or Console()
    sweep = registry.get_or_create_sweep(plan.name, plan.kind, plan.spec)
    for variant in plan.variants:
        registry.add_sweep_member(sweep.id, variant.config_hash, variant.label, variant.seed)

    result = decide(plan, registry, retry_failed, log_root)
    for variant, why, run in result.skipped:
        console.print(f"skip {run.name if run else variant.label}: {why}", highlight=False, soft_wrap=True)
    if not result.jobs:
        return result

    gpus = gpu_ids()
    pin = len(gpus) > 1  # one GPU (or none): children see it as it is
    command = train_command()
    pending: deque[Job] = deque(result.jobs)
    running: list[Job] = []
    view = _View(plan, result, registry)
    live = Live(view.render(), console=console, refresh_per_second=2, transient=False) \
        if console.is_terminal else None

    def start(job: Job) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        if parallel > 1 and THREADS_ENV not in os.environ:
            # Concurrent children share the cores instead of each taking all of them.
            env[THREADS_ENV] = str(per_child_cap(parallel))
        if registry.url.password:  # not in argv: see the module docstring
            env["PGPASSWORD"] = str(registry.url.password)
        if pin:
            load = {g: sum(1 for j in running if j.gpu == g) for g in gpus}
            job.gpu = min(gpus, key=lambda g: load[g])
            env["CUDA_VISIBLE_DEVICES"] = job.gpu
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log, "a") as log:
            stamp = datetime.now().isoformat(timespec="seconds")
            log.write(f"# {stamp} {job.action}: {shlex.join(command + job.args)}\n")
            log.flush()
            # A session of its own: the terminal's Ctrl-C reaches only the parent, which
            # forwards exactly one SIGINT (a second one would make the trainer hard-stop).
            job.proc = subprocess.Popen(command + job.args, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        job.started, job.outcome = time.monotonic(), "running"
        running.append(job)
        if live is None:
            where = f" on GPU {job.gpu}" if job.gpu else ""
            console.print(f"start {job.run_name} ({job.action}){where}, log: {job.log}",
                          highlight=False, soft_wrap=True)

    def reap(job: Job) -> None:
        job.outcome = _record_exit(registry, job)
        running.remove(job)
        if live is None:
            console.print(f"done  {job.run_name}: {job.outcome}", highlight=False, soft_wrap=True)

    previous = _stop_on_sigterm()
    try:
        if live:
            live.start()
        while pending or running:
            while pending and len(running) < max(1, parallel):
                start(pending.popleft())
            for job in [j for j in running if j.proc.poll() is not None]:
                reap(job)
            if live:
                live.update(view.render())
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        result.interrupted = True
        if live:
            live.stop()
            live = None
        console.print(f"interrupting {len(running)} running run(s); waiting for them to record it...",
                      highlight=False, soft_wrap=True)
        _interrupt(running)
        for job in list(running):
            reap(job)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if live:
            live.update(view.render())
            live.stop()
    return result


def _stop_on_sigterm():
    """`kill PARENT` stops the sweep as cleanly as Ctrl-C does. It matters for sweeps
    started in the background (`nohup grpoctl sweep ... &`): the shell makes them ignore
    SIGINT, so SIGTERM is the only polite way left to stop them."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _interrupt(running: list[Job]) -> None:
    """SIGINT to each child's process group, then wait; a second Ctrl-C kills them."""
    for job in running:
        _signal(job, signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    try:
        for job in running:
            job.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        for job in running:
            if job.proc.poll() is None:
                _signal(job, signal.SIGKILL)
                job.proc.wait()


def _signal(job: Job, sig: int) -> None:
    try:
        os.killpg(job.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _record_exit(registry: Registry, job: Job) -> str:
    """The run's final status; a child that died without recording one is marked here."""
    code = job.proc.returncode
    with Session(registry.engine) as session:
        run = session.exec(select(Run).where(Run.name == job.run_name)).first()
    theirs = getattr(run, "pid", None) not in (None, job.proc.pid)  # e.g. the name was taken
    if run is None or (job.action != "resume" and theirs):
        return f"did not start (exit {code}, see {job.log})"
    if run.status == "running" and not theirs:
        interrupted = code in (-signal.SIGINT, 130, -signal.SIGKILL)
        status = "interrupted" if interrupted else "failed"
        registry.set_status(run.id, status, error=f"trainer exited with code {code} (see {job.log})")
        return status
    return run.status


# --------------------------------------------------------------------------- the view


class _View:
    """The live table: one row per job, with its last step read from the registry."""

    def __init__(self, plan: SweepPlan, result: SweepResult, registry: Registry) -> None:
        self.plan, self.result, self.registry = plan, result, registry
        self._polled = 0.0
        self._steps: dict[str, tuple[int, int]] = {}

    def _poll(self) -> None:
        if time.monotonic() - self._polled < 1.0:
            return
        self._polled = time.monotonic()
        names = [j.run_name for j in self.result.jobs]
        query = select(Run.name, Run.last_step, Run.total_steps).where(Run.name.in_(names))
        with Session(self.registry.engine) as session:
            self._steps = {name: (last, total) for name, last, total in session.exec(query)}

    def render(self) -> Table:
        self._poll()
        jobs = self.result.jobs
        done = sum(1 for j in jobs if j.outcome not in ("queued", "running"))
        table = Table(title=f"sweep {self.plan.name}: {done}/{len(jobs)} done"
                            f" ({len(self.result.skipped)} skipped)", title_justify="left")
        for column in ("variant", "seed", "run", "state", "step", "elapsed"):
            table.add_column(column)
        for job in jobs:
            last, total = self._steps.get(job.run_name, (-1, 0))
            step = f"{max(last, 0)}/{total}" if total else ""  # step 0 is the eval before training
            elapsed = f"{time.monotonic() - job.started:.0f}s" if job.outcome == "running" else ""
            table.add_row(job.variant.label, str(job.variant.seed), job.run_name, job.outcome,
                          step, elapsed)
        return table


def summary_table(plan: SweepPlan, result: SweepResult, registry: Registry) -> Table:
    """Each variant, its run, status and final eval accuracy."""
    by_hash = existing_runs(plan, registry)
    ids = [r.id for r in by_hash.values()]
    last = registry.last_metrics(ids, ["eval/accuracy"]) if ids else {}
    table = Table(title=f"{plan.kind} {plan.name}", title_justify="left")
    for column in ("variant", "seed", "run", "status", "steps", "eval accuracy"):
        table.add_column(column, justify="right" if column in ("steps", "eval accuracy") else "left")
    outcomes = {job.variant.config_hash: job.outcome for job in result.jobs}
    for variant in plan.variants:
        run = by_hash.get(variant.config_hash)
        if run is None:  # its trainer died before creating the run (see its log), or never ran
            why = outcomes.get(variant.config_hash, "not run")
            table.add_row(variant.label, str(variant.seed), "-", why, "", "")
            continue
        accuracy = last.get(run.id, {}).get("eval/accuracy")
        table.add_row(variant.label, str(variant.seed), run.name, effective_status(run),
                      f"{max(run.last_step, 0)}/{run.total_steps}",
                      "" if accuracy is None else f"{accuracy:.3f}")
    return table
