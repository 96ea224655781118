"""Which runs a comparison is about, and how they fold into variants.

`compare`, `report` and the dashboard take a sweep, an ablation, a group or run refs;
`resolve_runs` turns them into runs (with what is missing, and each run's label in the
sweep that asked), and `fold_runs` groups runs that differ only by seed into one variant,
as compare's rows do. Reads only, through the registry.
"""

from __future__ import annotations

import json

from grpoctl.errors import UserError
from grpoctl.registry import Registry, Run
from grpoctl.run_identity import variant_hash


def resolve_runs(registry: Registry, refs: list[str]) -> tuple[str, list[Run], list[str], dict[int, str]]:
    """A sweep or group name, or run refs, to runs; also notes on what is missing, and the
    sweep's own variant label of each run (a run is shared by every sweep that has its
    config, e.g. two studies' common baseline, and its row must carry this sweep's label)."""
    if not refs:
        raise UserError("name a sweep, an ablation, a group or some runs to compare")
    notes: list[str] = []
    if len(refs) == 1:
        try:
            members = registry.sweep_members(refs[0])
        except UserError:
            members = None
        if members is not None:
            missing = list(dict.fromkeys(m.variant for m, run in members if run is None))
            if missing:
                absent = sum(run is None for _, run in members)
                notes.append(
                    f"{absent} of {len(members)} members have no run yet, of "
                    + ", ".join(missing[:5])
                    + (", ..." if len(missing) > 5 else "")
                )
            labels = {run.id: m.variant for m, run in members if run is not None}
            return refs[0], [run for _, run in members if run is not None], notes, labels
    runs: dict[int, Run] = {}
    for ref in refs:
        group = registry.runs_in_group(ref)
        if not group:
            try:
                group = [registry.get_run(ref)]
            except UserError as exc:
                if str(exc).startswith("no run named"):
                    raise UserError(f"no sweep, group or run named '{ref}'") from None
                raise
        runs.update((r.id, r) for r in group)
    return ", ".join(refs), list(runs.values()), notes, {}


def fold_label(runs: list[Run], member_labels: dict[int, str]) -> str:
    """The label of runs that differ only by seed: their sweep's (or their own) variant
    label when they agree on one, else the first run's name."""
    labels = {member_labels.get(run.id, run.variant) for run in runs}
    return labels.pop() if len(labels) == 1 and None not in labels else runs[0].name


def fold_runs(runs: list[Run], member_labels: dict[int, str]) -> list[tuple[str, list[Run]]]:
    """[(label, runs)] of each variant, seeds folded together, in the order compare's rows have."""
    folds: dict[str, list[Run]] = {}
    for run in runs:
        folds.setdefault(variant_hash(json.loads(run.config)), []).append(run)
    return [(fold_label(members, member_labels), members) for members in folds.values()]
