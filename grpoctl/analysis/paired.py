"""Paired comparisons: two arms run with the same seeds and graded on the same problems.

Arms with the same seed draw the same prompts in the same order (data/stream.py), and
every arm is graded on the same eval problems, so the noise that two arms share cancels
in their difference. Pure functions over numpy arrays; the tests are scipy's own where
scipy has them:

- over seeds: the paired t over per-seed differences (`ttest_rel` and its
  `confidence_interval()`); a BCa bootstrap of the mean difference beside it only from
  `stats.BCA_MIN_SEEDS` pairs (with fewer, it resamples too few distinct values);
- seeds and problems: when per-problem outcomes are recorded (arrays [seeds, problems]
  per arm: 0/1 for a greedy eval, the share of correct samples for a sampled one), the
  eval's problems are one draw of the problems the task could have asked, and what an arm
  changes differs from problem to problem; the paired t over seeds holds the problems
  fixed. The variance of the mean difference is then the paired t's, MS_seed / (S P), plus
  the variance over a bootstrap of the problems that resamples the same indices in both
  arms (seeds held), MS_problem / (S P) in closed form: no resampling, so one call covers
  thousands of simulated studies. (MS_seed, MS_problem, MS_residual: the mean squares of
  the differences' seed means, problem means and seed-by-problem residuals.) Each term
  carries the residual noise once, so the sum counts it twice, on purpose: the unbiased
  estimate, which subtracts MS_residual, covered 92-93.5% at 8 pairs in the coverage
  simulation of tests/test_paired.py, since near a ceiling a few problems carry the whole
  difference, and a draw with few of them has a small difference and a small variance
  together. The degrees of freedom are Satterthwaite's for the two sources of the
  variance's own uncertainty: MS_seed with S - 1 df, and the problems' own component
  MS_problem - MS_residual (0 at least) with the df its spread supports. For values with
  excess kurtosis k a sample variance over n varies like a chi-square with
  2 / (2 / (n - 1) + k / n) df: about the count of problems that differ at all when most
  do not, 639 for 640 normal ones. The residual noise in the problem term adds no df: it
  is the seeds' noise again, and counting it gave 3 pairs about 3 df where they have 2,
  and 93% coverage;
- one seed per arm: the two runs, not the arms, are compared. With 0/1 outcomes,
  McNemar's exact test (the binomial test on the discordant problems, `binomtest`);
  with shares of samples, the paired t over problems. Either says whether these two runs
  differ on these problems, which is no verdict on the arms: another seed may differ
  more than the arms do;
- unmatched seeds: Welch's t, as stats.py has it;
- equivalence: TOST, paired where the comparison is, on the same difference, standard
  error and degrees of freedom as the interval. When both arms sit within delta of the
  measure's ceiling no difference of delta fits under it, so the answer is `AT_CEILING`,
  not "equivalent";
- planning: the MDE and the seeds needed for the paired t, from the sd of the per-seed
  differences (and the problem component, which more seeds do not shrink).

numpy and scipy are imported inside the functions, as stats.py does, so that the modules
that import these names at start-up (compare, findings) pay for neither until a test runs.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpoctl.analysis import stats

if TYPE_CHECKING:
    import numpy as np

# The one home of every test's short name: what compare, report, the findings and the ui
# print beside a number. Keys "welch" and "two-proportion" are stats.Difference.test's.
TESTS = {
    "paired": "paired t (seeds)",
    "paired+problems": "paired t (seeds) + problems",
    "welch": "Welch t (unmatched seeds)",
    "mcnemar": "McNemar exact (problems, one run each)",
    "problems": "paired t (problems, one run each)",
    "two-proportion": "two-proportion (one eval each)",
}
TWO_LEVEL = "paired+problems"
RUN_TESTS = ("mcnemar", "problems", "two-proportion")  # one run per arm: about the runs, not the arms
PAIRED_TESTS = ("paired", TWO_LEVEL)  # over seeds, pair by pair: they plan in pairs of seeds
# The one home of the words said beside a test.
LABELS = {
    "problems recorded": "problem level: in the interval",
    "problems not recorded": "problem level: not recorded",
    "problems not paired": "problem level: not paired (the arms graded different problems)",
    "runs differ": "these two runs differ",
    "runs not shown to differ": "these two runs: no difference shown",
    "at ceiling": "both at ceiling: equivalence uninformative",
}
AT_CEILING = LABELS["at ceiling"]
CEILING = 1.0  # an accuracy's or a pass@1's: no arm can score above it
# The learned / forgot table's columns: per problem, whether each arm has it right.
CHANGES = ("learned", "forgot", "both right", "both wrong", "split")


@dataclass(frozen=True)
class PairedDifference:
    """variant minus baseline under the test `test` (a key of TESTS).

    seed_var and problem_var: the two parts of the variance of `diff` (problem_var None
    when per-problem outcomes were not recorded).
    """

    test: str
    diff: float
    low: float
    high: float
    p: float
    df: float
    se: float
    pairs: int  # seeds both arms ran (1 for a one-run comparison)
    problems: int | None = None
    seed_var: float | None = None
    problem_var: float | None = None
    problem_own: float | None = None  # the problems' own part of problem_var, which more seeds keep
    confidence: float = stats.CONFIDENCE

    @property
    def name(self) -> str:
        """The short name every caller prints: "paired t (seeds) + problems, Satterthwaite df 7.3"."""
        if self.test == TWO_LEVEL:
            return f"{TESTS[self.test]}, Satterthwaite df {self.df:.1f}"
        return TESTS[self.test]

    @property
    def problem_level(self) -> str | None:
        """Whether problems are in the interval; None for a one-run test (only problems are)."""
        if self.test in RUN_TESTS:
            return None
        return LABELS["problems recorded" if self.problem_var is not None else "problems not recorded"]

    @property
    def scope(self) -> str | None:
        """For a one-run test, what it says: whether these two runs differ (never the arms)."""
        return runs_verdict(self.p) if self.test in RUN_TESTS else None

    def as_difference(self) -> stats.Difference:
        return stats.Difference(self.diff, self.low, self.high, self.p, self.test)


def runs_verdict(p: float) -> str:
    """What a test on one run per arm says: that these two runs differ, or that it did not
    show it. Never "better" or "worse": a second seed may differ from the first by more."""
    return LABELS["runs differ" if p < stats.ALPHA else "runs not shown to differ"]


def _scipy() -> Any:
    import scipy.stats

    return scipy.stats


def _arrays(variant: Any, baseline: Any, ndim: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Both arms as float arrays of one shape with at least `ndim` axes, finite."""
    import numpy as np

    a, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    if a.shape != b.shape or a.ndim < ndim:
        raise ValueError(f"{what}: the arms must have the same shape, {ndim}+ axes; got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"{what}: every value must be finite")
    return a, b


# --------------------------------------------------------------------------- over seeds


def paired_t(variant: Any, baseline: Any, confidence: float = stats.CONFIDENCE) -> PairedDifference:
    """The paired t over seeds: variant[i] and baseline[i] are one seed's measures (shape
    [seeds], 2+). It is `ttest_rel` and its interval; refused when every seed's difference
    is the same (t is undefined: no spread to test against)."""
    a, b = _arrays(variant, baseline, 1, "paired t")
    if a.ndim != 1 or a.size < 2:
        raise ValueError("the paired t needs one value per seed, 2+ seeds")
    diffs = a - b
    if float(diffs.max() - diffs.min()) == 0.0:
        raise ValueError("the paired t is undefined when every seed's difference is the same")
    with warnings.catch_warnings():  # "precision loss" on near-identical pairs: the result stands
        warnings.simplefilter("ignore", RuntimeWarning)
        result = _scipy().ttest_rel(a, b)
        interval = result.confidence_interval(confidence_level=confidence)
    n = int(a.size)
    return PairedDifference(
        "paired",
        float(diffs.mean()),
        float(interval.low),
        float(interval.high),
        float(result.pvalue),
        float(result.df),
        float(diffs.std(ddof=1) / math.sqrt(n)),
        n,
        seed_var=float(diffs.var(ddof=1) / n),
        confidence=confidence,
    )


def paired_bca(
    variant: Any, baseline: Any, confidence: float = stats.CONFIDENCE, min_pairs: int = stats.BCA_MIN_SEEDS
) -> tuple[float, float] | None:
    """BCa bootstrap interval of the mean per-seed difference, resampling seeds (pairs
    stay together); None below `min_pairs` (or when every resample agrees)."""
    a, b = _arrays(variant, baseline, 1, "paired bootstrap")
    if a.size < min_pairs:
        return None
    with warnings.catch_warnings():  # degenerate resamples warn and give nan: handled below
        warnings.simplefilter("ignore")
        result = _scipy().bootstrap(
            (a - b,),
            _mean_last_axis,
            vectorized=True,
            method="BCa",
            confidence_level=confidence,
            rng=stats.BOOTSTRAP_SEED,
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def _mean_last_axis(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.mean(axis=axis)


# --------------------------------------------------------------------------- seeds and problems


@dataclass(frozen=True)
class Components:
    """The two-level variance of the mean difference, for one study or many at once:
    every field has the leading shape [...] of the outcomes it came from."""

    diff: np.ndarray  # mean difference over seeds and problems
    seed_var: np.ndarray  # MS_seed / (S P): the paired t's variance of the mean
    problem_var: np.ndarray  # MS_problem / (S P): a problem bootstrap's (same indices in both arms)
    df: np.ndarray  # Satterthwaite's, S - 1 where the problems add nothing of their own
    problem_own: np.ndarray  # max(MS_problem - MS_residual, 0) / (S P): the part more seeds keep

    @property
    def se(self) -> np.ndarray:
        import numpy as np

        return np.sqrt(self.seed_var + self.problem_var)

    def interval(self, confidence: float = stats.CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
        """The two-sided t interval at `confidence` (nan where se is 0)."""
        import numpy as np

        se = np.where(self.se > 0, self.se, np.nan)
        half = _scipy().t.ppf(0.5 + confidence / 2, self.df) * se
        return self.diff - half, self.diff + half


def components(variant: Any, baseline: Any) -> Components:
    """Seed and problem variance of mean(variant - baseline) over outcomes of shape
    [..., seeds, problems] (seeds 2+, problems 2+, the same problem order in both arms);
    the leading axes are independent studies, computed at once.

    Z = variant - baseline, with r its seeds' means, c its problems' means, m its mean:
    MS_seed = P var(r), MS_problem = S var(c), MS_residual = sum((Z - r - c + m)^2) / ((S-1)(P-1));
    df = (MS_seed + W)^2 / (MS_seed^2 / (S - 1) + W^2 / df_W), W = max(MS_problem - MS_residual, 0),
    df_W = 2 / (2 / (P - 1) + k / P), k the excess kurtosis of c (0 at least).
    """
    import numpy as np

    a, b = _arrays(variant, baseline, 2, "two-level interval")
    seeds, problems = a.shape[-2], a.shape[-1]
    if seeds < 2 or problems < 2:
        raise ValueError(f"a two-level interval needs 2+ seeds and 2+ problems, got {seeds} x {problems}")
    z = a - b
    mean, per_seed, per_problem = z.mean(axis=(-2, -1)), z.mean(axis=-1), z.mean(axis=-2)
    ms_seed = problems * per_seed.var(axis=-1, ddof=1)
    ms_problem = seeds * per_problem.var(axis=-1, ddof=1)
    residual = z - per_seed[..., :, None] - per_problem[..., None, :] + mean[..., None, None]
    ms_residual = (residual**2).sum(axis=(-2, -1)) / ((seeds - 1) * (problems - 1))
    own = np.maximum(ms_problem - ms_residual, 0.0)  # the problems' own variance component
    centred = per_problem - per_problem.mean(axis=-1, keepdims=True)
    second, fourth = (centred**2).mean(axis=-1), (centred**4).mean(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 where no problem differs from another
        kurtosis = np.where(second > 0, fourth / second**2 - 3, 0.0)
        df_own = 2 / (2 / (problems - 1) + np.maximum(kurtosis, 0.0) / problems)
        df = (ms_seed + own) ** 2 / (ms_seed**2 / (seeds - 1) + own**2 / df_own)
    df = np.where((own > 0) & np.isfinite(df), df, seeds - 1.0)
    cells = seeds * problems
    return Components(mean, ms_seed / cells, ms_problem / cells, df, own / cells)


def two_level(variant: Any, baseline: Any, confidence: float = stats.CONFIDENCE) -> PairedDifference:
    """The paired t over seeds with the problem component: outcomes [seeds, problems] per
    arm. Refused when no difference varies (every cell of variant - baseline equal)."""
    part = components(variant, baseline)
    if part.diff.ndim != 0:
        raise ValueError("two_level compares one study: outcomes of shape [seeds, problems]")
    se = float(part.se)
    if se == 0:
        raise ValueError("the paired t is undefined when every seed's difference is the same")
    low, high = part.interval(confidence)
    df = float(part.df)
    p = float(2 * _scipy().t.sf(abs(float(part.diff)) / se, df))
    seeds, problems = _arrays(variant, baseline, 2, "two-level interval")[0].shape
    return PairedDifference(
        TWO_LEVEL,
        float(part.diff),
        float(low),
        float(high),
        p,
        df,
        se,
        seeds,
        problems,
        float(part.seed_var),
        float(part.problem_var),
        float(part.problem_own),
        confidence,
    )


# --------------------------------------------------------------------------- one run per arm


def mcnemar(variant: Any, baseline: Any, confidence: float = stats.CONFIDENCE) -> PairedDifference:
    """McNemar's exact test on one run per arm: outcomes 0/1 per problem (shape [problems]).

    Only the discordant problems carry evidence: b right in the variant alone, c in the
    baseline alone; with no difference each is the variant's with probability 1/2, so p is
    `binomtest(b, b + c)`'s. The interval is the paired t's over problems (the Wald interval
    of b/n - c/n, with n - 1 degrees of freedom). About these two runs, not the arms.
    """
    import numpy as np

    a, b = _arrays(variant, baseline, 1, "McNemar")
    if a.ndim != 1 or not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        raise ValueError("McNemar's test takes one run per arm: one 0/1 outcome per problem")
    gained, lost = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    p = 1.0 if gained + lost == 0 else float(_scipy().binomtest(gained, gained + lost).pvalue)
    interval = _over_problems(a, b, confidence)
    return PairedDifference(
        "mcnemar", interval.diff, interval.low, interval.high, p, interval.df, interval.se, 1, int(a.size)
    )


def problems_t(variant: Any, baseline: Any, confidence: float = stats.CONFIDENCE) -> PairedDifference:
    """One run per arm with shares of correct samples per problem (shape [problems]): the
    paired t over problems (`ttest_rel`). About these two runs, not the arms."""
    a, b = _arrays(variant, baseline, 1, "paired t over problems")
    if a.ndim != 1:
        raise ValueError("the paired t over problems takes one run per arm: one share per problem")
    interval = _over_problems(a, b, confidence)
    if interval.se == 0:
        raise ValueError("the paired t is undefined when every problem's difference is the same")
    return interval


def _over_problems(a: np.ndarray, b: np.ndarray, confidence: float) -> PairedDifference:
    diffs = a - b
    n = int(a.size)
    if n < 2:
        raise ValueError("a test over problems needs 2+ problems")
    se = float(diffs.std(ddof=1) / math.sqrt(n))
    diff = float(diffs.mean())
    if se == 0:  # no problem differs in its difference: nothing varies, nothing to widen
        return PairedDifference("problems", diff, diff, diff, 1.0 if diff == 0 else 0.0, n - 1.0, 0.0, 1, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = _scipy().ttest_rel(a, b)
        interval = result.confidence_interval(confidence_level=confidence)
    return PairedDifference(
        "problems",
        diff,
        float(interval.low),
        float(interval.high),
        float(result.pvalue),
        float(result.df),
        se,
        1,
        n,
        confidence=confidence,
    )


# --------------------------------------------------------------------------- equivalence


@dataclass(frozen=True)
class PairedEquivalence:
    """TOST of |variant - baseline| < delta on a paired difference: p (the larger one-sided
    p) and the interval at 1 - 2 alpha; `outcome` is AT_CEILING instead when it cannot tell."""

    delta: float
    p: float
    low: float
    high: float
    outcome: str = ""

    @property
    def equivalent(self) -> bool:
        return not self.outcome and self.p < stats.ALPHA


def at_ceiling(variant_mean: float, baseline_mean: float, delta: float, ceiling: float = CEILING) -> bool:
    """Both arms within delta of the measure's ceiling: a difference of delta has no room."""
    return ceiling - variant_mean < delta and ceiling - baseline_mean < delta


def paired_tost(
    difference: PairedDifference,
    delta: float = stats.EQUIVALENCE_DELTA,
    means: tuple[float, float] | None = None,
    ceiling: float = CEILING,
) -> PairedEquivalence:
    """Two one-sided t tests, H0 diff <= -delta and H0 diff >= +delta, on the difference's
    own estimate, standard error and degrees of freedom. `means`: the two arms' measures,
    for the ceiling check (variant, baseline)."""
    if delta <= 0:
        raise ValueError("the equivalence margin delta must be positive")
    st = _scipy()
    se, df = difference.se, difference.df
    if se > 0:
        above = float(st.t.sf((difference.diff + delta) / se, df))
        below = float(st.t.cdf((difference.diff - delta) / se, df))
        half = float(st.t.ppf(stats.TOST_CONFIDENCE / 2 + 0.5, df)) * se
    else:  # no spread: the difference is what it is
        above = 0.0 if difference.diff > -delta else 1.0
        below = 0.0 if difference.diff < delta else 1.0
        half = 0.0
    outcome = AT_CEILING if means is not None and at_ceiling(*means, delta, ceiling) else ""
    return PairedEquivalence(delta, max(above, below), difference.diff - half, difference.diff + half, outcome)


# --------------------------------------------------------------------------- planning


def paired_power(effect: float, sd: float, pairs: Any, alpha: float, problem_var: float = 0.0) -> Any:
    """Power of a two-sided paired t with `pairs` seeds to detect `effect` when per-seed
    differences spread by `sd` and the problems add `problem_var` to the mean's variance:
    P(|T| > t_crit), T noncentral t with pairs - 1 df and noncentrality
    |effect| / sqrt(sd^2 / pairs + problem_var). The lower tail is taken by symmetry, as stats.py's two-sample power does (why: there)."""
    import numpy as np

    st = _scipy()
    pairs = np.asarray(pairs, dtype=float)
    df = pairs - 1
    noncentrality = abs(effect) / np.sqrt(sd**2 / pairs + problem_var)
    critical = st.t.ppf(1 - alpha / 2, df)
    return st.nct.sf(critical, df, noncentrality) + st.nct.sf(critical, df, -noncentrality)


def paired_seeds_needed(
    diff: float,
    sd: float,
    problem_var: float = 0.0,
    alpha: float = stats.ALPHA,
    power: float = stats.POWER,
    cap: int = stats.SEEDS_CAP,
) -> tuple[int, bool]:
    """Pairs of seeds for the paired t to detect `diff` when per-seed differences spread by
    `sd`: (n, capped), n the smallest in 2..cap reaching `power`. (cap, True) when none
    does, which a problem component alone can cause: it does not shrink with seeds."""
    if diff == 0 or not math.isfinite(diff):
        return cap, True
    if sd <= 0 and problem_var <= 0:
        return 2, False
    import numpy as np

    n = np.arange(2, cap + 1)
    enough = np.nonzero(paired_power(diff, max(sd, 0.0), n, alpha, problem_var) >= power)[0]
    return (int(n[enough[0]]), False) if enough.size else (cap, True)


def paired_mde(
    sd: float, pairs: int, problem_var: float = 0.0, alpha: float = stats.ALPHA, power: float = stats.POWER
) -> float | None:
    """The smallest |difference| the paired t over `pairs` seeds detects with `power` at
    `alpha`, for per-seed differences that spread by `sd` (plus the problem component).
    None with fewer than 2 pairs or no spread at all."""
    spread = sd**2 / max(pairs, 1) + problem_var
    if pairs < 2 or not math.isfinite(spread) or spread <= 0:
        return None
    from scipy.optimize import brentq

    def short(effect: float) -> float:
        return float(paired_power(effect, sd, pairs, alpha, problem_var)) - power

    scale = math.sqrt(spread)
    high = scale
    while short(high) < 0:  # power rises with the effect: bracket the root
        high *= 2
    return float(brentq(short, 0.0, high, xtol=1e-12 * scale))
