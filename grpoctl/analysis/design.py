"""Which test a comparison's design allows, and what each problem did between two arms.

`choose` reads the design off the runs and applies the test it allows (analysis/paired.py
and stats.py have the tests):

- matched seeds (every seed of the smaller arm also ran in the other, 2+ of them): the
  paired t over per-seed differences; with per-problem outcomes for every paired seed in
  both arms, the two-level interval (seeds + problems, Satterthwaite df); without them,
  seeds only, and the result says "problem level: not recorded". A larger arm's seeds
  without a partner are left out, and named;
- seeds that do not match: Welch's t, as before pairing existed;
- one seed per arm: the two runs on the problems (McNemar's exact test for 0/1 outcomes,
  the paired t over problems for shares of samples; without outcomes, the two-proportion
  test on the eval's counts), which says whether these two runs differ, never a verdict
  on the arms.

The MDE and the seeds needed are those of the test applied: a paired test plans from the
sd of the per-seed differences (and the problem component), Welch from the pooled sd.

`learned_forgot` is the per-problem table: which problems one arm has right and the other
wrong, by level.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from grpoctl.analysis import paired, stats


@dataclass
class ArmRuns:
    """One arm's runs: each seed's measure, and where recorded each seed's per-problem
    outcomes (0/1 per problem for greedy, the share of correct samples for sampled) behind
    it, so that a seed's measure is the mean of its outcomes (for a measure averaged over
    the last k evals, each problem's outcome is its mean over those evals)."""

    measures: Mapping[Hashable, float]  # by seed (a seed run twice: analysis/baseline.py's seed_keys)
    outcomes: Mapping[Hashable, Any] = field(default_factory=dict)  # seed -> array [problems]
    problems: int | None = None  # the eval's problem count, for one seed without outcomes


@dataclass(frozen=True)
class Choice:
    """The test the design allowed, and everything it gives; test "" with `note` when none."""

    test: str = ""
    difference: stats.Difference | None = None
    detail: paired.PairedDifference | None = None  # paired and one-run tests: df, variance parts
    equivalence: paired.PairedEquivalence | None = None
    bca: tuple[float, float] | None = None
    mde: float | None = None
    seeds_needed: tuple[int, bool] | None = None
    sd: float | None = None  # the spread the MDE is planned from
    pairs: int = 0
    left_out: tuple[Hashable, ...] = ()  # seeds of the larger arm with no partner
    note: str = ""
    arm_seeds: tuple[int, int] = (0, 0)  # Welch: the seeds of each arm

    @property
    def name(self) -> str:
        """The test's short name, as every caller prints it ("" when none ran)."""
        if self.detail is not None:
            return self.detail.name
        return paired.TESTS.get(self.test, "")

    @property
    def problem_level(self) -> str | None:
        return None if self.detail is None else self.detail.problem_level

    @property
    def scope(self) -> str | None:
        """ "these two runs differ" (or not) for a one-run test; None for a test on the arms."""
        if self.detail is not None:
            return self.detail.scope
        if self.test in paired.RUN_TESTS and self.difference is not None:
            return paired.runs_verdict(self.difference.p)
        return None


def _seed_order(key: Hashable) -> tuple:
    return (key, 0) if isinstance(key, int) else tuple(key)  # type: ignore[arg-type]


def matched_seeds(
    variant: Mapping[Hashable, float], baseline: Mapping[Hashable, float]
) -> tuple[list[Hashable], tuple[Hashable, ...]]:
    """(the seeds to pair, the larger arm's seeds left out); no seeds when the arms do not
    pair: fewer than 2 shared, or a seed of the smaller arm missing from the other."""
    shared = sorted(set(variant) & set(baseline), key=_seed_order)
    smaller = min(len(variant), len(baseline))
    if len(shared) < 2 or len(shared) < smaller:
        return [], ()
    return shared, tuple(sorted((set(variant) | set(baseline)) - set(shared), key=_seed_order))


def choose(
    variant: ArmRuns,
    baseline: ArmRuns,
    delta: float | None = None,
    ceiling: float = paired.CEILING,
    confidence: float = stats.CONFIDENCE,
) -> Choice:
    """The test the design allows, applied; with `delta`, its equivalence test too (AT_CEILING
    when both arms sit within delta of `ceiling`). Raises ValueError when outcomes of the
    two arms cover different problems."""
    v, b = variant.measures, baseline.measures
    if not v or not b:
        return Choice(note="no measure yet in " + ("this variant" if not v else "the baseline"))
    seeds, left_out = matched_seeds(v, b)
    if seeds:
        return _paired(variant, baseline, seeds, left_out, delta, ceiling, confidence)
    if len(v) >= 2 and len(b) >= 2:
        return _welch(list(v.values()), list(b.values()), delta, ceiling)
    if len(v) == 1 and len(b) == 1:
        return _one_run_each(variant, baseline, confidence)
    return Choice(
        note=f"{len(v)} seed(s) against the baseline's {len(b)}: a test over seeds needs 2+ in each arm "
        "(or exactly one in each, for a test on the two runs)"
    )


def _paired(
    variant: ArmRuns,
    baseline: ArmRuns,
    seeds: list[Hashable],
    left_out: tuple[Hashable, ...],
    delta: float | None,
    ceiling: float,
    confidence: float,
) -> Choice:
    import numpy as np

    v = np.array([variant.measures[s] for s in seeds], dtype=float)
    b = np.array([baseline.measures[s] for s in seeds], dtype=float)
    if all(s in variant.outcomes and s in baseline.outcomes for s in seeds):
        v_out, b_out = (np.array([arm.outcomes[s] for s in seeds], dtype=float) for arm in (variant, baseline))
        if v_out.shape != b_out.shape:
            raise ValueError(f"per-problem outcomes of different problems: {v_out.shape} and {b_out.shape}")
        try:
            detail = paired.two_level(v_out, b_out, confidence)
        except ValueError:
            return Choice("paired", pairs=len(seeds), left_out=left_out, note="no difference varies: nothing to test")
        # planning: the variance at n seeds is sd^2 / n + problem_own, as the interval's is
        # at these seeds (seed_var + problem_var)
        problem_var = detail.problem_own or 0.0
        sd = float(np.sqrt(((detail.seed_var or 0.0) + (detail.problem_var or 0.0) - problem_var) * len(seeds)))
    else:
        try:
            detail = paired.paired_t(v, b, confidence=confidence)
        except ValueError:
            return Choice(
                "paired",
                pairs=len(seeds),
                left_out=left_out,
                note="every seed's difference is the same: nothing to test",
            )
        sd, problem_var = float(np.std(v - b, ddof=1)), 0.0
    equivalence = None
    if delta is not None:
        equivalence = paired.paired_tost(detail, delta, (float(v.mean()), float(b.mean())), ceiling)
    return Choice(
        detail.test,
        detail.as_difference(),
        detail,
        equivalence,
        paired.paired_bca(v, b, confidence),
        paired.paired_mde(sd, len(seeds), problem_var),
        paired.paired_seeds_needed(detail.diff, sd, problem_var),
        sd,
        len(seeds),
        left_out,
    )


def _welch(v: list[float], b: list[float], delta: float | None, ceiling: float) -> Choice:
    if stats.spread(v) == 0 and stats.spread(b) == 0:
        return Choice("welch", note="every seed of both arms scored the same: no spread over seeds to test against")
    difference = stats.welch(v, b)
    sd = stats.pooled_sd(v, b)
    equivalence = None
    if delta is not None:
        tost = stats.tost(v, b, delta)
        outcome = paired.AT_CEILING if paired.at_ceiling(fmean(v), fmean(b), delta, ceiling) else ""
        equivalence = paired.PairedEquivalence(delta, tost.p, tost.low, tost.high, outcome)
    return Choice(
        "welch",
        difference,
        None,
        equivalence,
        stats.bca(v, b),
        stats.mde(sd, len(v), len(b)),
        stats.seeds_needed(difference.diff, sd),
        sd,
        arm_seeds=(len(v), len(b)),
    )


def _one_run_each(variant: ArmRuns, baseline: ArmRuns, confidence: float) -> Choice:
    import numpy as np

    (vs, v_measure), (bs, b_measure) = next(iter(variant.measures.items())), next(iter(baseline.measures.items()))
    if vs in variant.outcomes and bs in baseline.outcomes:
        a, b = np.asarray(variant.outcomes[vs], dtype=float), np.asarray(baseline.outcomes[bs], dtype=float)
        if a.shape != b.shape:
            raise ValueError(f"per-problem outcomes of different problems: {a.shape} and {b.shape}")
        binary = np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()
        try:
            detail = (paired.mcnemar if binary else paired.problems_t)(a, b, confidence)
        except ValueError:
            return Choice("problems", note="every problem's difference is the same: nothing to test")
        return Choice(detail.test, detail.as_difference(), detail, pairs=1)
    n, base_n = variant.problems, baseline.problems
    if not n or not base_n:
        return Choice(note="one seed per arm and the evals' sizes are unknown: no test")
    difference = stats.two_proportions(round(v_measure * n), n, round(b_measure * base_n), base_n)
    return Choice("two-proportion", difference)


# --------------------------------------------------------------------------- planning under the test applied


def _problem_own(choice: Choice) -> float:
    """The problem component more seeds keep (two-level interval only)."""
    return (choice.detail.problem_own or 0.0) if choice.detail is not None else 0.0


def seeds_for(choice: Choice, effect: float, alpha: float = stats.ALPHA) -> tuple[int, bool] | None:
    """Seeds the test `choice` applied needs to detect `effect` at `alpha` with stats.POWER:
    pairs of seeds for a paired test, seeds per arm for Welch; None for a test on one run
    per arm (one run has no spread over seeds to plan from) or when nothing was tested."""
    if choice.sd is None or choice.test not in (*paired.PAIRED_TESTS, "welch"):
        return None
    if choice.test == "welch":
        return stats.seeds_needed(effect, choice.sd, alpha)
    return paired.paired_seeds_needed(effect, choice.sd, _problem_own(choice), alpha)


def mde_at(choice: Choice, alpha: float) -> float | None:
    """The MDE of the test `choice` applied, over the seeds it had, at `alpha` (a family's
    strictest, alpha / m, say)."""
    if choice.sd is None or choice.test not in (*paired.PAIRED_TESTS, "welch") or choice.difference is None:
        return None
    if choice.test == "welch":
        return stats.mde(choice.sd, *choice.arm_seeds, alpha=alpha)
    return paired.paired_mde(choice.sd, choice.pairs, _problem_own(choice), alpha=alpha)


# --------------------------------------------------------------------------- learned / forgot


def learned_forgot(variant: Any, baseline: Any, levels: Sequence[Hashable] | None = None) -> dict[str, dict[str, int]]:
    """Per level (and "all"), how many problems each arm has right and the other wrong.

    variant, baseline: outcomes [problems] (one run) or [seeds, problems] (paired seeds),
    the same problems in the same order. A problem is right in an arm when its mean outcome
    over the arm's seeds (and samples) is above 1/2, wrong below 1/2, and "split" when
    exactly 1/2 in either arm. "learned": right in the variant, wrong in the baseline;
    "forgot": the reverse. levels: each problem's level (None: the table has "all" only).
    """
    import numpy as np

    a, b = (np.asarray(x, dtype=float) for x in (variant, baseline))
    if a.shape != b.shape or a.ndim not in (1, 2):
        raise ValueError(f"outcomes must be [problems] or [seeds, problems] in both arms, got {a.shape} and {b.shape}")
    a, b = (x.reshape(-1, x.shape[-1]).mean(axis=0) for x in (a, b))
    if levels is not None and len(levels) != a.size:
        raise ValueError(f"{a.size} problems but {len(levels)} levels")
    masks = ((a > 0.5) & (b < 0.5), (a < 0.5) & (b > 0.5), (a > 0.5) & (b > 0.5), (a < 0.5) & (b < 0.5))
    kinds = dict(zip(paired.CHANGES, (*masks, (a == 0.5) | (b == 0.5)), strict=True))
    groups: dict[str, Any] = {"all": np.ones(a.size, dtype=bool)}
    if levels is not None:
        keys = np.array([str(level) for level in levels])
        for level in dict.fromkeys(str(level) for level in levels):
            groups[level] = keys == level
    return {
        name: {"problems": int(members.sum()), **{k: int((mask & members).sum()) for k, mask in kinds.items()}}
        for name, members in groups.items()
    }
