"""Truncated importance sampling (issue 22, loss.tis_cap): the weight worked by hand, where it
multiplies the loss, the lean sampler's own log-probs, and a sampler one step behind the
trainer, which TIS caps and `compare`'s health flags report. vLLM's side is
tests/test_vllm_backend.py::test_processed_logprobs_are_the_sampling_distributions."""

from __future__ import annotations

import math

import pytest
import torch
from cli import invoke
from conftest import fast_overrides

import grpoctl.rewards as rewards
from grpoctl import metrics
from grpoctl.analysis.health import run_flags
from grpoctl.grpo.losses import compute_policy_gradient_loss, compute_tis_weights
from grpoctl.rollout.base import SamplingSettings


def test_the_weight_is_the_capped_ratio_worked_by_hand():
    """TRL's token_truncate mode (trl/trainer/grpo_trainer.py, lines 2581-2601 at
    f2cd57710ae345ea6428ae95363267fcf38a3dc8): ratio = exp(old - sampling), clamped to the
    cap from above; verl and OpenRLHF use the same form."""
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    sampled = torch.tensor([[-1.1, -1.0, -0.5, 0.0]])
    mask = torch.tensor([[True, True, True, False]])  # the last is padding
    w, stats = compute_tis_weights(old, sampled, cap=1.05, response_mask=mask)
    torch.testing.assert_close(w, torch.tensor([[1.05, math.exp(-1.0), 1.0, 1.0]]))
    assert not w.requires_grad
    assert float(stats["tis_delta_mean"]) == pytest.approx((0.1 + 1.0 + 0.0) / 3)
    assert float(stats["tis_delta_max"]) == pytest.approx(1.0)
    assert float(stats["tis_capped_fraction"]) == pytest.approx(1 / 3)  # exp(0.1) = 1.105 > 1.05
    assert float(stats["tis_weight_mean"]) == pytest.approx((1.05 + math.exp(-1.0) + 1.0) / 3)


def test_the_weight_multiplies_the_policy_gradient_term_not_the_kl_penalty():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    adv = torch.tensor([[2.0]])
    w = torch.tensor([[0.5, 2.0]])
    loss, meta = compute_policy_gradient_loss(
        lp, "reinforce_with_baseline", advantages=adv, ref_log_probs=ref, kl_beta=0.1, token_weights=w
    )
    kl = torch.exp(ref - lp) - (ref - lp) - 1
    torch.testing.assert_close(loss, -adv * lp * w + 0.1 * kl)


def test_the_lean_samplers_log_probs_are_the_distribution_it_drew_from(tiny_model_dir):
    """At temperature 0.7 and top-p 0.9 the reported log-prob of each drawn token is that of
    softmax(top_p(logits / 0.7)), computed here from a plain forward of the policy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.generation.logits_process import TopPLogitsWarper

    from grpoctl.grpo.tokenization import collate_prompt_and_output_ids
    from grpoctl.rollout.hf import HFRolloutBackend

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = HFRolloutBackend(model, tokenizer, engine="lean")
    sampling = SamplingSettings(temperature=0.7, top_p=0.9, min_tokens=0, max_tokens=8, stop=())
    r = backend.generate(["12+34=", "5+6="], 3, sampling, seed=0)
    batch = collate_prompt_and_output_ids(r.prompt_ids, r.response_ids, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(batch["input_ids"]).logits.float() / 0.7
    worst = 0.0
    for i, drawn in enumerate(r.sampled_log_probs):
        rows = logits[i][batch["response_mask"][i]]
        processed = torch.log_softmax(TopPLogitsWarper(0.9)(None, rows), dim=-1)
        want = processed.gather(1, torch.tensor(r.response_ids[i])[:, None]).squeeze(1)
        worst = max(worst, (want - torch.tensor(drawn)).abs().max().item())
    assert worst < 1e-4, worst


class _StaleSampler:
    """The hf backend sampling from a copy of the policy one sync behind: the rollouts of
    step k come from the weights before step k - 1's update (a broken weight sync)."""

    name = "hf-stale"

    def __init__(self, model, tokenizer):
        import copy

        from grpoctl.rollout.hf import HFRolloutBackend

        self.copy = copy.deepcopy(model)
        self.inner = HFRolloutBackend(self.copy, tokenizer, engine="lean")
        self.pending = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def generate(self, *args, **kwargs):
        return self.inner.generate(*args, **kwargs)

    def sync_weights(self, model) -> float:
        self.copy.load_state_dict(self.pending)
        self.pending = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return 0.0

    def before_training(self) -> None:
        pass

    def memory_pool_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _digits(response: str, ground_truth: str) -> dict[str, float]:
    share = sum(c.isdigit() for c in response) / max(len(response), 1)
    return {"format_reward": 1.0, "answer_reward": share, "reward": share}


@pytest.mark.slow  # two in-process runs of 4 steps: ~20 s
def test_a_stale_sampler_is_capped_and_flagged_and_a_synced_one_agrees(tmp_path, tiny_model_dir, monkeypatch):
    import grpoctl.train.trainer as trainer
    from grpoctl.registry import Registry

    monkeypatch.setitem(rewards.REWARD_FNS, "r1_zero", _digits)  # a reward a random model earns
    # min_tokens 0: with EOS masked for the first tokens the sampler's distribution is not the
    # policy's (log(1 - p_eos), 0.004 nats for a random model), which TIS rightly sees.
    knobs = {"loop.n_grpo_steps": 4, "eval.every": 0, "loss.tis_cap": 2, "optimizer.lr": 3e-2, "rollout.min_tokens": 0}
    base = fast_overrides(tiny_model_dir, tmp_path, **knobs)
    db = tmp_path / "registry.db"
    names = [metrics.TIS_DELTA_MEAN, metrics.TIS_DELTA_MAX, metrics.TIS_CAPPED_FRACTION, metrics.TIS_WEIGHT_MEAN]

    synced = invoke("train", "addition", *base, "name=synced", f"--db={db}", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr[-2000:]
    real = trainer.make_backend
    monkeypatch.setattr(trainer, "make_backend", lambda cfg, model, tokenizer, *a, **k: _StaleSampler(model, tokenizer))
    stale = invoke("train", "addition", *base, "name=stale", f"--db={db}", cwd=tmp_path)
    assert stale.returncode == 0, stale.stderr[-2000:]
    monkeypatch.setattr(trainer, "make_backend", real)

    with Registry(str(db), must_exist=True, readonly=True) as registry:
        runs = {run.name: run for run in registry.list_runs()}
        ok = registry.metric_series(runs["synced"].id, names)
        bad = registry.metric_series(runs["stale"].id, names + [metrics.TOKEN_ENTROPY])
    # In sync, the lean decoder's log-probs are the trainer's up to float rounding: not equal
    # (it is another implementation of the forward), and far below anything TIS would cap.
    assert all(0 < v <= 1e-4 for _, v in ok[metrics.TIS_DELTA_MAX]), ok[metrics.TIS_DELTA_MAX]
    assert all(v == 0 for _, v in ok[metrics.TIS_CAPPED_FRACTION])
    assert run_flags(ok) == []
    # One sync behind: from step 3 the sampler's policy is two updates old.
    late = [v for step, v in bad[metrics.TIS_DELTA_MEAN] if step >= 3]
    assert all(v > 1e-2 for v in late), bad[metrics.TIS_DELTA_MEAN]
    assert max(v for _, v in bad[metrics.TIS_CAPPED_FRACTION]) > 0, bad[metrics.TIS_CAPPED_FRACTION]
    assert "sampler mismatch" in {f.kind for f in run_flags(bad)}
