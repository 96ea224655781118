"""pass@k: the chance that at least one of k samples, drawn without replacement from the
n graded samples of a problem, is right (Chen et al., 2021, the Codex paper).

    pass@k = 1 - C(n - c, k) / C(n, k)      (c of the n samples are right)

computed in its product form, 1 - prod_{i = n-c+1}^{n} (1 - k / i), which never forms a
binomial coefficient: C(160, 80) overflows a float, the product of c factors in (0, 1]
does not. Pure functions over counts; no torch, no grader.
"""

from __future__ import annotations

from collections.abc import Sequence


def check_k(n: int, k: int) -> None:
    """k must be a sample count the n samples can supply: 1 <= k <= n."""
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample per problem, got n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the samples per problem ({n}), got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem with c right answers among n samples."""
    check_k(n, k)
    if not 0 <= c <= n:
        raise ValueError(f"right answers must be between 0 and n={n}, got {c}")
    if n - c < k:
        return 1.0  # every k-subset holds a right answer
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(n: int, right_counts: Sequence[int], k: int) -> float:
    """pass@k averaged over problems, each with n samples of which right_counts[i] are right."""
    if not right_counts:
        raise ValueError("pass@k needs at least one problem")
    return sum(pass_at_k(n, c, k) for c in right_counts) / len(right_counts)
