"""What `grpoctl sweep` shows: the plan, a live table of its members, and the summary.

On a terminal the table redraws in place; elsewhere (a log file, CI) each member gets a
line when it starts and one when it ends. A member's state and step come from the
registry, so the table is the same whether members run here or on a Ray cluster.
"""

from __future__ import annotations

import shlex
import time

from rich.console import Console
from rich.live import Live

from grpoctl import metrics
from grpoctl.formatting import format_number
from grpoctl.registry import Registry, effective_status
from grpoctl.sweep.launcher import Watcher
from grpoctl.sweep.planning import Job, SweepResult, existing_runs
from grpoctl.sweep.spec import SweepPlan, describe_base
from grpoctl.views.fit_table import Column, FitTable

POLL_S = 1.0
UNFINISHED = ("queued", "running")


class SweepView(Watcher):
    def __init__(self, plan: SweepPlan, registry: Registry, console: Console) -> None:
        self.plan, self.registry, self.console = plan, registry, console
        self.result = SweepResult()
        self._live: Live | None = None
        self._polled = 0.0
        self._runs: dict = {}
        self._announced: set[str] = set()

    def _say(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def skipped(self, result: SweepResult) -> None:
        self.result = result
        for variant, why, run in result.skipped:
            self._say(f"skip {run.name if run else variant.label}: {why}")
        if result.jobs and self.console.is_terminal:
            self._live = Live(self.render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def started(self, job: Job) -> None:
        self._announced.add(job.run_name)
        if self._live is None:
            where = f" on GPU {job.where}" if job.where else ""
            self._say(f"start {job.run_name} ({job.action}){where}, log: {job.log}")

    def finished(self, job: Job) -> None:
        if self._live is None:
            if job.run_name not in self._announced:  # it ran between two looks at the registry
                self._announce(job)
            self._say(f"done  {job.run_name}: {job.outcome}{self._where_it_ran(job)}")

    def _where_it_ran(self, job: Job) -> str:
        """' (on HOST)': the machine of the member's last attempt, from its stored log (a
        retried member may end on another node than it started on)."""
        try:
            host = self.registry.last_log_host(job.run_name)
        except Exception:  # a registry gone away: the outcome is what matters
            return ""
        return f" (on {host})" if host else ""

    def _announce(self, job: Job) -> None:
        self._announced.add(job.run_name)
        run = self._runs.get(job.run_name) or self.registry.runs_named([job.run_name]).get(job.run_name)
        # The claim's holder is the machine training it now (run.host made it: a resume
        # on another node is announced where it runs).
        where = f" on {run.claim_host or run.host}" if run is not None else ""
        self._say(f"start {job.run_name} ({job.action}){where}; `grpoctl runs logs {job.run_name}`")

    def refresh(self) -> None:
        self._poll()
        if self._live is not None:
            self._live.update(self.render())
            return
        for job in self.result.jobs:  # members started elsewhere (on Ray): seen in the registry
            run = self._runs.get(job.run_name)
            if job.run_name not in self._announced and run is not None and run.status == "running":
                self._announce(job)

    def note(self, text: str) -> None:
        self._say(f"note  {text}")

    def interrupting(self, count: int) -> None:
        self._stop_live()
        self._say(f"interrupting {count} running run(s); waiting for them to record it...")

    def close(self) -> None:
        if self._live is not None:
            self._polled = 0.0
            self._poll()
            self._live.update(self.render())
        self._stop_live()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _poll(self) -> None:
        if time.monotonic() - self._polled < POLL_S:
            return
        self._polled = time.monotonic()
        try:
            self._runs = self.registry.runs_named(j.run_name for j in self.result.jobs)
        except Exception:  # a busy registry: show what we had
            pass

    def state(self, job: Job) -> str:
        if job.outcome not in UNFINISHED:
            return job.outcome
        run = self._runs.get(job.run_name)
        return "running" if job.outcome == "running" or (run is not None and run.status == "running") else "queued"

    def render(self) -> FitTable:
        jobs = self.result.jobs
        done = sum(1 for j in jobs if j.outcome not in UNFINISHED)
        table = FitTable(
            [
                Column("variant", wrap="name", key=True),
                Column("seed", right=True, secondary=True),
                Column("run", wrap="name"),
                Column("state", wrap="words"),
                Column("step", right=True),
                Column("host", wrap="name", secondary=True),
                Column("elapsed", right=True, secondary=True),
            ],
            title=f"sweep {self.plan.name}: {done}/{len(jobs)} done ({len(self.result.skipped)} skipped)",
        )
        for job in jobs:
            run = self._runs.get(job.run_name)
            # Step 0 is the eval before training.
            step = f"{max(run.last_step, 0)}/{run.total_steps}" if run is not None and run.total_steps else ""
            state = self.state(job)
            elapsed = f"{time.monotonic() - job.started:.0f}s" if job.started and state == "running" else ""
            host = (run.host + (f" GPU {job.where}" if job.where else "")) if run is not None else ""
            table.add_row(job.variant.label, str(job.variant.seed), job.run_name, state, step, host, elapsed)
        return table


def summary_table(plan: SweepPlan, result: SweepResult, registry: Registry) -> FitTable:
    """Each variant, its run, status and final eval accuracy (print it with crop=False:
    off a terminal its rows stay whole)."""
    by_hash = existing_runs(plan, registry)
    ids = [r.id for r in by_hash.values()]
    last = registry.last_metrics(ids, [metrics.EVAL_ACCURACY]) if ids else {}
    table = FitTable(
        [
            Column("variant", wrap="name", key=True),
            Column("seed", right=True, secondary=True),
            Column("run", wrap="name"),
            Column("status", wrap="words"),  # a member's outcome can be an error's message
            Column("steps", right=True, secondary=True),
            Column("eval accuracy", right=True),
        ],
        title=f"{plan.kind} {plan.name}",
    )
    outcomes = {job.variant.config_hash: job.outcome for job in result.jobs}
    for variant in plan.variants:
        run = by_hash.get(variant.config_hash)
        if run is None:  # its trainer died before creating the run (see its log), or never ran
            why = outcomes.get(variant.config_hash, "not run")
            table.add_row(variant.label, str(variant.seed), "-", "not started" if why == "queued" else why, "", "")
            continue
        accuracy = last.get(run.id, {}).get(metrics.EVAL_ACCURACY)
        status = effective_status(run)
        if status == "running" and outcomes.get(variant.config_hash, "queued") not in UNFINISHED:
            # Its member is over but the row was left running (a trainer lost with its
            # database link): what became of the member, not a status nobody is writing.
            status = outcomes[variant.config_hash]
        table.add_row(
            variant.label,
            str(variant.seed),
            run.name,
            status,
            f"{max(run.last_step, 0)}/{run.total_steps}",
            "" if accuracy is None else format_number(accuracy),
        )
    return table


def show_plan(
    plan: SweepPlan, decided: SweepResult, command: list[str], db: str, executor: str, console: Console
) -> None:
    """What a real invocation would do, as the commands each member's trainer would get."""
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    where = " on Ray (one GPU each, where the cluster has room)" if executor == "ray" else ""
    say(f"{plan.kind} {plan.name}: {len(plan.variants)} run(s){where}")
    say(f"  base    {describe_base(plan)}")
    for variant, why, _run in decided.skipped:
        say(f"  skip    {variant.label} (seed {variant.seed}): {why}")
    for job in decided.jobs:
        say(
            f"  {job.action:7} {job.variant.label} (seed {job.variant.seed}, {job.variant.config_hash})\n"
            f"          {shlex.join(command + job.train_args(db))}"
        )
