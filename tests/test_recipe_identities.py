"""The two identities of issue 40, as unit tests in place of lab studies of RLOO and batch std.

RLOO's advantage is G/(G-1) x the group-mean one, and batch std divides the group-mean
advantage by one scalar per step. The clipped loss is scale-equivariant in the advantage
(its clipping depends on the ratio and the advantage's sign only), Adam divides a
constant scale out up to its eps, and gradient-norm clipping sets the step when it acts.
So, without a KL penalty or an entropy bonus (terms the scale does not touch):

- rloo trains as group_mean (one constant scale for the whole run), with gradient
  clipping at every step (the lab's: max_grad_norm 1 against raw norms about 2) or at none;
- batch_std trains as group_mean without std when clipping acts at every step. Its scale
  changes from step to step, which Adam does not divide out: without clipping the two
  part, as the last test shows.

"Equal" is up to float noise and Adam's eps: the largest difference of a weight is under
1/1000 of the largest distance a weight moved.
"""

from __future__ import annotations

import pytest
import torch

from grpoctl.grpo import AdvantageInputs, PolicyGradientLoss
from grpoctl.grpo.advantages import ADVANTAGE_FUNCTIONS

VOCAB, SEQ, GROUP, GROUPS, STEPS, EPOCHS = 11, 6, 4, 3, 4, 3


class TinyPolicy(torch.nn.Module):
    """Next-token logits from the previous token: enough weights for Adam to act per coordinate."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (batch, SEQ + 1) -> (log p of ids[:, 1:] (batch, SEQ), token entropy (batch, SEQ))."""
        logits = self.head(torch.tanh(self.embed(ids[:, :-1])))
        log_softmax = torch.log_softmax(logits, -1)
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        return log_softmax.gather(-1, ids[:, 1:, None]).squeeze(-1), entropy


def _train(estimator: str, use_std: bool, max_grad_norm: float, kl_beta: float = 0.0, entropy_coef: float = 0.0):
    """STEPS GRPO steps of EPOCHS epochs each (off-policy after the first: the ratio and its
    clip act) with AdamW and gradient clipping; the weights at the end."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small only wait on a second thread
    try:
        return _train_steps(estimator, use_std, max_grad_norm, kl_beta, entropy_coef)
    finally:
        torch.set_num_threads(threads)


def _train_steps(estimator: str, use_std: bool, max_grad_norm: float, kl_beta: float, entropy_coef: float):
    torch.manual_seed(0)
    policy, reference = TinyPolicy(), TinyPolicy()
    reference.load_state_dict(policy.state_dict())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=0.05, betas=(0.9, 0.95), weight_decay=0.0)
    loss = PolicyGradientLoss("grpo_clip", "mean", cliprange=0.2, kl_beta=kl_beta, entropy_coef=entropy_coef)
    data = torch.Generator().manual_seed(1)
    mask = torch.ones(GROUP * GROUPS, SEQ, dtype=torch.bool)
    mask[::3, 4:] = False
    for _ in range(STEPS):
        ids = torch.randint(0, VOCAB, (GROUP * GROUPS, SEQ + 1), generator=data)
        rewards = (torch.rand(GROUP * GROUPS, generator=data) * 4).round() / 4  # partial credit: stds differ
        rewards[:GROUP] = rewards[0]  # and one group flat
        advantages = ADVANTAGE_FUNCTIONS[estimator](AdvantageInputs(rewards, GROUP, 1e-6, use_std)).unsqueeze(-1)
        with torch.no_grad():
            old, _ = policy(ids)
            ref, _ = reference(ids)
        for _ in range(EPOCHS):
            log_probs, entropy = policy(ids)
            loss.microbatch_train_step(
                log_probs, mask, 1, advantages=advantages, old_log_probs=old, ref_log_probs=ref, token_entropy=entropy
            )
            torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()])


def _moved(weights: torch.Tensor) -> float:
    torch.manual_seed(0)
    start = torch.cat([p.detach().reshape(-1) for p in TinyPolicy().parameters()])
    return float((weights - start).abs().max())


def _same_run(a: torch.Tensor, b: torch.Tensor) -> bool:
    moved = _moved(a)
    assert moved > 0.1  # the weights did move
    return float((a - b).abs().max()) < 1e-3 * moved


def _other_run(a: torch.Tensor, b: torch.Tensor) -> bool:
    return float((a - b).abs().max()) > 0.05 * _moved(a)


ALWAYS_CLIPPED, NEVER_CLIPPED = 1e-3, 1e6


@pytest.mark.parametrize("max_grad_norm", [ALWAYS_CLIPPED, NEVER_CLIPPED])
@pytest.mark.parametrize("use_std", [False, True])
def test_rloo_trains_as_the_group_mean(max_grad_norm, use_std):
    assert _same_run(_train("rloo", use_std, max_grad_norm), _train("group_mean", use_std, max_grad_norm))


def test_batch_std_trains_as_no_std_when_clipping_sets_every_step():
    no_std = _train("group_mean", False, ALWAYS_CLIPPED)
    assert _same_run(_train("batch_std", True, ALWAYS_CLIPPED), no_std)
    # Group std is not one scalar: it weighs the groups differently, and trains differently.
    assert _other_run(_train("group_mean", True, ALWAYS_CLIPPED), no_std)


def test_without_clipping_batch_std_is_another_run():
    """A scale that changes each step is not Adam's constant: the identity needs the clip."""
    assert _other_run(_train("batch_std", True, NEVER_CLIPPED), _train("group_mean", False, NEVER_CLIPPED))


@pytest.mark.parametrize("knob", [{"kl_beta": 0.5}, {"entropy_coef": 0.5}])
def test_a_kl_penalty_or_entropy_bonus_breaks_the_identity(knob):
    """The terms the advantage's scale does not multiply: with either, RLOO is another run."""
    assert _other_run(_train("rloo", False, NEVER_CLIPPED, **knob), _train("group_mean", False, NEVER_CLIPPED, **knob))
