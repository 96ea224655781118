"""The GPU presets use the card, and the grading workers are set by a config key.

The presets are read as configs here (no GPU): eval covers its subset in one vLLM call,
vLLM drops its weights while asleep (level 2: grpoctl pushes every parameter after each
wake-up), and answers are graded in worker processes. Batched grading
(rewards.score_many) must give the verdicts the reward function gives one by one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import fast_overrides

from grpoctl import rewards
from grpoctl.config import load_config
from grpoctl.rewards import get_reward_fn, score_many

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", ["rtx4090.yaml", "h100.yaml"])
def test_the_gpu_presets_use_the_card(preset):
    cfg = load_config(ROOT / "experiments" / preset)
    assert cfg.rollout.backend == "vllm" and cfg.rollout.vllm.sleep_mode
    assert cfg.eval.batch_size >= cfg.eval.subset  # one vLLM call per eval
    assert cfg.rollout.vllm.sleep_level == 2
    assert cfg.reward.grading_workers >= 4
    assert cfg.model.logprob_chunk_tokens > 0  # the full fp32 logits never exist


def r1(answer: str) -> str:
    return f" working </think> <answer>{answer}</answer>"


# Right, wrong, unformatted, empty and boxed answers under both formats.
R1_ZERO = [(r1("42"), "42"), (r1("41"), "42"), (" 42", "42"), (r1(""), "7"), (r1(r"\boxed{\frac12}"), "0.5")]
R1_ZERO += [(r1("x = 1,450,000"), "1450000"), (" </think> <answer>3", "3"), (r1(r"\sqrt{20}"), r"2\sqrt{5}")]
QUESTION_ONLY = [(r"so \boxed{12}", "12"), (r"so \boxed{}", "12"), ("no box 12", "12"), (r"\boxed{13}", "12")]


@pytest.mark.parametrize(("reward", "pairs"), [("r1_zero", R1_ZERO), ("question_only", QUESTION_ONLY)])
def test_batched_grading_gives_the_one_by_one_verdicts(reward, pairs):
    reward_fn = get_reward_fn(reward)
    responses, truths = [p[0] for p in pairs], [p[1] for p in pairs]
    one_by_one = [reward_fn(r, t) for r, t in pairs]
    assert score_many(reward_fn, responses, truths) == one_by_one
    assert 0 < sum(s["reward"] for s in one_by_one) < len(pairs)  # right and wrong ones both


def test_a_reward_function_of_its_own_is_called_on_each():
    def digits(response, truth):
        share = sum(c.isdigit() for c in response) / len(response)
        return {"format_reward": 1.0, "answer_reward": share, "reward": share}

    assert score_many(digits, ["a1", "22"], ["x", "y"]) == [digits("a1", "x"), digits("22", "y")]


def test_the_trainer_sets_the_grading_workers_from_the_config(tiny_model_dir, tmp_path, monkeypatch):
    import grpoctl.train.trainer as trainer

    asked = []
    monkeypatch.setattr(trainer, "configure_grading", lambda workers: asked.append(workers))
    cfg = load_config("addition", fast_overrides(tiny_model_dir, tmp_path, **{"reward.grading_workers": 3}))
    run = trainer.prepare(cfg, registry=None, say=lambda *_: None)
    run.backend.close()
    assert asked == [3]


@pytest.mark.slow  # two worker processes start (each imports sympy and math-verify)
def test_with_grading_workers_a_batch_is_graded_off_the_main_thread_with_the_same_verdicts():
    reward_fn = get_reward_fn("r1_zero")
    responses, truths = [p[0] for p in R1_ZERO], [p[1] for p in R1_ZERO]
    in_process = score_many(reward_fn, responses, truths)
    rewards.configure_grading(workers=2)
    try:
        grader = rewards.default_grader()
        assert score_many(reward_fn, responses, truths) == in_process
        assert grader.workers == 2 and all(w.process.is_alive() for w in grader._pool)
    finally:
        rewards.configure_grading(workers=0)
