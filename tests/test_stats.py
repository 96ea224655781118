"""The comparison statistics against numbers computed once by hand with scipy (each
expected value says which call produced it)."""

from __future__ import annotations

import pytest

from grpoctl.analysis import stats

# The worked example: three seeds per arm.
VARIANT = [0.70, 0.74, 0.66]
BASELINE = [0.62, 0.65, 0.60]


def test_welch_on_the_worked_example():
    d = stats.welch(VARIANT, BASELINE)
    # r = scipy.stats.ttest_ind(VARIANT, BASELINE, equal_var=False); r.pvalue, r.confidence_interval()
    assert d.p == pytest.approx(0.05886876404903681, rel=1e-9)
    assert (d.low, d.high) == pytest.approx((-0.005026512043801765, 0.1583598453771351), rel=1e-9)
    assert d.diff == pytest.approx(0.07666666666666666) and d.test == "welch"
    assert round(d.p, 3) == 0.059 and (round(d.low, 3), round(d.high, 3)) == (-0.005, 0.158)


def test_bca_only_from_eight_seeds_per_arm():
    assert stats.bca(VARIANT, BASELINE) is None  # 3 seeds: BCa would say [0.03, 0.12], Welch disagrees
    base8 = [0.60, 0.62, 0.58, 0.61, 0.63, 0.59, 0.60, 0.62]
    variant8 = [0.64, 0.66, 0.61, 0.65, 0.67, 0.63, 0.62, 0.66]
    assert stats.bca(variant8, base8[:7]) is None
    # scipy.stats.bootstrap((variant8, base8), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
    #                       vectorized=True, method="BCa", rng=0).confidence_interval
    assert stats.bca(variant8, base8) == pytest.approx((0.018750000000000155, 0.053750000000000075), rel=1e-9)


def test_welch_refuses_what_it_cannot_test():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.welch([0.7], BASELINE)
    with pytest.raises(ValueError, match="agrees exactly"):
        stats.welch([0.5, 0.5], [0.4, 0.4])
    assert stats.welch([0.5, 0.5], [0.4, 0.42]).p < 0.1  # one arm's spread is enough


def test_holm():
    # Sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04; kept non-decreasing: 0.03, 0.06, 0.06.
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.2, 0.01]) == pytest.approx([0.2, 0.02])
    assert stats.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert stats.holm([0.04]) == [0.04] and stats.holm([]) == []


def test_seeds_needed_from_the_noncentral_t():
    # The issue: ~6 seeds per arm separate 2 points when the seed sd is 1 point. By hand, the
    # power 1 - nct.cdf(t, 2n-2, 2*sqrt(n/2)) + nct.cdf(-t, ...), t = t.ppf(0.975, 2n-2),
    # is 0.791 at n = 5 and 0.876 at n = 6.
    assert stats.seeds_needed(0.02, 0.01) == (6, False)
    assert stats.seeds_needed(-0.02, 0.01) == (6, False)  # either direction
    # The worked example: pooled sd sqrt((var(VARIANT) + var(BASELINE)) / 2); power 0.887 at 5.
    assert stats.seeds_needed(0.07666666666666666, stats.pooled_sd(VARIANT, BASELINE)) == (5, False)
    assert stats.seeds_needed(0.0005, 0.05) == (stats.SEEDS_CAP, True)  # near zero: capped
    assert stats.seeds_needed(0.0, 0.05) == (stats.SEEDS_CAP, True)
    assert stats.seeds_needed(0.01, 0.0) == (2, False)


def test_one_eval_each_wilson_and_two_proportions():
    # scipy.stats.binomtest(700, 1000).proportion_ci(method="wilson")
    assert stats.wilson(700, 1000) == pytest.approx((0.6708761390827828, 0.7275931575229951), rel=1e-9)
    d = stats.two_proportions(660, 1000, 700, 1000)
    # p: scipy.stats.chi2_contingency([[660, 340], [700, 300]], correction=False).pvalue
    assert d.p == pytest.approx(0.05518555099113409, rel=1e-9) and d.test == "two-proportion"
    # Newcombe from the two Wilson intervals (660: 0.630077-0.688698, 700: 0.670876-0.727593):
    # -0.04 - sqrt((0.66 - 0.630077)^2 + (0.727593 - 0.70)^2), -0.04 + sqrt((0.688698 - 0.66)^2 + (0.70 - 0.670876)^2)
    assert d.diff == pytest.approx(-0.04)
    assert (d.low, d.high) == pytest.approx((-0.08070318347527537, 0.0008874214637380126), rel=1e-9)
    nothing = stats.two_proportions(0, 512, 0, 512)
    assert nothing.p == 1.0 and nothing.diff == 0 and nothing.low < 0 < nothing.high


def test_verdicts():
    assert stats.verdict(0.05, 0.01) == "better"
    assert stats.verdict(-0.05, 0.049) == "worse"
    assert stats.verdict(0.05, 0.05) == "within noise"


# The hand computations below use this power function, written out from scipy alone:
#   def power(d, sd, n1, n2, a=0.05):
#       df = n1 + n2 - 2; nc = d / (sd * sqrt(1/n1 + 1/n2)); c = scipy.stats.t.ppf(1 - a/2, df)
#       return scipy.stats.nct.sf(c, df, nc) + scipy.stats.nct.sf(c, df, -nc)
# (the lower tail by symmetry: scipy.stats.nct.cdf(-c, df, nc) is NaN at nc ~10-12, df 2-4).


def test_minimum_detectable_effect():
    # scipy.optimize.brentq(lambda d: power(d, 0.02, 3, 3) - 0.8, 1e-9, 1, xtol=1e-14)
    assert stats.mde(0.02, 3, 3) == pytest.approx(0.061417845327273735, rel=1e-7)
    # the "about 6 points at 3 seeds with a seed sd of 2 points; 8-10+ after Holm":
    # ... at alpha 0.05 / 13 (Holm's first step over 13 findings)
    assert stats.mde(0.02, 3, 3, alpha=0.05 / 13) == pytest.approx(0.1233541322227089, rel=1e-7)
    # unequal arms: brentq(lambda d: power(d, 0.02, 5, 4) - 0.8, ...)
    assert stats.mde(0.02, 5, 4) == pytest.approx(0.04386843163923231, rel=1e-7)
    # the worked example's pooled sd 0.0334165627596057
    assert stats.mde(stats.pooled_sd(VARIANT, BASELINE), 3, 3) == pytest.approx(0.10261866414692998, rel=1e-7)
    # power at the MDE is what it was solved for, and more seeds resolve less
    assert stats.mde(0.02, 10, 10) < stats.mde(0.02, 3, 3)
    assert stats.mde(0.02, 1, 3) is None and stats.mde(0.0, 3, 3) is None


def test_seeds_needed_for_a_given_effect():
    # The seed's own std-normalization effect, 7 points (0.72 vs 0.65), at seed sds of 2 and
    # 3 points: power(0.07, 0.02, n, n) is 0.477 at 2, 0.886 at 3; power(0.07, 0.03, n, n)
    # is 0.580 at 3, 0.784 at 4, 0.896 at 5.
    assert stats.seeds_needed(0.07, 0.02) == (3, False)
    assert stats.seeds_needed(0.07, 0.03) == (5, False)


def test_seeds_needed_where_scipy_gives_nan():
    # docs/results/registry.db, tiny-sft-init: warmstart_100's last-3 means against
    # warmstart_final's; tiny-lr-sweep: lr=3e-3 (all zero) against lr=3e-4.
    warm100 = [0.005859375, 0.005859375, 0.0]
    final = [0.6184895833333334, 0.578125, 0.6048177083333334]
    lr3e3 = [0.0, 0.0, 0.0]
    lr3e4 = [0.578125, 0.6048177083333334, 0.6184895833333334]
    for variant, base in ((warm100, final), (lr3e3, lr3e4)):
        d = stats.welch(variant, base).diff
        # power(d, sd, 2, 2) is 1.0 for both, while nct.cdf(-c, 2, nc) is nan at n = 2 and 3:
        # the NaN made the old code answer 4 for warmstart_100 and 3 for lr=3e-3
        assert stats.seeds_needed(d, stats.pooled_sd(variant, base)) == (2, False)


def test_tost_equivalence():
    close = [0.612, 0.605, 0.618, 0.609]
    base = [0.607, 0.615, 0.603, 0.611]
    e = stats.tost(close, base)  # delta 3 points by default
    # scipy.stats.ttest_ind(close + 0.03, base, equal_var=False, alternative="greater").pvalue
    #   = 7.382618590567851e-05; ... (close - 0.03, ..., alternative="less").pvalue = 0.00015439957450757923
    assert e.delta == stats.EQUIVALENCE_DELTA == 0.03
    assert e.p == pytest.approx(0.00015439957450757923, rel=1e-9) and e.equivalent
    # ttest_ind(close, base, equal_var=False).confidence_interval(0.90)
    assert (e.low, e.high) == pytest.approx((-0.005318399682991381, 0.009318399682991384), rel=1e-9)
    w = stats.tost(VARIANT, BASELINE)
    # the worked example: greater 0.012021481424096252, less 0.9121896802430752
    assert w.p == pytest.approx(0.9121896802430752, rel=1e-9) and not w.equivalent
    assert (w.low, w.high) == pytest.approx((0.015223474452396808, 0.13810985888093646), rel=1e-9)
    # equivalent at 0.05 exactly when the 90% interval lies inside +-delta
    assert e.equivalent == (-e.delta < e.low and e.high < e.delta)
    with pytest.raises(ValueError, match="positive"):
        stats.tost(close, base, delta=0)


def test_holm_over_a_page_family():
    # A page's family across studies, by hand: sorted 0.0003 (x5) 0.0015, 0.0117 (x4) 0.0468,
    # 0.02 (x3) 0.06, 0.04 (x2) 0.08, 0.6 (x1) 0.6.
    family = {"lr": 0.0117, "sft": 0.0003, "std": 0.04, "reuse": 0.02, "baseline": 0.6}
    assert stats.holm_family(family) == pytest.approx(
        {"lr": 0.0468, "sft": 0.0015, "std": 0.08, "reuse": 0.06, "baseline": 0.6}
    )
    # the same p inside a study of 2 would be Holm'd by 2 only: the page's family is wider
    assert stats.holm([0.0117, 0.02])[0] == pytest.approx(0.0234)
