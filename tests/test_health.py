"""Health flags on synthetic curves: collapses fire at the step they begin, healthy noisy
learning curves (and single noisy points) fire nothing."""

from __future__ import annotations

import math
import random

from grpoctl.analysis.health import (
    accuracy_drop,
    accuracy_stuck_at_zero,
    entropy_collapse,
    flat_reward,
    grad_explosion,
    grading_errors,
    length_flags,
    run_flags,
)


def series(values, start=0, every=1):
    return [(start + i * every, float(v)) for i, v in enumerate(values)]


def healthy_run(seed: int, steps: int = 60) -> dict:
    """Reward rising 0.3 -> 0.7, entropy falling smoothly by half, length steady, grad norm
    noisy, eval accuracy rising with +-5-point swings: the tiny lr=3e-4 run, idealised."""
    rng = random.Random(seed)
    t = [i / (steps - 1) for i in range(steps)]
    return {
        "train/reward": series(0.3 + 0.4 * x + rng.gauss(0, 0.03) for x in t),
        "train/token_entropy": series(1.0 - 0.5 * x + rng.gauss(0, 0.03) for x in t),
        "train/response_length": series(14 + rng.gauss(0, 1.0) for _ in t),
        "train/response_clip_fraction": series(abs(rng.gauss(0.02, 0.02)) for _ in t),
        "train/grad_norm": series(abs(rng.gauss(0.5, 0.15)) + 0.05 for _ in t),
        "eval/accuracy": series([0.35 + 0.06 * i + rng.gauss(0, 0.05) for i in range(7)], every=10),
    }


def collapsed_run(steps: int = 60, at: int = 4, blow_up: bool = True) -> dict:
    """The tiny lr=1e-3 pattern: a few normal steps, then entropy to ~0, responses stuck at
    the 32-token limit (or shrunk to a few tokens), reward flat at 0, eval accuracy 0."""
    before = range(at)
    after = range(at, steps)
    return {
        "train/reward": series([0.3, 0.32, 0.28, 0.2][:at] + [0.0] * len(after)),
        "train/token_entropy": series([1.0] * len(before) + [0.02] * len(after)),
        "train/response_length": series([14.0] * len(before) + [32.0 if blow_up else 3.0] * len(after)),
        "train/response_clip_fraction": series([0.0] * len(before) + [1.0 if blow_up else 0.0] * len(after)),
        "train/grad_norm": series([0.5] * len(before) + [0.5] * len(after)),
        "eval/accuracy": series([0.35] + [0.0] * 6, every=10),
    }


def kinds(flags):
    return {f.kind: f.step for f in flags}


def test_healthy_noisy_curves_raise_no_flags():
    for seed in range(20):
        assert run_flags(healthy_run(seed), status="finished") == [], seed


def test_single_noisy_points_do_not_fire():
    run = healthy_run(0)
    run["train/token_entropy"][30] = (30, 0.001)
    run["train/response_length"][20] = (20, 1.0)
    run["train/response_length"][40] = (40, 200.0)
    run["train/response_clip_fraction"][10] = (10, 0.9)
    run["train/grad_norm"][25] = (25, 50.0)
    run["eval/accuracy"][-1] = (60, 0.0)
    assert run_flags(run) == []


def test_two_bad_points_in_a_row_are_still_noise():
    length = series([14] * 10 + [2, 2] + [14] * 10)
    assert length_flags(length) == []
    assert grad_explosion(series([0.5] * 10 + [9, 9] + [0.5] * 10)) == []


def test_the_lr_1e3_collapse_is_flagged_from_where_it_began():
    flags = kinds(run_flags(collapsed_run(at=4)))
    assert flags["entropy collapse"] == 4
    assert flags["length blow-up"] == 4
    assert flags["flat reward"] == 4
    assert flags["eval accuracy at 0"] == 10
    shrunk = kinds(run_flags(collapsed_run(at=6, blow_up=False)))
    assert shrunk["length collapse"] == 6 and "length blow-up" not in shrunk


def test_a_collapse_in_the_very_first_updates_is_seen():
    # The early median would already be the collapsed level; the first point is not.
    entropy = series([1.2, 0.03, 0.02, 0.02, 0.02, 0.02])
    assert kinds(entropy_collapse(entropy)) == {"entropy collapse": 1}


def test_entropy_collapse_thresholds():
    falling = series([1.0, 1.0, 1.0, 0.5, 0.2, 0.12, 0.09, 0.08, 0.07])
    assert kinds(entropy_collapse(falling)) == {"entropy collapse": 6}  # < 10% of 1.0
    near_zero = series([0.05, 0.05, 0.05, 0.004, 0.004, 0.004])  # low from the start
    assert kinds(entropy_collapse(near_zero)) == {"entropy collapse": 3}
    assert entropy_collapse(series([0.005] * 10)) == []  # started there: nothing collapsed


def test_length_blow_up_by_ratio_and_by_the_token_limit():
    grows = series([300] * 5 + [500, 700, 950, 1000, 1020, 1024])
    assert kinds(length_flags(grows)) == {"length blow-up": 7}  # > 3 x 300
    clipped = series([0.05] * 5 + [0.3, 0.6, 0.7, 0.8])
    assert kinds(length_flags(series([300] * 9), clipped)) == {"length blow-up": 6}


def test_grad_norm_explosion_and_non_finite():
    spikes = series([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.6, 8.0, 9.0, 12.0, 10.0])
    flag = grad_explosion(spikes)
    assert kinds(flag) == {"grad-norm explosion": 7} and "median 0.5" in flag[0].detail
    assert kinds(grad_explosion(series([0.5, 0.5, math.nan, 0.5]))) == {"grad-norm explosion": 2}
    assert grad_explosion(series([30, 40, 50])) == []  # no history to compare with
    # A steady rise is not an explosion: each step is near the running median.
    assert grad_explosion(series([0.5 * 1.1**i for i in range(40)])) == []


def test_flat_reward_starts_where_the_flat_stretch_starts():
    reward = series([0.2, 0.3, 0.25, 0.31] + [0.0] * 30)
    assert kinds(flat_reward(reward)) == {"flat reward": 4}
    assert "stuck at 0.00" in flat_reward(reward)[0].detail
    plateau = series([0.3 + 0.01 * i for i in range(20)] + [0.7 + (0.02 if i % 2 else -0.02) for i in range(20)])
    assert flat_reward(plateau) == []  # a noisy plateau still moves
    assert flat_reward(series([0.0] * 8)) == []  # too short to say


def test_accuracy_stuck_at_zero_needs_three_evals():
    assert accuracy_stuck_at_zero(series([0.3, 0.0, 0.0], every=10)) == []
    assert kinds(accuracy_stuck_at_zero(series([0.3, 0.0, 0.0, 0.0], every=10))) == {"eval accuracy at 0": 10}
    assert accuracy_stuck_at_zero(series([0.0, 0.0, 0.0, 0.1], every=10)) == []  # it recovered


def test_short_or_empty_series_and_status():
    assert run_flags({}) == []
    assert run_flags({k: v[:2] for k, v in collapsed_run().items()}) == []
    flags = run_flags({}, status="diverged", last_step=17, error="non-finite loss at step 18")
    assert [(f.kind, f.step) for f in flags] == [("diverged", 17)]
    assert str(flags[0]) == "diverged at step 17 (non-finite loss at step 18)"


def test_accuracy_that_collapses_or_declines_is_flagged():
    # A tiny lr=1e-3 run at 25 steps: 0.455 before training, then ~0.31 for good.
    decline = series([0.455, 0.314, 0.307, 0.312], every=10)
    assert kinds(accuracy_drop(decline)) == {"eval accuracy drop": 10}
    assert kinds(run_flags({"eval/accuracy": decline})) == {"eval accuracy drop": 10}
    late = series([0.3, 0.5, 0.7, 0.72, 0.5, 0.45, 0.48], every=10)
    assert kinds(accuracy_drop(late)) == {"eval accuracy drop": 40}
    # The real tiny lr=1e-3 run with cosine decay: collapses, then recovers as lr decays.
    dip = series([0.400, 0.221, 0.064, 0.156, 0.232, 0.318, 0.371], every=10)
    (flag,) = accuracy_drop(dip)
    assert (flag.kind, flag.step) == ("eval accuracy drop", 10)
    assert "0.064 at step 20" in flag.detail and "recovered by step 50" in flag.detail
    assert kinds(accuracy_drop(series([0.3, 0.7, 0.4, 0.4, 0.4, 0.7], every=10))) == {"eval accuracy drop": 20}
    # Greedy evals swing by up to 10 points: a dip of that size is not a drop...
    assert accuracy_drop(series([0.3, 0.6, 0.75, 0.66, 0.67, 0.68], every=10)) == []
    # ...nor two bad evals, nor healthy learning curves (the real 3e-4 runs).
    assert accuracy_drop(series([0.3, 0.7, 0.4, 0.4], every=10)) == []
    assert accuracy_drop(series([0.438, 0.396, 0.363, 0.473, 0.49, 0.609, 0.615, 0.699], every=10)) == []
    assert accuracy_drop(series([0.4, 0.439, 0.461, 0.445, 0.492, 0.598, 0.645], every=10)) == []
    # All zeros is said once, as "stuck at 0".
    assert kinds(run_flags({"eval/accuracy": series([0.4, 0, 0, 0], every=10)})) == {"eval accuracy at 0": 10}


def test_grading_errors_fire_at_the_first_and_count_them_all():
    assert grading_errors(series([0, 0, 0, 0])) == []
    flags = grading_errors(series([0, 0, 3, 0, 1]), series([0, 2], every=3))
    assert kinds(flags) == {"grading errors": 2} and flags[0].detail == "6 answers scored 0 because grading failed"
    healthy = healthy_run(0) | {"train/grading_errors": series([0] * 59 + [1])}
    assert kinds(run_flags(healthy)) == {"grading errors": 59}  # one is enough: it is never noise


def test_every_flag_is_defined_with_when_it_can_fire():
    import re
    from pathlib import Path

    from grpoctl.analysis import health

    source = Path(health.__file__).read_text()
    kinds = set(re.findall(r'Flag\(\s*"([^"]+)"', source))
    assert kinds == set(health.FLAGS), kinds ^ set(health.FLAGS)
    assert all(meaning.endswith(".") and when for meaning, when in health.FLAGS.values())


def lab_like_run(collapse_at: int | None, steps: int = 40, seed: int = 0) -> dict:
    """The lab's pattern, idealised: about a third of the responses write working (16 tokens
    more than the bare answer on average), the rest answer directly (4 tokens,
    ` </think> <answer>8</answer>`), so the mean is near 9.6 tokens. A collapse in length is
    the policy giving up working: the mean falls to about 4.5 tokens, above 0.4x the early
    level, while the share of responses that write working falls to nearly none."""
    rng = random.Random(seed)
    share = [0.35 + rng.gauss(0, 0.03) for _ in range(steps)]
    if collapse_at is not None:
        share[collapse_at:] = [0.03 + abs(rng.gauss(0, 0.01)) for _ in range(steps - collapse_at)]
    return {
        "train/working_share": series(share, start=1),
        "train/response_length": series([4 + 16 * w for w in share], start=1),
    }


def test_length_collapse_fires_on_a_collapse_to_bare_answers_that_the_length_ratio_misses():
    run = lab_like_run(collapse_at=14)
    assert length_flags(run["train/response_length"]) == []  # 0.4x the early length is under 4 tokens
    flags = run_flags(run)
    assert kinds(flags) == {"length collapse": 15}  # where the bare answers began (steps count from 1)
    assert "of responses write working vs 3" in flags[0].detail


def test_working_share_noise_and_a_run_that_never_wrote_working_fire_nothing():
    for seed in range(20):
        assert run_flags(lab_like_run(collapse_at=None, seed=seed)) == [], seed
    two_low = lab_like_run(collapse_at=None)
    two_low["train/working_share"][20:22] = [(21, 0.0), (22, 0.0)]
    assert run_flags(two_low) == []
    # the addition task's answers carry no working from the start: nothing to collapse from
    bare = series([0.02, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0], start=1)
    assert length_flags(series([29.0] * 7, start=1), working=bare) == []


def test_length_collapse_reports_whichever_route_fired_first():
    working = series([0.5] * 5 + [0.05] * 10, start=1)
    length = series([20.0] * 10 + [2.0] * 5, start=1)
    (flag,) = length_flags(length, working=working)
    assert (flag.kind, flag.step) == ("length collapse", 6) and "write working" in flag.detail
