"""CISPO, RLOO and batch-level std against TRL 1.16.0, by running TRL's own code (issue 40).

The expected numbers below were printed by TRL's trainers in TRL's venv
(benchmarks/make_trl_env.sh) with benchmarks/trl_reference.py, which holds the inputs
(REWARDS, CISPO_*) and says how each trainer was driven; each test names its command.
The tests compare grpoctl's built-ins with them in grpoctl's own venv, without TRL.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from grpoctl.grpo import AdvantageInputs, PolicyGradientLoss
from grpoctl.grpo.advantages import ADVANTAGE_FUNCTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import trl_reference as ref  # noqa: E402  - the inputs TRL was given: one copy

TRL_EPS = 1e-4  # TRL divides by (std + 1e-4); grpoctl's advantage_eps is set to match


# TRL 1.16.0's advantages for ref.REWARDS, by estimator: RLOOTrainer(normalize_advantages=False),
# GRPOTrainer(scale_rewards="batch"), and, as a control of the harness, GRPOTrainer(scale_rewards="group").
TRL_ADVANTAGES = {
    ("rloo", False): [
        0.6666666269302368, -0.6666666865348816, -0.6666666865348816, 0.6666666269302368,
        0.0, 0.0, 0.0, 0.0,
        0.1666666567325592, -0.5, 0.8333333134651184, -0.5,
    ],
    ("batch_std", True): [
        1.0357248783111572, -1.0357248783111572, -1.0357248783111572, 1.0357248783111572,
        0.0, 0.0, 0.0, 0.0,
        0.2589312195777893, -0.7767937183380127, 1.2946561574935913, -0.7767937183380127,
    ],
    ("group_mean", True): [
        0.8658754229545593, -0.8658754229545593, -0.8658754229545593, 0.8658754229545593,
        0.0, 0.0, 0.0, 0.0,
        0.2610619366168976, -0.7831858396530151, 1.305309772491455, -0.7831858396530151,
    ],
}  # fmt: skip


@pytest.mark.parametrize(("estimator", "use_std"), list(TRL_ADVANTAGES))
def test_the_estimators_are_trls(estimator, use_std):
    """Each trainer's own _generate_and_score_completions, TRL 1.16.0:

    .venv-trl/bin/python benchmarks/trl_reference.py advantages

    prints "rloo", "grpo_scale_rewards_batch" and "grpo_scale_rewards_group".
    """
    inputs = AdvantageInputs(torch.tensor(ref.REWARDS), ref.GROUP, advantage_eps=TRL_EPS, use_std_normalization=use_std)
    got = ADVANTAGE_FUNCTIONS[estimator](inputs).tolist()
    assert got == pytest.approx(TRL_ADVANTAGES[estimator, use_std], abs=1e-6)


def test_cispo_loss_and_gradient_are_trls():
    """GRPOTrainer._compute_loss with loss_type="cispo", epsilon_high=5.0 (its documented
    recommendation, and grpoctl's loss.cispo_ratio_max default), TRL 1.16.0:

    .venv-trl/bin/python benchmarks/trl_reference.py cispo

    TRL's cispo sums the token losses over the batch's tokens (num_items_in_batch):
    grpoctl's length_normalization="token". Two tokens' ratios are exp(2) > 5 and are
    capped, one with a positive advantage and one with a negative one.
    """
    trl_loss = 0.1399032324552536
    trl_grad = [
        [-0.16655492782592773, -0.13636364042758942, -0.022540759295225143, -0.6818181872367859],
        [0.03721503168344498, 0.03721503168344498, 0.22727273404598236, 0.0411289781332016],
        [-0.08882930129766464, -0.08037607371807098, -0.04411132261157036, -0.0],
    ]
    log_probs = torch.tensor(ref.CISPO_LOGP, requires_grad=True)
    mask = torch.tensor(ref.CISPO_MASK, dtype=torch.bool)
    loss = PolicyGradientLoss("cispo", "token", cispo_ratio_max=ref.CISPO_EPSILON_HIGH)
    _, stats = loss.microbatch_train_step(
        log_probs,
        mask,
        1,
        advantages=torch.tensor(ref.CISPO_ADV).unsqueeze(-1),
        old_log_probs=torch.tensor(ref.CISPO_OLD),
        batch_response_tokens=float(mask.sum()),
    )
    assert stats["loss"] == pytest.approx(trl_loss, abs=1e-7)
    torch.testing.assert_close(log_probs.grad, torch.tensor(trl_grad), atol=1e-7, rtol=1e-6)
    # grpoctl's clip_fraction counts every capped ratio (the cap changes the gradient
    # whatever the advantage's sign); TRL's cispo_clip_ratio, 1/11, only those with A > 0.
    assert stats["clip_fraction"] == pytest.approx(2 / 11)
