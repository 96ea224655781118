"""Write the pass@k page: does RL on the lab raise pass@k, or only pass@1?

    python scripts/pass_at_k_page.py [--db docs/results/lab-pass-at-k.db.xz] [--out docs/results/pass-at-k]

Reads the runs of experiments/lab-pass-at-k.yaml (the lab's baseline, 3 seeds, a sampled
eval every 10 steps) through the registry and writes, into --out:

- index.md: pass@1, pass@k, maj@k and the greedy accuracy over steps (mean over seeds, with
  the seeds' range), each one's change from step 0 to the last step with a 95% interval
  over seeds (paired: every seed is its own before and after), the share of the headroom
  each closed, and the answer to the page's question, all computed here;
- curves.png: the four series over steps, one thin line per seed and their mean;
- lab-pass-at-k/: the study's `grpoctl report` (every curve, pass@k's, and the breakdowns).

Every number on the page comes from the registry; the only words fixed here are the
question, and the reading rule below (what "raised" means).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grpoctl, whatever is installed

from grpoctl import metrics  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402
from grpoctl.views.report_plots import save_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GROUP = "lab-pass-at-k"
CONFIDENCE = 0.95


def paired_interval(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """Mean of after - before over seeds, with its `CONFIDENCE` t-interval (n - 1 degrees of freedom)."""
    from scipy import stats

    diffs = [a - b for a, b in zip(after, before, strict=True)]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


def series_by_seed(registry: Registry, runs, names: list[str]) -> dict[str, dict[int, dict[int, float]]]:
    """{name: {seed: {step: value}}}."""
    out: dict[str, dict[int, dict[int, float]]] = {name: {} for name in names}
    for run in runs:
        for name, points in registry.metric_series(run.id, names).items():
            out[name][run.seed] = dict(points)
    return out


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=str(ROOT / "docs" / "results" / "lab-pass-at-k.db.xz"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "pass-at-k"))
    args = parser.parse_args()

    # Relative where it can be: the report names the registry it came from.
    db = os.path.relpath(args.db) if not os.path.relpath(args.db).startswith("..") else args.db
    registry = Registry(db, must_exist=True, readonly=True)
    runs = [r for r in registry.runs_in_group(GROUP) if r.status == "finished"]
    if not runs:
        sys.exit(f"no finished run of {GROUP} in {args.db}: run experiments/lab-pass-at-k.yaml first")
    sampled = [e for e in registry.evals(runs[0].id) if e.kind == "sampled"]
    sampling = json.loads(sampled[0].sampling)
    n, ks = int(sampling["n"]), sorted(int(k) for k in sampling["k"])
    k = max(ks)
    subset = sampled[0].n
    config = json.loads(runs[0].config)
    temperature = config["eval"]["sampled"]["temperature"]

    labels = {
        metrics.pass_at(1): "pass@1",
        metrics.pass_at(k): f"pass@{k}",
        metrics.maj_at(k): f"maj@{k}",
        metrics.EVAL_ACCURACY: "greedy",
    }
    data = series_by_seed(registry, runs, list(labels))
    seeds = sorted(data[metrics.pass_at(1)])
    steps = sorted(set.intersection(*(set(data[metrics.pass_at(1)][s]) for s in seeds)))
    first, last = steps[0], steps[-1]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(data, labels, seeds, steps, out / "curves.png", k)
    from grpoctl.views.report_view import write_report

    write_report(registry, GROUP, out / GROUP)  # every curve, pass@k's and the breakdowns included

    lines = [
        "# Does RL on the lab raise pass@k, or only pass@1?",
        "",
        f"The lab's baseline (`experiments/lab-pass-at-k.yaml`: `lab.yaml` at lr 3.3e-5, {len(steps) and last} "
        f"steps), {len(seeds)} seeds ({', '.join(map(str, seeds))}), with a sampled eval every "
        f"{steps[1] - steps[0] if len(steps) > 1 else 0} steps: {n} samples per problem at temperature "
        f"{temperature:g} on {subset} of the lab's held-out problems, scored as pass@k (some one of k samples "
        "is right; the unbiased estimator 1 - C(n-c, k)/C(n, k)) and maj@k (the most common answer of k "
        "samples is right). The greedy accuracy is the headline eval on all held-out problems. "
        f"The registry is [`lab-pass-at-k.db.xz`](../lab-pass-at-k.db.xz) ({len(runs)} runs); "
        "`python scripts/pass_at_k_page.py` rewrites this page from it, and the study's "
        f"[`grpoctl report`]({GROUP}/report.md) beside it (every curve, and the accuracy by level).",
        "",
        "![pass@1, pass@k, maj@k and greedy accuracy over steps](curves.png)",
        "",
        f"## From step {first} to step {last}",
        "",
        f"Mean over seeds; the change has a {CONFIDENCE:.0%} t-interval over the {len(seeds)} seeds' own "
        "changes. Headroom closed: the change over what was left to gain at the start (1 - start).",
        "",
        f"| measure | step {first} | step {last} | change (points) | {CONFIDENCE:.0%} interval | headroom closed |",
        "|---|---:|---:|---:|---|---:|",
    ]
    changes = {}
    for name, label in labels.items():
        before = [data[name][s][first] for s in seeds]
        after = [data[name][s][last] for s in seeds]
        mean, low, high = paired_interval(before, after)
        start = statistics.fmean(before)
        changes[label] = (mean, low, high, start)
        headroom = mean / (1 - start) if start < 1 else math.nan
        lines.append(
            f"| {label} | {pct(start)} | {pct(statistics.fmean(after))} | {signed(mean)} | "
            f"[{signed(low)}, {signed(high)}] | {100 * headroom:.0f}% |"
        )
    gap_before = [data[metrics.pass_at(k)][s][first] - data[metrics.pass_at(1)][s][first] for s in seeds]
    gap_after = [data[metrics.pass_at(k)][s][last] - data[metrics.pass_at(1)][s][last] for s in seeds]
    gap, gap_low, gap_high = paired_interval(gap_before, gap_after)

    p1, pk = changes["pass@1"], changes[f"pass@{k}"]
    rose = {label: low > 0 for label, (_, low, _, _) in changes.items()}
    lines += [
        "",
        "## The answer",
        "",
        "The reading that `experiments/lab-pass-at-k.yaml` declared before its runs: if pass@k rises less "
        "than pass@1 (or falls), RL sharpened the policy onto answers it could already sample; if both rise, "
        f"it taught it new ones. Here a measure *rose* when its change has a {CONFIDENCE:.0%} interval above "
        "zero.",
        "",
    ]
    if rose["pass@1"] and rose[f"pass@{k}"]:
        verdict = (
            f"**Both rose, and pass@{k} by {'less' if pk[0] < p1[0] else 'more'} than pass@1**: pass@1 by "
            f"{signed(p1[0])} points [{signed(p1[1])}, {signed(p1[2])}], pass@{k} by {signed(pk[0])} "
            f"[{signed(pk[1])}, {signed(pk[2])}]. RL made some problems solvable within {k} samples that were "
            f"not at step {first}"
            + (", but most of what it added is sharpening." if pk[0] < p1[0] else ".")
            + (" Both branches of the declared reading hold." if pk[0] < p1[0] else "")
        )
    elif rose["pass@1"]:
        verdict = (
            f"**Only pass@1 rose**: pass@1 by {signed(p1[0])} points [{signed(p1[1])}, {signed(p1[2])}], "
            f"pass@{k} by {signed(pk[0])} [{signed(pk[1])}, {signed(pk[2])}]. RL sharpened the policy onto "
            "answers it could already sample."
        )
    else:
        verdict = f"**pass@1 did not clearly rise**: {signed(p1[0])} points, pass@{k} {signed(pk[0])}."
    maj = changes[f"maj@{k}"][0]
    reading = (
        f"pass@{k} started at {pct(pk[3])}% and had {pct(1 - pk[3])} points to gain; it closed "
        f"{100 * pk[0] / (1 - pk[3]):.0f}% of them, pass@1 {100 * p1[0] / (1 - p1[3]):.0f}% of its "
        f"{pct(1 - p1[3])}. The gap pass@{k} - pass@1 went from {pct(statistics.fmean(gap_before))} to "
        f"{pct(statistics.fmean(gap_after))} points ({signed(gap)} [{signed(gap_low)}, {signed(gap_high)}]): "
        + ("RL closed more of it by sharpening than it opened by teaching. " if gap_high < 0 else "")
        + f"maj@{k} rose {signed(maj)} points, {'more' if maj > p1[0] else 'less'} than pass@1."
    )
    if pk[3] >= 0.8:
        reading += (
            f" With pass@{k} this close to 1 at step {first}, the lab has little room to show pass@{k} "
            "rising; what it shows is pass@1 rising much faster than pass@k."
        )
    greedy = {step: statistics.fmean(data[metrics.EVAL_ACCURACY][s][step] for s in seeds) for step in steps}
    flat_until = max(step for step in steps if abs(greedy[step] - greedy[first]) <= 0.02)
    near_final = min(step for step in steps if greedy[step] >= greedy[last] - 0.02)
    if near_final > flat_until:
        reading += (
            f" The greedy accuracy moves differently: within 2 points of its start up to step {flat_until}, "
            f"within 2 points of its end from step {near_final}, while pass@1 climbs steadily: greedy "
            "decoding reads the policy's single most likely answer, which changes all at once when that "
            "answer changes, not as the share of right samples grows."
        )
    lines += [
        verdict,
        "",
        reading,
        "",
        "## Every sampled eval",
        "",
        "Mean over seeds (min-max over seeds).",
        "",
        "| step | " + " | ".join(labels.values()) + f" | pass@{k} - pass@1 |",
        "|---:|" + "---:|" * (len(labels) + 1),
    ]
    for step in steps:
        cells = []
        for name in labels:
            values = [data[name][s][step] for s in seeds if step in data[name][s]]
            if not values:
                cells.append("-")
                continue
            cells.append(f"{pct(statistics.fmean(values))} ({pct(min(values))}-{pct(max(values))})")
        gaps = [data[metrics.pass_at(k)][s][step] - data[metrics.pass_at(1)][s][step] for s in seeds]
        lines.append(f"| {step} | " + " | ".join(cells) + f" | {pct(statistics.fmean(gaps))} |")
    minutes = [(r.finished_at - r.created_at).total_seconds() / 60 for r in runs if r.finished_at and r.created_at]
    lines += [
        "",
        f"Cost: {len(runs)} runs of {statistics.fmean(minutes):.1f} wall-minutes each on one CPU core "
        f"(sampled evals included), {sum(minutes):.0f} minutes in all.",
        "",
    ]
    (out / "index.md").write_text("\n".join(lines))
    print(f"wrote {out / 'index.md'} and {out / 'curves.png'}")


def plot(data, labels, seeds, steps, path: Path, k: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = ["C0", "C1", "C2", "0.4"]
    for (name, label), color in zip(labels.items(), colors, strict=True):
        for s in seeds:
            points = sorted(data[name][s].items())
            ax.plot([p for p, _ in points], [v for _, v in points], color=color, alpha=0.25, linewidth=0.8)
        means = [statistics.fmean(data[name][s][step] for s in seeds) for step in steps]
        ax.plot(steps, means, color=color, linewidth=2, label=label, linestyle="--" if label == "greedy" else "-")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("fraction right")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"The lab's baseline, {len(seeds)} seeds (thin: each seed; thick: their mean)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
