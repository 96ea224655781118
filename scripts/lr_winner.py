"""The lr study's winner and the budget the other studies take from it, by the rules that
experiments/studies/lr-select.yaml states before its runs.

    python scripts/lr_winner.py [--db docs/results/studies.db.xz] [--check SPEC ...]

- The winner: each run's area under its `train/reward` curve over steps 1-100 (the mean
  of the per-step sampled pass@1; a diverged run counts 0 for each step it did not run),
  averaged over seeds 300-302 per lr. The highest wins; scores equal to 4 decimals go to
  the lower lr. Refuses (exit 4) until every member has ended.
- L: twice the first eval step at which the winner's seed-mean greedy curve has made 90%
  of its gain (its last-3 mean minus its step-0 eval), rounded up to a multiple of 10,
  clamped to [50, 200].
Prints a markdown table of the lrs, the winner, L and the grid points lr-select.yaml
names for the confirmation study (2 steps up, 2, 4 and 6 down). With --check, also
checks that each named spec's baseline arm runs at the winner's lr (its `common:` lr, else
its baseline variant's) and exits 3 where one does not (scripts/run_lab_studies.sh runs
this before each study).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grpoctl import metrics  # noqa: E402
from grpoctl.analysis.compare import build_compare_table  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402
from grpoctl.spec_file import read_spec  # noqa: E402

STUDY = "lr-select"
SPEC = REPO / "experiments" / "studies" / "lr-select.yaml"
STEPS = 100
SEEDS = (300, 301, 302)
SHARE, LAST_K = 0.9, 3
L_MIN, L_MAX = 50, 200
ENDED = ("finished", "diverged")
CONFIRM = {"x3.2": +2, "x1": 0, "x1/3.2": -2, "x1/10": -4, "x1/32": -6}  # grid steps from the winner


def area(series: list[tuple[int, float]]) -> float:
    """Mean of the per-step values over steps 1-STEPS; a step not run counts 0."""
    by_step = {s: v for s, v in series if 1 <= s <= STEPS and math.isfinite(v)}
    return sum(by_step.get(s, 0.0) for s in range(1, STEPS + 1)) / STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(REPO / "docs" / "results" / "studies.db.xz"))
    parser.add_argument("--check", nargs="*", default=[], metavar="SPEC", help="specs whose lr must be the winner's")
    args = parser.parse_args()
    spec = read_spec(SPEC)
    grid = sorted((float(diff["optimizer.lr"]), label) for label, diff in spec["variants"].items())
    with Registry(args.db, must_exist=True, readonly=True) as registry:
        rows = {row.label: row for row in build_compare_table(registry, [STUDY]).rows}
        scores: dict[str, float] = {}
        evals: dict[str, dict[int, list[tuple[int, float]]]] = {}
        for _, label in grid:
            row = rows.get(label)
            runs = {rd.run.id: rd for rd in row.runs} if row else {}
            seeds = sorted(rd.run.seed for rd in runs.values())
            if tuple(seeds) != SEEDS or any(rd.status not in ENDED for rd in runs.values()):
                print(f"lr-select not finished: {label} has {[(rd.run.seed, rd.status) for rd in runs.values()]}")
                sys.exit(4)
            rewards = registry.metric_of_runs(runs, metrics.REWARD)
            scores[label] = statistics.fmean(area(series) for series in rewards.values())
            evals[label] = registry.metric_of_runs(runs, metrics.EVAL_ACCURACY)
    winner = max(scores, key=lambda v: (round(scores[v], 4), -dict((b, a) for a, b in grid)[v]))
    print("| lr | area under train/reward, steps 1-100 (mean of seeds 300-302) | |")
    print("|---|---|---|")
    for _, label in grid:
        print(f"| {label} | {scores[label]:.4f} | {'winner' if label == winner else ''} |")
    curve = _seed_mean(evals[winner])
    steps = sorted(curve)
    start, end = curve[steps[0]], statistics.fmean(curve[s] for s in steps[-LAST_K:])
    reached = next(s for s in steps if curve[s] - start >= SHARE * (end - start))
    budget = min(L_MAX, max(L_MIN, math.ceil(2 * reached / 10) * 10))
    print(f"\nwinner {winner}; its seed-mean greedy eval: " + ", ".join(f"{s}: {curve[s]:.3f}" for s in steps))
    print(f"gain {start:.3f} -> {end:.3f}; 90% of it by step {reached}; L = {budget}")
    index = [label for _, label in grid].index(winner)
    for name, offset in CONFIRM.items():
        at = index + offset
        print(f"  {name}: {grid[at][1] if 0 <= at < len(grid) else 'off the grid (undefined)'}")
    lr = dict((b, a) for a, b in grid)[winner]
    wrong = [f"{path} ({got:g})" for path in args.check if not math.isclose(got := baseline_lr(Path(path)), lr)]
    if wrong:
        print(f"not at the winner's lr {lr:g}: {', '.join(wrong)}")
        sys.exit(3)


def baseline_lr(path: Path) -> float:
    """The lr a spec's baseline arm runs at: its `common:` lr, else its baseline variant's."""
    spec = read_spec(path)
    common = spec.get("common") or {}
    if "optimizer.lr" in common:
        return float(common["optimizer.lr"])
    return float(spec["variants"][spec["baseline"]].get("optimizer.lr", "nan"))


def _seed_mean(series_by_run: dict[int, list[tuple[int, float]]]) -> dict[int, float]:
    """{eval step: mean over the runs} at the steps every run evaluated."""
    per_run = [dict(series) for series in series_by_run.values()]
    common = set.intersection(*(set(d) for d in per_run))
    return {s: statistics.fmean(d[s] for d in per_run) for s in sorted(common)}


if __name__ == "__main__":
    main()
