"""pass@k against a brute-force count over every k-subset, and its checks."""

from __future__ import annotations

from itertools import combinations

import pytest

from grpoctl.analysis.pass_at_k import mean_pass_at_k, pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_right_sample(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_share_right_and_pass_at_n_is_any_right():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 0, 16) == 0.0


def test_product_form_holds_where_binomials_overflow_a_float():
    # C(1000, 500) is about 2.7e299, C(2000, 1000) overflows a float; the product does not.
    value = pass_at_k(2000, 3, 1000)
    assert value == pytest.approx(1 - (1000 * 999 * 998) / (2000 * 1999 * 1998))


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 0), (4, 1, 5), (0, 0, 1), (4, 5, 1), (4, -1, 1)])
def test_k_above_n_and_impossible_counts_are_refused(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_over_problems():
    assert mean_pass_at_k(4, [0, 4, 2], 2) == pytest.approx((0 + 1 + brute_force(4, 2, 2)) / 3)
    with pytest.raises(ValueError):
        mean_pass_at_k(4, [], 1)
