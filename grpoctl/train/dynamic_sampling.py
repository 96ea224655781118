"""Dynamic sampling (DAPO; verl's `filter_groups`): train only on groups that carry signal.

A group whose rewards (after any overlong penalty) are all equal has zero advantage for
every rollout, so it teaches nothing and only dilutes the batch. With
`rollout.dynamic_sampling`, a step samples in rounds:

    round r: the next rollout_batch_size / group_size prompts from the stream, their
             rollouts (seed from (seed, step, r)), their rewards
             keep the groups whose rewards differ, in stream order
    until rollout_batch_size / group_size groups are kept, or
          rollout.dynamic_sampling_max_rounds rounds are done

Kept groups beyond the batch are discarded in stream order (the stream has moved past
them: a resumed run draws exactly what an uninterrupted one drew, since the data
position is recorded after the step). Round 0 samples with the plain step's seed, so its
rollouts are the ones a run without dynamic sampling would have had.

**A short batch.** At the cap, the step trains on the groups it has. To keep the step's
shape (the same train batches and optimizer steps, so the learning-rate schedule does not
drift), the batch is filled up with dropped groups in stream order, at zero loss weight.
Their advantages are zero anyway, so this is how plain GRPO weighs them:
  - `token`: each train batch divides by the tokens the loss sees, so the kept groups get
    the weight of a full batch;
  - `constant` (and `mean`, `microbatch`): each sequence's loss is averaged over the
    train batch's sequences, fillers included, so a short batch's update is scaled by its
    share of kept groups, as if the dropped groups were trained on with zero advantage.
The step records train/dynamic_sampling_short = 1, and `compare` flags the run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpoctl import metrics
from grpoctl.grpo.advantages import flat_groups
from grpoctl.train.graded import Graded


def sample_informative_groups(
    draw_round: Callable[[int], tuple[list[str], Graded]], group_size: int, groups_needed: int, max_rounds: int
) -> tuple[list[str], Graded, dict]:
    """Rounds of `draw_round(r)` (prompts, and their graded rollouts) until `groups_needed`
    groups with signal are kept, or `max_rounds` rounds are done.

    Returns the batch's prompts (one per group), its rollouts with their grades (groups
    contiguous, fillers last and marked), and the step's dynamic-sampling figures.
    """
    n = group_size
    kept: list[tuple[str, Graded]] = []  # (prompt, its group's rows), in stream order
    dropped: list[tuple[str, Graded]] = []
    drawn = rounds = timeouts = errors = 0
    while len(kept) < groups_needed and rounds < max_rounds:
        prompts, graded = draw_round(rounds)
        rounds, drawn = rounds + 1, drawn + len(prompts)
        timeouts, errors = timeouts + graded.timeouts, errors + graded.errors
        for g, flat in enumerate(flat_groups(graded.rewards, n).tolist()):
            (dropped if flat else kept).append((prompts[g], graded.rows(range(g * n, (g + 1) * n))))
    short = len(kept) < groups_needed
    fillers = dropped[: groups_needed - len(kept)] if short else []
    groups = kept[:groups_needed] + fillers
    batch = Graded.concat([g for _, g in groups])
    batch.filler = torch.zeros(len(groups) * n, dtype=torch.bool)
    if fillers:
        batch.filler[-len(fillers) * n :] = True
    batch.timeouts, batch.errors = timeouts, errors
    figures = {
        metrics.DYNAMIC_SAMPLING_PROMPTS: drawn,
        metrics.DYNAMIC_SAMPLING_DROPPED: len(dropped),
        metrics.DYNAMIC_SAMPLING_ROUNDS: rounds,
        metrics.DYNAMIC_SAMPLING_SHORT: float(short),
    }
    return [p for p, _ in groups], batch, figures
