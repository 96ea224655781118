"""maj@k: answer classes from normalized spellings and the grader, the tie rule, subsets."""

from __future__ import annotations

import random
from itertools import combinations

import pytest

from grpoctl.analysis import majority
from grpoctl.analysis.majority import AnswerClasses, Verdicts, answer_classes, maj_at_k, subset_vote
from grpoctl.rewards import grade


def counting_grader():
    calls = []

    def grade_and_count(pred, truth):
        calls.append((pred, truth))
        return grade(pred, truth)

    return grade_and_count, calls


def test_equivalent_answers_written_differently_vote_together():
    grader, calls = counting_grader()
    verdicts = Verdicts(grader)
    answers = ["\\dfrac{1}{2}", "3", "0.5", "\\frac{1}{2}", "3", None, "1/2", ""]
    classes = answer_classes(answers, "\\frac{1}{2}", verdicts)
    # \dfrac{1}{2} and \frac{1}{2} share a spelling; 0.5 and 1/2 join them through the grader.
    assert classes.labels == (0, 1, 0, 0, 1, None, 0, None)
    assert classes.correct == (True, False)
    # Four votes for 1/2 against two for 3: the vote of all samples is right.
    assert maj_at_k(classes, len(answers), random.Random(0)) == 1.0
    # \frac{1}{2} shares a spelling with the first class, and the second 3 with the
    # second: neither reaches the grader.
    assert all(pred != "\\frac{1}{2}" for pred, _ in calls)
    # Plain numbers are told apart by value (as the grader does): only verdicts against the
    # truth reach the grader, one per class.
    assert calls == [("\\dfrac{1}{2}", "\\frac{1}{2}"), ("3", "\\frac{1}{2}")]


def test_answers_that_are_not_plain_numbers_are_merged_by_the_grader():
    grader, calls = counting_grader()
    classes = answer_classes(["x=2", "2", "\\sqrt{4}", "x = 2"], "2", Verdicts(grader))
    assert classes.labels == (0, 0, 0, 0) and classes.correct == (True,)
    assert ("2", "x=2") in calls and ("\\sqrt{4}", "x=2") in calls


def test_verdicts_are_cached_within_an_eval():
    grader, calls = counting_grader()
    verdicts = Verdicts(grader)
    for _ in range(3):
        answer_classes(["7", "7.0", "8"], "7", verdicts)
    first = verdicts.calls
    assert first == len(calls)
    answer_classes(["7", "7.0", "8"], "7", verdicts)
    assert verdicts.calls == first  # all from the cache
    answer_classes(["7"], "8", verdicts)  # a new truth is a new verdict
    assert verdicts.calls == first + 1


def test_a_tie_goes_to_the_class_whose_first_member_came_first():
    # A B B A: two votes each; A's first member came first.
    assert subset_vote([0, 1, 1, 0], range(4)) == 0
    # Within a subset, "first" is the first drawn: samples 1 and 2 are B then A, so B.
    assert subset_vote([0, 1, 0, 0, 1], [1, 2]) == 1
    classes = AnswerClasses(labels=(0, 1, 1, 0), correct=(False, True))
    assert maj_at_k(classes, 4, random.Random(0)) == 0.0  # the tie goes to wrong A
    classes = AnswerClasses(labels=(0, 1, 1, 0), correct=(True, False))
    assert maj_at_k(classes, 4, random.Random(0)) == 1.0  # ... and to right A


def test_unformatted_samples_form_no_class_and_never_vote():
    classes = AnswerClasses(labels=(None, None, None, 0), correct=(True,))
    # k=1: only the one formatted sample votes right.
    assert maj_at_k(classes, 1, random.Random(0)) == pytest.approx(0.25)
    assert maj_at_k(classes, 4, random.Random(0)) == 1.0
    assert answer_classes([None, ""], "1", Verdicts(grade)).labels == (None, None)


def brute_maj(labels, correct, k):
    """Every k-subset, votes counted with a Counter, ties to the earliest drawn."""
    wins = []
    for subset in combinations(range(len(labels)), k):
        votes = [labels[i] for i in subset if labels[i] is not None]
        if not votes:
            wins.append(False)
            continue
        top = max(votes.count(v) for v in set(votes))
        winner = next(v for v in votes if votes.count(v) == top)
        wins.append(correct[winner])
    return sum(wins) / len(wins)


def test_maj_at_k_over_every_subset_matches_brute_force():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 9)
        n_classes = rng.randint(1, 3)
        labels = tuple(rng.choice([None, *range(n_classes)]) for _ in range(n))
        seen = sorted({x for x in labels if x is not None}, key=labels.index)
        remap = {old: new for new, old in enumerate(seen)}
        labels = tuple(None if x is None else remap[x] for x in labels)
        correct = tuple(rng.random() < 0.5 for _ in seen)
        for k in range(1, n + 1):
            got = maj_at_k(AnswerClasses(labels, correct), k, random.Random(0))
            assert got == pytest.approx(brute_maj(labels, correct, k)), (labels, correct, k)


def test_many_subsets_are_sampled_with_the_given_seed(monkeypatch):
    # C(20, 10) = 184,756 > 10^4: 1,000 random subsets, the same ones for the same seed.
    labels = tuple([0, 1] * 10)
    classes = AnswerClasses(labels, (True, False))
    a = maj_at_k(classes, 10, random.Random(5))
    assert a == maj_at_k(classes, 10, random.Random(5))
    assert 0.3 < a < 0.8
    drawn = list(majority.k_subsets(20, 10, random.Random(5)))
    assert len(drawn) == majority.RANDOM_SUBSETS and all(len(set(s)) == 10 for s in drawn)
    assert len(list(majority.k_subsets(16, 4, random.Random(5)))) == 1820


def test_k_above_n_is_refused():
    with pytest.raises(ValueError):
        maj_at_k(AnswerClasses((0, 0), (True,)), 3, random.Random(0))
