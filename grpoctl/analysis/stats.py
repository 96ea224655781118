"""The statistics behind a verdict: one variant against a baseline, over seeds or one eval.

Pure functions over plain lists of numbers (one number per seed, or an eval's counts);
they know nothing of runs, SQL or tables. The tests and intervals are scipy's own:

- over seeds: Welch's t (`ttest_ind(equal_var=False)` and its `confidence_interval()`),
  which assumes neither arm's spread equals the other's; a BCa bootstrap interval
  (`bootstrap(method="BCa")`) beside it only from `BCA_MIN_SEEDS` seeds per arm: with
  3 seeds BCa resamples 10 distinct values and is far too narrow ([.70, .74, .66] vs
  [.62, .65, .60]: BCa [0.037, 0.120], Welch p = 0.059 with [-0.005, 0.158]);
- one seed per arm: the eval's own binomial noise, nothing else. Wilson score intervals
  (`binomtest(...).proportion_ci(method="wilson")`) for an accuracy, the pooled
  two-proportion score test (`chi2_contingency(correction=False)`, whose statistic is z
  squared) and Newcombe's hybrid score interval (built from the two Wilson intervals) for
  a difference. Wilson over Clopper-Pearson: the exact interval is built to cover at
  least 95% and so covers ~97% and is wider; Wilson covers close to 95% on average, and
  Newcombe's interval for the difference is made of it, so both read alike;
- across a study's comparisons: Holm's step-down correction. Each verdict is read on its
  own ("no_baseline is worse"), so the guarantee wanted is that no verdict in the study
  is a false alarm (family-wise error), not that few of many are (the false discovery
  rate that `false_discovery_control` keeps, meant for screening many hypotheses).
  Holm holds under any dependence between the tests (they share the baseline arm), and
  with the 1-5 comparisons of a study it loses little power. scipy has no Holm; the
  procedure is the five lines below;
- seeds needed: the smallest number of seeds per arm at which a two-sided two-sample t
  test at `ALPHA` detects a difference with `POWER`, from the noncentral t (`nct`);
  capped at `SEEDS_CAP`, since a difference near zero needs more than anyone runs. For
  the observed difference, or for an effect someone else reported (the seed's own);
- the minimum detectable effect: the difference that a two-sided two-sample t test over
  the seeds actually run detects with `POWER` at `ALPHA`, for the seeds' spread (the
  same noncentral t, solved for the difference with `brentq`). A difference below it
  "within noise" says little: the runs could not have seen it;
- equivalence: "does not matter" is a claim of its own, not the failure to reject a
  difference. TOST (two one-sided Welch t tests against -delta and +delta) rejects
  "the difference is at least delta" when both one-sided p-values are below `ALPHA`;
  its p is the larger of the two, and its interval the 90% Welch interval, which lies
  inside (-delta, +delta) exactly when TOST rejects at 0.05. `EQUIVALENCE_DELTA` is
  3 accuracy points unless a finding says otherwise.

scipy.stats costs most of a second to import, so it is imported inside the functions
that need it: `compare` without a baseline never pays for it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from statistics import mean

ALPHA = 0.05
POWER = 0.8
CONFIDENCE = 0.95
BCA_MIN_SEEDS = 8  # per arm; below this a bootstrap interval is too narrow to report
SEEDS_CAP = 100  # "more than 100 seeds" is as useful an answer as any larger number
BOOTSTRAP_SEED = 0  # resampling is random: a fixed seed keeps a report reproducible
EQUIVALENCE_DELTA = 0.03  # accuracy: a "does not matter" claim is tested at +-3 points
TOST_CONFIDENCE = 0.90  # TOST at alpha 0.05 rejects exactly when this interval is inside +-delta


@dataclass(frozen=True)
class Difference:
    """variant minus baseline, with its interval and the two-sided p-value of no difference."""

    diff: float
    low: float
    high: float
    p: float
    test: str  # "welch" or "two-proportion"


def _stats():
    import scipy.stats

    return scipy.stats


def welch(variant: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> Difference:
    """Welch's t over seeds. variant, baseline: one value per seed, at least 2 each and
    some spread in at least one of them (with none, t is undefined)."""
    if len(variant) < 2 or len(baseline) < 2:
        raise ValueError("Welch's t needs at least 2 seeds per arm")
    if spread(variant) == 0 and spread(baseline) == 0:
        raise ValueError("Welch's t is undefined when every seed of both arms agrees exactly")
    with warnings.catch_warnings():  # "precision loss" on near-identical seeds: the result stands
        warnings.simplefilter("ignore", RuntimeWarning)
        result = _stats().ttest_ind(variant, baseline, equal_var=False)
        interval = result.confidence_interval(confidence_level=confidence)
    return Difference(
        mean(variant) - mean(baseline), float(interval.low), float(interval.high), float(result.pvalue), "welch"
    )


def bca(
    variant: list[float], baseline: list[float], confidence: float = CONFIDENCE, min_seeds: int = BCA_MIN_SEEDS
) -> tuple[float, float] | None:
    """BCa bootstrap interval of mean(variant) - mean(baseline); None below `min_seeds`
    per arm (or when every resample gives the same difference)."""
    if min(len(variant), len(baseline)) < min_seeds:
        return None
    import numpy as np

    def diff_of_means(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    with warnings.catch_warnings():  # degenerate resamples warn and give nan: handled below
        warnings.simplefilter("ignore")
        result = _stats().bootstrap(
            (variant, baseline),
            diff_of_means,
            vectorized=True,
            method="BCa",
            confidence_level=confidence,
            rng=BOOTSTRAP_SEED,
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def wilson(correct: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of an accuracy of `correct` out of `n`."""
    interval = _stats().binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


def two_proportions(correct: int, n: int, base_correct: int, base_n: int, confidence: float = CONFIDENCE) -> Difference:
    """One eval against another: the score test of equal accuracies and Newcombe's
    interval of the difference. The evals are taken as independent samples; when both
    graded the same problems the truth is a paired comparison with less noise, so this
    errs wide."""
    p, q = correct / n, base_correct / base_n
    (p_low, p_high), (q_low, q_high) = wilson(correct, n, confidence), wilson(base_correct, base_n, confidence)
    diff = p - q
    low = diff - math.sqrt((p - p_low) ** 2 + (q_high - q) ** 2)
    high = diff + math.sqrt((p_high - p) ** 2 + (q - q_low) ** 2)
    if correct + base_correct in (0, n + base_n):  # all wrong or all right in both: no evidence either way
        pvalue = 1.0
    else:
        table = [[correct, n - correct], [base_correct, base_n - base_correct]]
        pvalue = float(_stats().chi2_contingency(table, correction=False).pvalue)
    return Difference(diff, low, high, pvalue, "two-proportion")


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: the i-th smallest of m is multiplied by
    (m - i), and the adjusted values are kept non-decreasing in that order."""
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def verdict(diff: float, p_corrected: float, alpha: float = ALPHA) -> str:
    """better / worse when the corrected p-value clears alpha, else within noise."""
    if p_corrected < alpha:
        return "better" if diff > 0 else "worse"
    return "within noise"


def spread(values: list[float]) -> float:
    """Sample standard deviation (0 for one value). In floats: statistics.stdev computes
    in exact fractions, a millisecond a call, and a sweep of 20 variants makes 130 calls."""
    n = len(values)
    if n < 2:
        return 0.0
    m = math.fsum(values) / n
    return math.sqrt(math.fsum((x - m) ** 2 for x in values) / (n - 1))


def pooled_sd(variant: list[float], baseline: list[float]) -> float:
    """sqrt of the mean of the two arms' variances: the seed sd of a plan with equal arms."""
    return math.sqrt((spread(variant) ** 2 + spread(baseline) ** 2) / 2)


def _t_power(effect: float, sd: float, n_a, n_b, alpha: float):
    """Power of a two-sided two-sample t test (equal variances) with n_a and n_b seeds per
    arm to detect `effect` when seeds spread by `sd`: P(|T| > t_crit) with T noncentral t,
    df n_a + n_b - 2, noncentrality |effect| / (sd * sqrt(1/n_a + 1/n_b)).

    The lower tail P(T < -t_crit) is taken as `nct.sf(t_crit, df, -noncentrality)`, the
    same number by symmetry: scipy's `nct.cdf(-t_crit, df, noncentrality)` returns NaN far
    out in that tail (noncentrality 10 at df 4, 12 at df 2), and a NaN power read as "not
    enough" made `seeds_needed` skip n = 2 and 3 and answer 4 where 2 suffice.
    """
    import numpy as np

    st = _stats()
    n_a, n_b = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    df = n_a + n_b - 2
    noncentrality = abs(effect) / sd / np.sqrt(1 / n_a + 1 / n_b)
    critical = st.t.ppf(1 - alpha / 2, df)
    return st.nct.sf(critical, df, noncentrality) + st.nct.sf(critical, df, -noncentrality)


def seeds_needed(
    diff: float, sd: float, alpha: float = ALPHA, power: float = POWER, cap: int = SEEDS_CAP
) -> tuple[int, bool]:
    """Seeds per arm to detect `diff` when seeds spread by `sd`: (n, capped).

    The power of a two-sided two-sample t test with n seeds per arm is
    P(|T| > t_crit), T ~ noncentral t with 2n - 2 degrees of freedom and noncentrality
    |diff| / sd * sqrt(n / 2); n is the smallest in 2..cap where it reaches `power`.
    (cap, True) when none does: the difference is too close to zero to resolve.
    `diff` may be the observed difference or an effect reported elsewhere (the seed's).
    """
    if diff == 0 or not math.isfinite(diff):
        return cap, True
    if sd <= 0:  # seeds that never disagree resolve any difference
        return 2, False
    import numpy as np

    n = np.arange(2, cap + 1)
    achieved = _t_power(diff, sd, n, n, alpha)
    enough = np.nonzero(achieved >= power)[0]
    return (int(n[enough[0]]), False) if enough.size else (cap, True)


def mde(sd: float, n_variant: int, n_baseline: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The minimum detectable effect: the smallest |difference| that a two-sided
    two-sample t test with these seeds per arm detects with `power` at `alpha`, when
    seeds spread by `sd` (the pooled sd of the two arms). None with fewer than 2 seeds
    in an arm (no spread to plan from) or no spread at all (any difference is seen)."""
    if min(n_variant, n_baseline) < 2 or not math.isfinite(sd) or sd <= 0:
        return None
    from scipy.optimize import brentq

    def short(effect: float) -> float:
        return float(_t_power(effect, sd, n_variant, n_baseline, alpha)) - power

    high = sd
    while short(high) < 0:  # power rises with the effect: bracket the root
        high *= 2
    return float(brentq(short, 0.0, high, xtol=1e-12 * max(sd, 1e-12)))


@dataclass(frozen=True)
class Equivalence:
    """TOST of |variant - baseline| < delta: p (the larger one-sided p) and the 90% interval."""

    delta: float
    p: float
    low: float
    high: float

    @property
    def equivalent(self) -> bool:
        return self.p < ALPHA


def tost(variant: list[float], baseline: list[float], delta: float = EQUIVALENCE_DELTA) -> Equivalence:
    """Two one-sided Welch t tests: H0 diff <= -delta (against greater) and H0 diff >= +delta
    (against less), over seeds. Needs what `welch` needs (2+ seeds per arm, some spread)."""
    if delta <= 0:
        raise ValueError("the equivalence margin delta must be positive")
    welch(variant, baseline)  # the same refusals
    st = _stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        above = st.ttest_ind([x + delta for x in variant], baseline, equal_var=False, alternative="greater")
        below = st.ttest_ind([x - delta for x in variant], baseline, equal_var=False, alternative="less")
    interval = welch(variant, baseline, confidence=TOST_CONFIDENCE)
    return Equivalence(delta, max(float(above.pvalue), float(below.pvalue)), interval.low, interval.high)


def holm_family(pvalues: dict) -> dict:
    """Holm over one family given as {key: p}: {key: adjusted p}. A page's family is its
    declared findings, all of them at once (not study by study): every verdict on the
    page is then a false alarm with probability at most ALPHA together."""
    keys = list(pvalues)
    return dict(zip(keys, holm([pvalues[k] for k in keys]), strict=True))
