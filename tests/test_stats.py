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
