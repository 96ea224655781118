"""maj@k: is the most common answer among k samples right? (majority voting, or
self-consistency, Wang et al., 2022).

A problem's n samples are first put into answer classes:

1. by their normalized answer string (rewards/normalize.py), which is free;
2. then the classes' representatives (each class's first member) are compared with the
   grader, each new class against the earlier ones, so that `\\frac{1}{2}` and `0.5`,
   which normalize differently, vote together. The grader never runs between two members
   of one class, only between representatives;
3. each class's representative is graded against the truth.

Every verdict is cached per (normalized answer, other side) in a `Verdicts` for the whole
eval: most problems' samples repeat a handful of answers, and the lab's repeat across
problems too. A sample without an answer (not in the template's format) forms no class
and never votes.

maj@k of a problem is the mean, over k-subsets of its n samples, of "the largest class
in the subset is right": over every k-subset when C(n, k) <= 10^4, else over 1,000
random ones drawn by a `random.Random` seeded by the caller. A tie goes to the class
whose first member in the subset came first (the sample drawn earliest), and a subset
with no formatted sample counts as wrong. At k = n that is the one vote of all samples.

Pure: the grader is passed in (`grade(pred, truth) -> bool`), so these functions know
nothing of math-verify, torch or the registry.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

from grpoctl.analysis.pass_at_k import check_k
from grpoctl.rewards.normalize import normalize_answer, plain_number

EXHAUSTIVE_LIMIT = 10_000  # enumerate every k-subset up to this many
RANDOM_SUBSETS = 1_000  # else average over this many seeded random ones
CLASS_KEY = "class:"  # a cache key's other side when it is a class representative, not a truth


@dataclass
class Verdicts:
    """The grader's verdicts within one eval, cached per (normalized answer, other side)."""

    grade: Callable[[str, str], bool]
    cache: dict[tuple[str, str], bool | None] = field(default_factory=dict)
    calls: int = 0  # grader calls actually made (the rest came from the cache)

    def same(self, answer: str, other: str, other_key: str | None = None) -> bool:
        key = (normalize_answer(answer), other if other_key is None else other_key)
        if key not in self.cache:
            self.cache[key] = self._plain_numbers_equal(key) if other_key is not None else None
            if self.cache[key] is None:
                self.calls += 1
                self.cache[key] = bool(self.grade(answer, other))
        return bool(self.cache[key])

    @staticmethod
    def _plain_numbers_equal(key: tuple[str, str]) -> bool | None:
        """Two classes whose spellings are both plain numbers (integers, decimals, integer
        fractions) are the same answer exactly when their values are: the grader compares
        such numbers exactly too (docs/grading.md), so it is not asked."""
        left, right = plain_number(key[0]), plain_number(key[1].removeprefix(CLASS_KEY))
        return None if left is None or right is None else left == right


@dataclass(frozen=True)
class AnswerClasses:
    """A problem's samples by answer: labels[i] is sample i's class (classes are numbered
    in the order of their first member), None for a sample without an answer."""

    labels: tuple[int | None, ...]
    correct: tuple[bool, ...]  # per class: its representative is right


def answer_classes(answers: Sequence[str | None], truth: str, verdicts: Verdicts) -> AnswerClasses:
    """Classes of the extracted answers (None or "": no answer) of one problem's samples."""
    by_spelling: dict[str, int] = {}  # normalized answer -> class
    representatives: list[str] = []  # each class's first member's answer
    labels: list[int | None] = []
    for answer in answers:
        if not answer:
            labels.append(None)
            continue
        spelling = normalize_answer(answer)
        if spelling not in by_spelling:
            # A new spelling: the same answer as an earlier class's representative, or a new class.
            match = next(
                (
                    c
                    for c, rep in enumerate(representatives)
                    if verdicts.same(answer, rep, other_key=CLASS_KEY + normalize_answer(rep))
                ),
                None,
            )
            if match is None:
                match = len(representatives)
                representatives.append(answer)
            by_spelling[spelling] = match
        labels.append(by_spelling[spelling])
    correct = tuple(verdicts.same(rep, truth) for rep in representatives)
    return AnswerClasses(tuple(labels), correct)


def subset_vote(labels: Sequence[int | None], subset: Sequence[int]) -> int | None:
    """The winning class among the samples at `subset` (in draw order); None: no votes."""
    counts: dict[int, int] = {}  # in order of each class's first member in the subset
    for i in subset:
        label = labels[i]
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    # max() keeps the first of equal counts: a tie goes to the class whose first member came first.
    return max(counts, key=counts.__getitem__) if counts else None


def k_subsets(n: int, k: int, rng: random.Random):
    """Every k-subset of range(n) when there are at most EXHAUSTIVE_LIMIT, else RANDOM_SUBSETS
    random ones (each sorted, so draw order is sample order)."""
    if comb(n, k) <= EXHAUSTIVE_LIMIT:
        yield from combinations(range(n), k)
        return
    for _ in range(RANDOM_SUBSETS):
        yield sorted(rng.sample(range(n), k))


def maj_at_k(classes: AnswerClasses, k: int, rng: random.Random) -> float:
    """The mean over k-subsets of "the subset's largest class is right" for one problem."""
    n = len(classes.labels)
    check_k(n, k)
    if not any(classes.correct):
        return 0.0  # no subset can vote right
    if len(classes.correct) == 1 and None not in classes.labels:
        return 1.0  # one answer, on every sample, and it is right
    wins = total = 0
    for subset in k_subsets(n, k, rng):
        winner = subset_vote(classes.labels, subset)
        wins += winner is not None and classes.correct[winner]
        total += 1
    return wins / total
