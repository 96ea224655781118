"""Group-normalized advantages: hand values, zero-sum groups, flat groups give zeros."""

import math

import pytest
import torch

from grpoctl.grpo import compute_group_normalized_rewards, normalize_group_rewards, summarize_group_rewards


def test_normalize_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    plain = normalize_group_rewards(rewards, group_size=4, advantage_eps=1e-6, normalize_by_std=False)
    assert plain.tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    # group 1: unbiased std = sqrt(4 * 0.25 / 3)
    scaled = normalize_group_rewards(rewards, group_size=4, advantage_eps=1e-6, normalize_by_std=True)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert scaled.tolist() == pytest.approx([a, -a, -a, a, 0, 0, 0, 0], rel=1e-6)


@pytest.mark.parametrize("normalize_by_std", [True, False])
def test_advantages_sum_to_zero_within_each_group(normalize_by_std):
    torch.manual_seed(0)
    rewards = torch.rand(6 * 8)
    adv = normalize_group_rewards(rewards, 8, 1e-6, normalize_by_std)
    assert adv.shape == (48,)
    assert torch.allclose(adv.view(6, 8).sum(dim=1), torch.zeros(6), atol=1e-5)


@pytest.mark.parametrize("normalize_by_std", [True, False])
def test_flat_groups_give_exact_zeros_not_nan(normalize_by_std):
    # 0.7 three times does not average back to 0.7 exactly in float32; eps = 0 would be 0/0.
    rewards = torch.tensor([0.7, 0.7, 0.7, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    adv = normalize_group_rewards(rewards, 3, advantage_eps=0.0, normalize_by_std=normalize_by_std)
    assert torch.isfinite(adv).all()
    assert adv[:6].tolist() == [0.0] * 6
    assert adv[6] > 0 > adv[7]


def test_bad_group_size_is_an_error():
    with pytest.raises(ValueError):
        normalize_group_rewards(torch.zeros(7), 4, 1e-6, True)


def exact_match_reward(response: str, ground_truth: str) -> dict[str, float]:
    answer = float(response == ground_truth)
    return {"reward": answer, "format_reward": 1.0 if response else 0.0, "answer_reward": answer}


def test_compute_group_normalized_rewards_by_hand():
    responses = ["4", "5", "", "4", "9", "9"]
    truths = ["4", "4", "4", "4", "7", "7"]
    adv, raw, meta = compute_group_normalized_rewards(
        exact_match_reward, responses, truths, group_size=3, advantage_eps=1e-6, normalize_by_std=False
    )
    assert raw.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert adv.dtype == raw.dtype == torch.float32
    assert adv.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, 2 / 3, -1 / 3, -1 / 3])
    assert meta["reward_mean"] == pytest.approx(1 / 3)
    assert meta["reward_std"] == pytest.approx(raw.std().item())
    assert (meta["reward_max"], meta["reward_min"]) == (1.0, 0.0)
    assert meta["format_reward_mean"] == pytest.approx(5 / 6)
    assert meta["answer_reward_mean"] == pytest.approx(1 / 3)
    assert meta["zero_std_group_fraction"] == 0.0
    assert all(type(v) is float for v in meta.values())


def test_zero_std_group_fraction():
    meta = summarize_group_rewards(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]), group_size=2)
    assert meta["zero_std_group_fraction"] == 0.75
    assert "format_reward_mean" not in meta


def test_mismatched_lists_are_an_error():
    with pytest.raises(ValueError):
        compute_group_normalized_rewards(exact_match_reward, ["a"], ["a", "b"], 1, 1e-6, True)
