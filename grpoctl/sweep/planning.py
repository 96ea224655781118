"""What a sweep has left to run, worked out from its plan and the registry.

Re-invoking a sweep looks at each variant's run (found by config hash, see
registry/sweeps.py): finished runs are skipped, stale or interrupted ones are resumed
from their last checkpoint (`--resume RUN`), failed or diverged ones are run again only
with `--retry-failed` (a diverged lr=1e-4 is a result, not an accident): a failed run
that has a checkpoint is resumed from it (it failed on something outside it, a database
outage say, and keeps its progress), any other as a new run. What
each job finally does is settled where it runs (member.py), against the registry as it
is then: a retried Ray task finds the run its previous attempt created, and resumes it.

Nothing here runs anything or imports torch or Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from grpoctl.registry import Registry, Run, effective_status
from grpoctl.sweep.member import MemberSpec
from grpoctl.sweep.spec import SweepPlan, Variant


@dataclass
class Job:
    """One variant to run, and what became of it."""

    variant: Variant
    action: str  # "new", "resume" or "retry"
    run_name: str
    config: dict  # the run's full config (spec.SweepPlan.run_config)
    log: Path  # absolute: outputs/sweeps/SWEEP/RUN.log, on the machine that runs it
    outcome: str = "queued"  # then "running", then the run's final status (or why not)
    where: str = ""  # the GPU it was pinned to, when the local executor pins
    started: float = 0.0
    retries: int = 0  # attempts the Ray driver started itself, on finding the run's claim lapsed
    retried_at: datetime = datetime.min.replace(tzinfo=UTC)

    @property
    def config_file(self) -> Path:
        # No "=" in it (lr=3e-5 is in run names): `grpoctl train` reads a first argument
        # with "=" as an override, not as the config file.
        return self.log.with_name(self.run_name.replace("=", "%3D") + ".yaml")

    def train_args(self, db: str) -> list[str]:
        """What `grpoctl train` is planned to get (a retried attempt decides again)."""
        if self.action == "resume":
            return ["--resume", self.run_name, "--db", db]
        return [str(self.config_file), "--db", db]

    def member(self, db: str, env: dict[str, str] | None = None, wait_for_claim: bool = False) -> MemberSpec:
        return MemberSpec(
            run_name=self.run_name,
            config_hash=self.variant.config_hash,
            config=self.config,
            config_file=str(self.config_file),
            log=str(self.log),
            db=db,
            action=self.action,
            cwd=os.getcwd(),
            env=dict(env or {}),
            wait_for_claim=wait_for_claim,
        )


# A member's outcome that counts as done: its run ended by its own rules. Anything else
# (failed, interrupted, lost, "error: ...", "did not start ...") makes the sweep exit 1.
ENDED_OUTCOMES = ("finished", "diverged")


@dataclass
class SweepResult:
    jobs: list[Job] = field(default_factory=list)
    skipped: list[tuple[Variant, str, Run | None]] = field(default_factory=list)  # (variant, why, run)
    interrupted: bool = False

    def not_ended(self) -> list[Job]:
        """The members that ran and did not end by their run's own rules."""
        return [job for job in self.jobs if job.outcome not in ENDED_OUTCOMES]


def record_plan(plan: SweepPlan, registry: Registry) -> None:
    """The sweep and every member it wants, by config hash (again: nothing changes)."""
    sweep = registry.get_or_create_sweep(plan.name, plan.kind, plan.spec)
    for variant in plan.variants:
        registry.add_sweep_member(sweep.id, variant.config_hash, variant.label, variant.seed)


def existing_runs(plan: SweepPlan, registry: Registry) -> dict[str, Run]:
    """{config_hash: run} for the plan's variants that some run already answers: found by
    config hash, so a dry run of a sweep not yet recorded sees the arms other sweeps ran
    (the one in this sweep's group preferred, as registry.sweep_members prefers it)."""
    return registry.runs_by_config_hash([v.config_hash for v in plan.variants], group=plan.name)


def decide(plan: SweepPlan, registry: Registry | None, retry_failed: bool, log_root: Path) -> SweepResult:
    """Split the plan into jobs to start and variants to leave alone (with why). Without a
    registry (none exists yet) every variant is new."""
    runs = existing_runs(plan, registry) if registry is not None else {}
    taken = registry.names_taken([v.run_name for v in plan.variants]) if registry is not None else set()
    log_dir = Path(log_root).absolute() / plan.name
    result = SweepResult()
    for variant in plan.variants:
        run = runs.get(variant.config_hash)
        status = effective_status(run) if run else None
        if status == "running" and registry.claimable(run):
            status = "stale"  # its trainer's claim is dead (expired, or its process is gone)
        if retry_failed and status == "failed" and registry.checkpoints(run.id):
            name, action = run.name, "resume"
        elif run is None or (status in ("failed", "diverged") and retry_failed):
            name = _fresh_name(variant.run_name, taken)
            taken.add(name)
            action = "new" if run is None else "retry"
        elif status in ("stale", "interrupted"):
            name, action = run.name, "resume"
        else:
            why = {
                "finished": "finished",
                "running": "running elsewhere",
                "failed": "failed (--retry-failed to run it again)",
                "diverged": "diverged (--retry-failed to run it again)",
            }.get(status, status)
            result.skipped.append((variant, why, run))
            continue
        result.jobs.append(Job(variant, action, name, plan.run_config(variant, name), log_dir / f"{name}.log"))
    return result


def _fresh_name(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    attempt = 2
    while f"{name}-r{attempt}" in taken:
        attempt += 1
    return f"{name}-r{attempt}"
