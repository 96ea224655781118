"""Does a knob act? The rules lab-entropy-strong.yaml and lab-kl.yaml declare for reading
by hand, computed from the registry: a finding reads eval curves only, so whether the
entropy bonus moved the entropy, or the KL penalty was large enough to matter, is read
here, by the same paired t over seeds the findings use.

    python scripts/knob_acts.py [--db docs/results/lab-knobs.db.xz]

Rules (as the specs state them, before their runs):
- lab-entropy-strong: a coefficient acts when its mean train/token_entropy over steps
  91-100 minus none's, seed by seed, has a 95% paired-t interval that excludes 0 and a
  mean of at least 20% of none's mean.
- lab-kl: the penalty acts when 0.04 x the kl_0.04 arm's mean train/kl over steps 91-100
  (mean over seeds) is at least 1e-3 nats.
Prints one markdown table per study.
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
from grpoctl.analysis import paired  # noqa: E402
from grpoctl.analysis.compare import build_compare_table  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402

WINDOW = range(91, 101)  # the steps both rules average over
ENTROPY_SHARE = 0.2  # an entropy move of at least 20% of none's
KL_ACTS_NATS = 1e-3
KL_BETA = 0.04


def window_means(registry: Registry, study: str, metric: str) -> dict[str, dict[int, float]]:
    """{arm label: {seed: mean of `metric` over WINDOW}} for the runs of `study`."""
    table = build_compare_table(registry, [study])
    out: dict[str, dict[int, float]] = {}
    for row in table.rows:
        ids = {rd.run.id: rd.run.seed for rd in row.runs}
        points = registry.metric_of_runs(ids, metric)
        out[row.label] = {
            ids[run_id]: statistics.fmean(v for s, v in series if s in WINDOW and math.isfinite(v))
            for run_id, series in points.items()
            if any(s in WINDOW for s, _ in series)
        }
    return out


def entropy_table(registry: Registry) -> list[str]:
    arms = window_means(registry, "lab-entropy-strong", metrics.TOKEN_ENTROPY)
    none = arms.pop("none")
    lines = [
        "| coefficient | seeds | entropy, steps 91-100 (none's) | difference [95% CI] | share of none's | acts |",
        "|---|---|---|---|---|---|",
    ]
    for label, values in sorted(arms.items()):
        seeds = sorted(set(values) & set(none))
        d = paired.paired_t([values[s] for s in seeds], [none[s] for s in seeds])
        base = statistics.fmean(none[s] for s in seeds)
        share = d.diff / base
        acts = (d.low > 0 or d.high < 0) and abs(share) >= ENTROPY_SHARE
        lines.append(
            f"| {label} | {len(seeds)} | {statistics.fmean(values[s] for s in seeds):.3f} ({base:.3f}) "
            f"| {d.diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | {share:+.0%} | {'yes' if acts else 'no'} |"
        )
    return lines


def kl_table(registry: Registry) -> list[str]:
    arms = window_means(registry, "lab-kl", metrics.KL)
    values = arms["kl_0.04"]
    mean = statistics.fmean(values.values())
    term = KL_BETA * mean
    return [
        "| arm | seeds | train/kl, steps 91-100 (per seed) | beta x mean | acts (>= 1e-3 nats) |",
        "|---|---|---|---|---|",
        f"| kl_0.04 | {len(values)} | {', '.join(f'{v:.4f}' for _, v in sorted(values.items()))} "
        f"| {term:.2e} | {'yes' if term >= KL_ACTS_NATS else 'no'} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(REPO / "docs" / "results" / "lab-knobs.db.xz"))
    args = parser.parse_args()
    with Registry(args.db, must_exist=True, readonly=True) as registry:
        print("lab-entropy-strong: does the bonus move the entropy?\n")
        print("\n".join(entropy_table(registry)))
        print("\nlab-kl: is the penalty large enough to act?\n")
        print("\n".join(kl_table(registry)))


if __name__ == "__main__":
    main()
