"""Check that a study re-run into a fresh registry recorded the same eval numbers as before.

    python scripts/compare_registries.py STUDY NEW_REGISTRY OLD_REGISTRY [--places 4]

Each member of the study in NEW (its sweep's runs) is matched to the run of OLD with the
same config hash (the same variant and seed: the lab's runs are deterministic on CPU),
and every aggregate number of every eval row of the two is set side by side: the problem
count, accuracy, format rate and mean response length of each (step, kind, eval set), and
a sampled eval's pass@k and maj@k. They must agree to `--places` decimals; the rows must
be the same rows. Per-problem outcomes, which OLD may not have recorded, are only counted.
Prints one line per run and a verdict; exits 1 when any number differs, 2 when a run of
NEW has no partner in OLD.

Either registry may be a committed `.db.xz` (read through grpoctl's cache).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grpoctl, whatever is installed

from grpoctl.errors import UserError  # noqa: E402
from grpoctl.registry import EvalResult, Registry  # noqa: E402

FIELDS = ("n", "accuracy", "format_rate", "mean_response_length")


def numbers(row: EvalResult) -> dict[str, float]:
    """Every aggregate number of one eval row, by name."""
    out = {name: float(getattr(row, name)) for name in FIELDS}
    out.update({name: float(v) for name, v in json.loads(row.scores or "{}").items() if v is not None})
    return out


def keyed(rows: list[EvalResult]) -> dict[tuple, EvalResult]:
    """A run's trainer evals by (step, kind, eval set): a `grpoctl eval` of a checkpoint is not one."""
    return {(r.step, r.kind, r.eval_set): r for r in rows if r.checkpoint_path is None}


def compare_study(study: str, new: Registry, old: Registry, places: int) -> tuple[int, int, int]:
    """(numbers compared, numbers that differ, rows with outcomes in NEW); prints a line per run."""
    members = [(m, run) for m, run in new.sweep_members(study) if run is not None]
    if not members:
        raise UserError(f"{study} has no runs in the new registry")
    partners = old.runs_by_config_hash([run.config_hash for _, run in members])
    compared = differ = recorded = 0
    for member, run in members:
        twin = partners.get(run.config_hash)
        if twin is None:
            print(f"{run.name}: no run with config hash {run.config_hash[:12]} in the old registry")
            sys.exit(2)
        mine, theirs = keyed(new.evals(run.id)), keyed(old.evals(twin.id))
        if set(mine) != set(theirs):
            print(f"{run.name}: eval rows differ: {sorted(set(mine) ^ set(theirs), key=str)}")
            differ += 1
        worst, count = 0.0, 0
        for key in sorted(set(mine) & set(theirs), key=str):
            a, b = numbers(mine[key]), numbers(theirs[key])
            if set(a) != set(b):
                print(f"{run.name} {key}: numbers differ in name: {sorted(set(a) ^ set(b))}")
                differ += 1
            for name in set(a) & set(b):
                count += 1
                gap = abs(a[name] - b[name])
                worst = max(worst, gap)
                if round(a[name], places) != round(b[name], places):
                    print(f"{run.name} {key} {name}: {a[name]:.6f} against {b[name]:.6f}")
                    differ += 1
            recorded += mine[key].outcomes is not None
        compared += count
        print(
            f"{member.variant} seed {member.seed}: {run.name} = old {twin.name}: {len(mine)} eval rows, {count} numbers, "
            f"largest gap {worst:.2e}"
        )
    return compared, differ, recorded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study")
    parser.add_argument("new", help="the fresh registry")
    parser.add_argument("old", help="the registry it must agree with (e.g. docs/results/lab.db.xz)")
    parser.add_argument("--places", type=int, default=4, help="decimals that must agree (default 4)")
    args = parser.parse_args()
    try:
        with Registry(args.new, readonly=True) as new, Registry(args.old, readonly=True) as old:
            compared, differ, recorded = compare_study(args.study, new, old, args.places)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdict = "equal" if not differ else f"{differ} DIFFER"
    print(
        f"{args.study}: {compared} eval numbers compared to {args.places} decimals: {verdict}; "
        f"{recorded} eval rows of the new registry carry per-problem outcomes"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
