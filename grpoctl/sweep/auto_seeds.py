"""`grpoctl sweep SPEC --seeds auto`: a sweep that sizes itself from its own first seeds.

One internal pilot with a blinded re-estimate of the variance (the design, its citations
and its simulation: analysis/internal_pilot.py), in stages recorded in the registry
(`sweep.design`, migration 0010):

- "pilot": every variant runs seeds first..first+n0-1;
- "final": once every pilot run ended, each finding that declares an effect has its
  variance re-estimated blinded from the pilot and asks for a number of seeds per arm;
  the largest (n0 at least, the maximum at most) is recorded with its reason, then the
  remaining seeds run. A sweep stopped here resumes here: the recorded n stands, it is
  never re-estimated;
- "done": every run of the final plan ended. The findings are tested once, by `compare`
  and `report`, at the fixed alpha, over every seed (the pilot's included: an internal
  pilot's seeds are study seeds).

What is asked (n0, the maximum, the first seed) is recorded with the pilot; re-running
the sweep with other values is refused in one line before anything is written. The
spec's own `seeds:` are not used: the seeds are first, first+1, ... as the stages need.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpoctl.analysis import internal_pilot, stats
from grpoctl.analysis.findings import ENDED, Finding, read_findings
from grpoctl.errors import UserError
from grpoctl.registry import Registry, effective_status
from grpoctl.sweep import spec as sweep_spec
from grpoctl.sweep.planning import SweepResult
from grpoctl.sweep.spec import SweepPlan

AUTO = "auto"
STAGES = ("pilot", "final", "done")


@dataclass(frozen=True)
class AutoSeeds:
    """What `--seeds auto` asks for: n0 seeds per arm, at most `maximum`, from `first`."""

    pilot: int = internal_pilot.PILOT_SEEDS
    maximum: int = internal_pilot.MAX_SEEDS
    first: int = 0

    def seeds(self, n: int) -> str:
        return ",".join(str(self.first + i) for i in range(n))

    def as_record(self) -> dict:
        return {"pilot": self.pilot, "maximum": self.maximum, "first_seed": self.first}


def check_auto(target: str, values: str | None, auto: AutoSeeds) -> None:
    """Refuse what `--seeds auto` cannot do, in one line."""
    if values is not None or not (target.endswith((".yaml", ".yml")) or Path(target).is_file()):
        raise UserError("--seeds auto sizes an ablation spec from its declared findings: give a SPEC.yaml")
    if auto.pilot < 2:
        raise UserError(f"--pilot-seeds must be at least 2 (a spread over seeds needs 2), got {auto.pilot}")
    if auto.maximum < auto.pilot:
        raise UserError(f"--max-seeds ({auto.maximum}) must be at least --pilot-seeds ({auto.pilot})")
    if auto.first < 0:
        raise UserError(f"--first-seed must be 0 or more, got {auto.first}")


def declared_effect(finding: Finding) -> float | None:
    """The effect a finding is sized for: its declared minimum, else the seed's own effect;
    None for a finding with neither, or an equivalence claim (it sizes nothing)."""
    if finding.expect == "same":
        return None
    effect = finding.min_effect if finding.min_effect is not None else finding.seed_effect
    return effect if effect else None


def sized_findings(target: str) -> tuple[list[Finding], int]:
    """The spec's findings that size the sweep, and how many it declares in all (its Holm
    family, planned at its strictest level, alpha / m); refused when none sizes it."""
    _, findings = read_findings(target)
    sized = [f for f in findings if declared_effect(f) is not None]
    if not sized:
        raise UserError(
            f"{target}: --seeds auto sizes the sweep for its findings' declared effects, and it declares "
            "no finding with a direction and a seed_effect or min_effect"
        )
    return sized, len(findings)


def plan_for(target: str, overrides: list[str], name: str | None, base: str | None, auto: AutoSeeds, n: int):
    """The sweep's plan at n seeds per arm (the pilot's at n0): the spec's own seeds replaced."""
    plan = sweep_spec.ablation(target, overrides, seeds=auto.seeds(n), name=name, base=base)
    plan.spec["seeds"] = AUTO
    plan.spec["auto_seeds"] = auto.as_record()
    return plan


def recorded_design(registry: Registry | None, plan: SweepPlan, auto: AutoSeeds) -> dict:
    """The design this sweep recorded ({} when new); refused when it was asked for
    differently, or is a sweep with fixed seeds."""
    if registry is None:
        return {}
    try:
        sweep = registry.get_sweep(plan.name)
    except UserError:
        return {}
    spec = json.loads(sweep.spec)
    if spec.get("seeds") != AUTO:
        raise UserError(f"'{plan.name}' was run with fixed seeds; give the auto-sized sweep another --name")
    asked = spec.get("auto_seeds") or {}
    if asked != auto.as_record():
        was = ", ".join(f"{k} {v}" for k, v in asked.items())
        raise UserError(
            f"'{plan.name}' was started with {was}: resume it with the same --pilot-seeds, --max-seeds, --first-seed"
        )
    return json.loads(sweep.design or "{}")


def stage_of(design: dict) -> str:
    return design.get("stage", "pilot")


def pilot_plans(registry: Registry, pilot: SweepPlan, findings: list[Finding], family: int, auto: AutoSeeds):
    """Each sized finding's re-estimate from the pilot's runs (internal_pilot.Plan), at
    alpha / family: Holm's strictest level over the spec's declared findings."""
    from grpoctl.analysis.compare import load_compared_runs
    from grpoctl.analysis.verdicts import Arm, arm_values, with_series

    found = registry.runs_by_config_hash([v.config_hash for v in pilot.variants], group=pilot.name)
    ended = [run for run in found.values() if effective_status(run) in ENDED]  # a failed run's curve is no measure
    labelled: dict[str, list] = {}
    loaded = load_compared_runs(registry, ended)
    with_series(registry, loaded, findings)
    by_hash = {rd.run.config_hash: rd for rd in loaded}
    for variant in pilot.variants:
        if variant.config_hash in by_hash:
            labelled.setdefault(variant.label, []).append(by_hash[variant.config_hash])
    out = []
    for f in findings:
        effect = declared_effect(f)
        assert effect is not None
        v, b = arm_values(f, Arm(f.variant, labelled.get(f.variant, [])), Arm(f.baseline, labelled.get(f.baseline, [])))
        seeds = sorted(set(v) & set(b), key=str)
        if len(seeds) < 2:
            raise UserError(
                f"finding {f.id}: the pilot measured {len(seeds)} seed(s) in both `{f.variant}` and "
                f"`{f.baseline}`: its measure needs 2+ to re-estimate the variance"
            )
        out.append(
            internal_pilot.plan_finding(
                f.id, [v[s] - b[s] for s in seeds], effect, auto.pilot, auto.maximum, stats.ALPHA / family
            )
        )
    return out


def run_auto(
    target: str,
    overrides: list[str],
    name: str | None,
    base: str | None,
    auto: AutoSeeds,
    registry: Registry,
    run_stage: Callable[[SweepPlan], SweepResult],
    say: Callable[[str], None],
) -> tuple[SweepPlan, SweepResult]:
    """Run the stages left, from the one recorded: (the last plan run, its result). A
    result that did not end every run (interrupted, failed) stops it at its stage."""
    findings, family = sized_findings(target)
    pilot = plan_for(target, overrides, name, base, auto, auto.pilot)
    design = recorded_design(registry, pilot, auto)
    if stage_of(design) == "pilot":
        design = {"stage": "pilot", **auto.as_record(), "estimator": internal_pilot.ESTIMATOR}
        sweep = registry.get_or_create_sweep(pilot.name, pilot.kind, pilot.spec)
        registry.set_sweep_design(sweep.id, design)
        say(f"stage 1, the pilot: {auto.pilot} seeds per arm ({auto.seeds(auto.pilot)})")
        result = run_stage(pilot)
        if result.interrupted or result.not_ended():
            return pilot, result
        plans = pilot_plans(registry, pilot, findings, family, auto)
        n, reason = internal_pilot.final_seeds(plans, auto.pilot, auto.maximum)
        stage = "done" if n == auto.pilot else "final"  # done: the pilot is the study, nothing is left to run
        design = {**design, "stage": stage, "estimates": [p.as_record() for p in plans], "final": n, "reason": reason}
        registry.set_sweep_design(sweep.id, design)
        for line in internal_pilot.describe(design):
            say(line)
        if stage == "done":
            return pilot, result
    else:
        for line in internal_pilot.describe(design):
            say(line)
    final = plan_for(target, overrides, name, base, auto, int(design["final"]))
    result = run_stage(final)
    if not (result.interrupted or result.not_ended()) and design["stage"] != "done":
        registry.set_sweep_design(registry.get_sweep(final.name).id, {**design, "stage": "done"})
    return final, result
