"""Dynamic sampling (issue 22, grpoctl/train/dynamic_sampling.py): groups whose rewards are
all equal are dropped, further rounds are drawn until the batch is full, a batch still short
at the cap is filled at zero weight and flagged, and a resumed run equals an uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from cli import invoke
from conftest import fast_overrides
from run_rows import assert_same_rows, rows

import grpoctl.rewards as rewards
from grpoctl import metrics
from grpoctl.analysis.health import run_flags
from grpoctl.rollout.base import Rollouts
from grpoctl.train.dynamic_sampling import sample_informative_groups
from grpoctl.train.graded import Graded

N = 2  # group size


def _round(name: str, group_rewards: list[list[float]]) -> tuple[list[str], Graded]:
    """A round of prompts `name0, name1, ...` whose groups got these rewards."""
    prompts = [f"{name}{g}" for g in range(len(group_rewards))]
    flat = [r for group in group_rewards for r in group]
    texts = [f"{p}/{i}" for p in prompts for i in range(N)]
    rollouts = Rollouts([[0]] * len(flat), [[1]] * len(flat), texts, [False] * len(flat))
    scores = [{"reward": r, "format_reward": 1.0, "answer_reward": r} for r in flat]
    return prompts, Graded(rollouts, [p for p in prompts for _ in range(N)], scores, torch.tensor(flat), timeouts=1)


def test_flat_groups_are_dropped_and_further_rounds_fill_the_batch_in_stream_order():
    rounds = iter(
        [
            _round("a", [[1, 1], [0, 1], [0, 0], [1, 0]]),  # a1, a3 kept
            _round("b", [[0, 1], [1, 1], [1, 0], [0, 1]]),  # b0, b2 kept; b3 beyond the batch
        ]
    )
    prompts, batch, figures = sample_informative_groups(lambda r: next(rounds), N, 4, max_rounds=10)
    assert prompts == ["a1", "a3", "b0", "b2"]
    assert batch.rollouts.response_texts == ["a1/0", "a1/1", "a3/0", "a3/1", "b0/0", "b0/1", "b2/0", "b2/1"]
    assert batch.rewards.tolist() == [0, 1, 1, 0, 0, 1, 1, 0]
    assert not batch.filler.any()
    assert figures == {
        metrics.DYNAMIC_SAMPLING_PROMPTS: 8,
        metrics.DYNAMIC_SAMPLING_DROPPED: 3,
        metrics.DYNAMIC_SAMPLING_ROUNDS: 2,
        metrics.DYNAMIC_SAMPLING_SHORT: 0.0,
    }
    assert batch.timeouts == 2  # both rounds' grading counts are kept


def test_at_the_cap_a_short_batch_is_filled_with_dropped_groups_and_flagged():
    rounds = iter([_round("a", [[1, 1], [0, 1], [0, 0]]), _round("b", [[0, 0], [1, 1], [1, 1]])])
    prompts, batch, figures = sample_informative_groups(lambda r: next(rounds), N, 3, max_rounds=2)
    assert prompts == ["a1", "a0", "a2"]  # the one kept group, then fillers in stream order
    assert batch.filler.tolist() == [False, False, True, True, True, True]
    assert figures[metrics.DYNAMIC_SAMPLING_SHORT] == 1.0 and figures[metrics.DYNAMIC_SAMPLING_ROUNDS] == 2
    flags = run_flags({metrics.DYNAMIC_SAMPLING_SHORT: [(1, 0.0), (2, 1.0), (3, 1.0)]})
    assert [(f.kind, f.step, f.detail) for f in flags] == [("dynamic sampling short", 2, "2 steps short")]


def test_a_flat_round_penalised_unevenly_is_not_flat():
    """The drop rule reads the reward after the overlong penalty: two wrong answers of
    different lengths differ, so their group is kept."""
    prompts, graded = _round("a", [[0, 0]])
    graded.penalty = torch.tensor([0.0, -0.5])
    graded.rewards = graded.rewards + graded.penalty
    rounds = iter([(prompts, graded)])
    _, batch, figures = sample_informative_groups(lambda r: next(rounds), N, 1, max_rounds=1)
    assert figures[metrics.DYNAMIC_SAMPLING_DROPPED] == 0 and batch.penalty.tolist() == [0.0, -0.5]


def _has_a_digit(response: str, ground_truth: str) -> dict[str, float]:
    """A 0/1 reward a random tiny model earns about a third of the time over 12 tokens,
    so groups of 2 are often flat (both 0 or both 1): something to drop."""
    hit = float(any(c.isdigit() for c in response))
    return {"format_reward": 1.0, "answer_reward": hit, "reward": hit}


@pytest.mark.slow  # three in-process runs of a few steps: ~20 s
def test_a_resumed_dynamic_sampling_run_equals_an_uninterrupted_one(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setitem(rewards.REWARD_FNS, "r1_zero", _has_a_digit)
    overrides = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "loop.n_grpo_steps": 5,
            "rollout.rollout_batch_size": 8,
            "rollout.group_size": N,
            "loop.train_batch_size": 8,
            "rollout.dynamic_sampling": "true",
            "rollout.dynamic_sampling_max_rounds": 3,
            "checkpoint.every": 10,  # only the interrupted step and the last
            "checkpoint.keep_last": 2,
        },
    )
    db = f"--db={tmp_path / 'registry.db'}"
    straight = invoke("train", "addition", *overrides, "name=straight", db, cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]
    # SIGINT as step 3 starts: the step finishes, checkpoints, and the run is interrupted.
    stopped = invoke(
        "train", "addition", *overrides, "name=stopped", db, cwd=tmp_path, env={"GRPOCTL_FAULT": "step-start@3:INT"}
    )
    assert stopped.returncode == 1, stopped.stderr[-2000:]
    resumed = invoke("train", "--resume", "stopped", db, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    want, got = rows(tmp_path / "registry.db", "straight"), rows(tmp_path / "registry.db", "stopped")
    assert_same_rows(got, want)
    figures = {n: [] for n in (metrics.DYNAMIC_SAMPLING_DROPPED, metrics.DYNAMIC_SAMPLING_PROMPTS)}
    for _, opt_step, name, value in want["metrics"]:
        if name in figures and opt_step is None:
            figures[name].append(value)
    assert sum(figures[metrics.DYNAMIC_SAMPLING_DROPPED]) > 0, figures  # the rule acted
    assert max(figures[metrics.DYNAMIC_SAMPLING_PROMPTS]) > 4, figures  # and drew further rounds
