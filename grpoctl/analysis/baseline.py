"""Each variant of a study against its baseline: the difference, its interval, the
p-value (raw and Holm-corrected within the study), a verdict and the seeds a close call
would need. The numbers come from analysis/stats.py; this file only decides which
numbers go in.

The measure is the mean of a run's last `last_k` evals (at or before `at_step`), then the
mean over the variant's seeds. The tiny model's greedy accuracy moves by up to ten points
from one eval to the next on the same problems, so one eval is a noisy end point;
averaging the last three (steps 40, 50 and 60 of a 60-step tiny run, 80-99 of a seed
run) steadies it while staying at the end of training. `--last-k 1` is the final eval
alone; the eval at step 0, before training, is never averaged in. Best-so-far accuracy
is shown too, but no verdict rests on it: the maximum of several noisy evals is biased
upward.

With 2+ seeds in each arm the test is Welch's t over seeds. With one seed in each, only
the evals' binomial noise can be measured: a Wilson interval per accuracy and a
two-proportion test, whose verdict says nothing about how much another seed would
differ. For a mean of k > 1 evals of one run the binomial model of one eval of n
problems is kept: averaging evals can only shrink that noise, so the interval errs wide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean

from grpoctl.analysis import stats
from grpoctl.rules import EvalPoint

Curve = list[EvalPoint]  # one run's evals, in step order

LAST_K = 3
ONE_SEED = "one seed per arm: this rests on eval noise alone, not on how much seeds differ"


@dataclass
class Arm:
    """One variant's numbers, one per run that has an eval."""

    measure: list[float] = field(default_factory=list)  # mean of its last k evals
    best: list[float] = field(default_factory=list)  # best-so-far accuracy (None at a step)
    sizes: list[int | None] = field(default_factory=list)  # problems in its last eval


@dataclass
class Versus:
    """One variant against the baseline (the baseline's own row has verdict "baseline")."""

    label: str
    seeds: int
    measure: float | None = None
    measure_sd: float | None = None  # over seeds (2+)
    measure_ci: tuple[float, float] | None = None  # Wilson interval (one seed)
    diff: stats.Difference | None = None  # variant minus baseline
    p_holm: float | None = None
    verdict: str = "untested"  # better / worse / within noise / baseline / untested
    seeds_needed: int | None = None
    seeds_needed_capped: bool = False  # True: more than seeds_needed
    mde: float | None = None  # the smallest difference these seeds detect (alpha, power), for their spread
    tost: stats.Equivalence | None = None  # equivalence within +-stats.EQUIVALENCE_DELTA
    bca: tuple[float, float] | None = None  # with stats.BCA_MIN_SEEDS+ per arm
    best_diff: float | None = None
    best_ci: tuple[float, float] | None = None  # Welch over seeds
    note: str = ""  # why untested, or the one-seed caveat


@dataclass
class BaselineComparison:
    baseline: str
    source: str  # where the baseline came from: "the spec" or "--baseline"
    last_k: int
    rows: list[Versus]  # in the table's order, the baseline's included
    tested: int  # comparisons in the Holm family
    metric: str = ""  # the eval measure the curves are of (eval/pass@8); "": eval accuracy


def last_evals(evals: Curve, k: int, at_step: int | None = None) -> tuple[float, int | None] | None:
    """(mean accuracy of the last k evals at or before at_step, problems in the last one).
    The eval before any training (step 0) joins the mean only when it is the only one:
    a run evaluated at its start and end has one trained eval, not two."""
    eligible = [e for e in evals if at_step is None or e[0] <= at_step]
    if not eligible:
        return None
    trained = [e for e in eligible if e[0] > 0]
    eligible = trained or eligible
    tail = eligible[-k:]
    return mean(acc for _, acc, _ in tail), tail[-1][2]


def arm(curves: list[Curve], last_k: int, at_step: int | None) -> Arm:
    """One variant's numbers from the eval curves of its runs (one per seed)."""
    out = Arm()
    for evals in curves:
        last = last_evals(evals, last_k, at_step)
        if last is None:
            continue
        out.measure.append(last[0])
        out.sizes.append(last[1])
        if at_step is None:
            trained = [acc for step, acc, _ in evals if step > 0]  # step 0 is no one's best
            if trained:
                out.best.append(max(trained))
    return out


def _describe(label: str, a: Arm) -> Versus:
    """The arm on its own: its measure with the spread that fits its seed count."""
    out = Versus(label, len(a.measure))
    if not a.measure:
        return out
    out.measure = mean(a.measure)
    if len(a.measure) > 1:
        out.measure_sd = stats.spread(a.measure)
    elif a.sizes[0]:
        out.measure_ci = stats.wilson(round(out.measure * a.sizes[0]), a.sizes[0])
    return out


def _against(out: Versus, a: Arm, base: Arm) -> None:
    """Fill in the difference, its test and the seeds needed (the verdict waits for Holm)."""
    if not a.measure or not base.measure:
        out.note = "no eval yet in " + ("this variant" if not a.measure else "the baseline")
        return
    if len(a.measure) >= 2 and len(base.measure) >= 2:
        if stats.spread(a.measure) == 0 and stats.spread(base.measure) == 0:
            out.note = "every seed of both arms scored the same: no spread over seeds to test against"
            return
        out.diff = stats.welch(a.measure, base.measure)
        out.bca = stats.bca(a.measure, base.measure)
        sd = stats.pooled_sd(a.measure, base.measure)
        out.seeds_needed, out.seeds_needed_capped = stats.seeds_needed(out.diff.diff, sd)
        out.mde = stats.mde(sd, len(a.measure), len(base.measure))
        out.tost = stats.tost(a.measure, base.measure)
        if a.best and base.best:
            out.best_diff = mean(a.best) - mean(base.best)
            if stats.spread(a.best) or stats.spread(base.best):
                best = stats.welch(a.best, base.best)
                out.best_ci = (best.low, best.high)
        return
    if len(a.measure) == 1 and len(base.measure) == 1:
        n, base_n = a.sizes[0], base.sizes[0]
        if not n or not base_n:
            out.note = "one seed per arm and the evals' sizes are unknown: no test"
            return
        out.diff = stats.two_proportions(round(a.measure[0] * n), n, round(base.measure[0] * base_n), base_n)
        out.note = ONE_SEED
        if a.best and base.best:
            out.best_diff = a.best[0] - base.best[0]
        return
    out.note = (
        f"{len(a.measure)} seed(s) against the baseline's {len(base.measure)}: Welch's t needs "
        "2+ in each arm (or exactly one in each, for the eval-noise test)"
    )


def compare_to_baseline(
    curves: dict[str, list[Curve]], baseline: str, source: str, last_k: int = LAST_K, at_step: int | None = None
) -> BaselineComparison:
    """Every variant against the one labelled `baseline`, Holm-corrected across the study.

    curves: variant label -> the eval curves of its runs, in the table's order.
    """
    arms = {label: arm(runs, last_k, at_step) for label, runs in curves.items()}
    base = arms[baseline]
    out = []
    for label in curves:
        versus = _describe(label, arms[label])
        if label == baseline:
            versus.verdict = "baseline"
        else:
            _against(versus, arms[label], base)
        out.append(versus)
    tested = [v for v in out if v.diff is not None]
    for versus, p in zip(tested, stats.holm([v.diff.p for v in tested]), strict=True):
        versus.p_holm = p
        versus.verdict = stats.verdict(versus.diff.diff, p)
    return BaselineComparison(baseline, source, last_k, out, len(tested))
