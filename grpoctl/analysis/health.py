"""Early warnings of a GRPO run going wrong, read off its metric curves.

The seed's lesson: eval accuracy is the north star, but gradient norm, mean response
length and token entropy are the early warnings of collapse. A collapsed policy shows a
recognisable pattern (lr=1e-4 on Qwen, lr=1e-3 on the tiny model): token entropy falls
to near zero, responses shrink to a few tokens or run into the token limit, the reward
goes flat (usually at 0), and the gradient norm spikes.

Every check here is a pure function of a series, a list of (step, value) pairs in step
order, and returns `Flag`s that say which step the trouble began at. A flag needs the
condition to hold for `PERSIST` consecutive points, so one noisy step never fires one;
the exceptions are a non-finite gradient norm (never noise: the update is garbage),
grading errors (never noise either: a broken grader scores right answers 0, which looks
like a flat reward) and the run's own "diverged" status.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from grpoctl import metrics

Series = list[tuple[int, float]]

PERSIST = 3  # consecutive points a condition must hold for

# Length collapse, by either route: the mean length below LENGTH_COLLAPSE x its early level,
# or the share of responses that write any working before their answer (train/working_share)
# below WORKING_COLLAPSE x its early share. The second is defined by what a response can be,
# not by a ratio of lengths: on the lab 0.4 x the early length (3.9 tokens) is shorter than a
# formatted answer alone (4), so the length route cannot fire there, while a policy that
# stops writing working is the collapse itself. It needs WORKING_EARLY_MIN of the responses
# to write working early on: from fewer, a fall is noise.
LENGTH_COLLAPSE = 0.4
WORKING_COLLAPSE = 0.25
WORKING_EARLY_MIN = 0.1

# The metrics the checks read; `compare` fetches these series whole and nothing else.
HEALTH_METRICS = (
    metrics.TOKEN_ENTROPY,
    metrics.RESPONSE_LENGTH,
    metrics.RESPONSE_CLIP_FRACTION,
    metrics.WORKING_SHARE,
    metrics.GRAD_NORM,
    metrics.REWARD,
    metrics.EVAL_ACCURACY,
    metrics.GRADING_ERRORS,
    metrics.EVAL_GRADING_ERRORS,
    metrics.DYNAMIC_SAMPLING_SHORT,
    metrics.TIS_DELTA_MEAN,
    metrics.TIS_CAPPED_FRACTION,
)


# Every flag: what it means, and when it can fire at all (a flag that cannot fire says
# nothing by its absence). Kept beside the checks below, which they describe.
FLAGS = {
    "entropy collapse": (
        "token entropy below 10% of its early level (the median of the first 3 steps, or the first step "
        "if higher), or below 0.01 nats, for 3 steps running.",
        "from the 4th logged step; never when the early entropy is already at or below 0.01 nats.",
    ),
    "length collapse": (
        f"mean response length below {LENGTH_COLLAPSE:g}x its early level, or the share of responses that write "
        f"any working before their answer below {WORKING_COLLAPSE:g}x its early share, for 3 steps running.",
        "from the 4th logged step. The length route only if responses can get that short (a formatted answer "
        f"alone, or min_tokens, may be longer than {LENGTH_COLLAPSE:g}x the early length); the working route in "
        f"runs that record train/working_share, when at least {WORKING_EARLY_MIN:.0%} of the early responses "
        "wrote working.",
    ),
    "length blow-up": (
        "mean response length above 3x its early level, or more than half the responses cut off at the "
        "token limit, for 3 steps running.",
        "the 3x route only when 3x the early length fits under max_tokens; the cut-off route always.",
    ),
    "grad-norm explosion": (
        "a non-finite gradient norm, or one above 10x the median of the earlier steps for 3 steps running.",
        "a non-finite norm at any step; the 10x route from the 6th logged step (it needs 5 earlier ones).",
    ),
    "flat reward": (
        "the train reward moves less than 0.01 over the last half of the run.",
        "in runs with at least 11 logged steps (6 in the last half).",
    ),
    "grading errors": ("an answer scored 0 because grading failed (a grader error or timeout).", "at any step."),
    "eval accuracy at 0": ("the last 3 or more evals all scored 0.", "from the 3rd eval."),
    "eval accuracy drop": (
        "3 evals running more than 0.1 (absolute) and 20% (relative) below the best eval before them, "
        "whether or not the run recovers later.",
        "from the 4th eval (with evals every 10 steps and one at step 0: step 30).",
    ),
    "diverged": ("the trainer stopped the run on a non-finite loss or gradient.", "at any step."),
    "sampler mismatch": (
        "the sampler's log-probs differ from the trainer's: mean |delta log p| above 0.1 nats, or more than "
        "1% of tokens' TIS weights capped at loss.tis_cap.",
        "at any step of a run with loss.tis_cap (only TIS runs record the mismatch).",
    ),
    "dynamic sampling short": (
        "dynamic sampling hit rollout.dynamic_sampling_max_rounds with too few groups of mixed rewards; "
        "the step trained on a batch filled up at zero weight.",
        "at any step of a run with rollout.dynamic_sampling.",
    ),
}


@dataclass(frozen=True)
class Flag:
    kind: str  # "entropy collapse", "length collapse", "length blow-up", ...
    step: int  # the GRPO step where the condition began
    detail: str  # the numbers behind it

    def __str__(self) -> str:
        when = "at" if self.kind == "diverged" else "from"  # a status has no duration
        return f"{self.kind} {when} step {self.step} ({self.detail})"

    @property
    def short(self) -> str:
        return f"{self.kind}@{self.step}"


def _finite(series: Series) -> Series:
    return [(s, v) for s, v in series if v is not None and math.isfinite(v)]


def _first_stretch(series: Series, holds: Callable[[int, float], bool], persist: int = PERSIST) -> int | None:
    """The index where the first run of `persist` consecutive points that hold begins."""
    count = 0
    for i, (_, value) in enumerate(series):
        count = count + 1 if holds(i, value) else 0
        if count >= persist:
            return i - persist + 1
    return None


def _early(values: list[float], higher: bool) -> float:
    """The run's early level: the median of its first three points, or the first point
    alone when it is higher (for collapse checks) or lower (for blow-up checks). A run
    can collapse in its very first updates, before a median of early points sees it:
    the first point is the model as it was before any update."""
    level = median(values[:3])
    return max(level, values[0]) if higher else min(level, values[0])


# --------------------------------------------------------------------------- the checks


def entropy_collapse(entropy: Series, fraction: float = 0.1, floor: float = 0.01) -> list[Flag]:
    """Token entropy below `fraction` of its early level, or below `floor` nats."""
    points = _finite(entropy)
    if len(points) < PERSIST + 1:
        return []
    early = _early([v for _, v in points], higher=True)
    if early <= floor:
        return []  # it started there: nothing collapsed
    limit = max(fraction * early, floor)
    i = _first_stretch(points, lambda i, v: i > 0 and v < limit)
    if i is None:
        return []
    step, value = points[i]
    return [Flag("entropy collapse", step, f"{value:.3g} vs {early:.3g} early")]


def length_flags(
    length: Series,
    clip_fraction: Series = (),
    working: Series = (),
    collapse: float = LENGTH_COLLAPSE,
    blowup: float = 3.0,
    clipped: float = 0.5,
) -> list[Flag]:
    """Mean response length below `collapse` x its early level, or the share of responses
    writing working (`working`) below WORKING_COLLAPSE x its early share; mean length above
    `blowup` x its early level, or more than `clipped` of the responses cut off at the
    token limit. Each flag from whichever of its signs came first."""
    flags, collapses, blowups = [], [], []
    points = _finite(length)
    if len(points) >= PERSIST + 1:
        values = [v for _, v in points]
        high, low = _early(values, higher=True), _early(values, higher=False)
        i = _first_stretch(points, lambda i, v: i > 0 and v < collapse * high)
        if i is not None:
            collapses.append((points[i][0], f"{points[i][1]:.4g} vs {high:.4g} early"))
        i = _first_stretch(points, lambda i, v: i > 0 and v > blowup * low)
        if i is not None:
            blowups.append((points[i][0], f"{points[i][1]:.4g} vs {low:.4g} early"))
    shares = _finite(list(working))
    if len(shares) >= PERSIST + 1:
        early = _early([v for _, v in shares], higher=True)
        if early >= WORKING_EARLY_MIN:
            i = _first_stretch(shares, lambda i, v: i > 0 and v < WORKING_COLLAPSE * early)
            if i is not None:
                collapses.append((shares[i][0], f"{shares[i][1]:.0%} of responses write working vs {early:.0%} early"))
    clips = _finite(list(clip_fraction))
    i = _first_stretch(clips, lambda i, v: v > clipped)
    if i is not None:
        blowups.append((clips[i][0], f"{clips[i][1]:.0%} of responses hit the token limit"))
    if collapses:
        flags.append(Flag("length collapse", *min(collapses)))
    if blowups:
        flags.append(Flag("length blow-up", *min(blowups)))
    return flags


def grad_explosion(grad_norm: Series, factor: float = 10.0, history: int = 5) -> list[Flag]:
    """A non-finite gradient norm, or one above `factor` x the median of earlier steps
    (after `history` steps) for PERSIST steps running."""
    for step, value in grad_norm:
        if value is None or not math.isfinite(value):
            return [Flag("grad-norm explosion", step, f"non-finite gradient norm ({value})")]
    seen: list[float] = []  # kept sorted: the running median costs O(n), not O(n log n)
    above: list[bool] = []
    refs: list[float] = []
    for _, value in grad_norm:
        ref = seen[len(seen) // 2] if len(seen) >= history else math.inf
        above.append(value > factor * ref)
        refs.append(ref)
        bisect.insort(seen, value)
    i = _first_stretch(grad_norm, lambda i, v: above[i])
    if i is None:
        return []
    step, value = grad_norm[i]
    return [Flag("grad-norm explosion", step, f"{value:.3g} vs median {refs[i]:.3g} before")]


def flat_reward(reward: Series, eps: float = 0.01, min_points: int = 6) -> list[Flag]:
    """The train reward moves less than `eps` over the run's last half: no signal left.

    The flag starts where the flat stretch starts (often long before the last half)."""
    points = _finite(reward)
    half = points[len(points) // 2 :]
    if len(half) < min_points:
        return []
    values = [v for _, v in half]
    if max(values) - min(values) >= eps:
        return []
    lo = hi = points[-1][1]
    start = len(points) - 1
    while start > 0:
        value = points[start - 1][1]
        if max(hi, value) - min(lo, value) >= eps:
            break
        lo, hi, start = min(lo, value), max(hi, value), start - 1
    return [Flag("flat reward", points[start][0], f"train reward stuck at {median(values):.2f}")]


def grading_errors(train_errors: Series, eval_errors: Series = ()) -> list[Flag]:
    """The first step whose grading failed (answers scored 0 because the grader raised, a
    grading worker died, or the truth is not math), with the errors counted over the run."""
    bad = [(step, value) for step, value in [*train_errors, *eval_errors] if value and math.isfinite(value)]
    if not bad:
        return []
    step = min(s for s, _ in bad)
    total = int(sum(v for _, v in bad))
    return [Flag("grading errors", step, f"{total} answer{'s' if total != 1 else ''} scored 0 because grading failed")]


MISMATCH_NATS = 0.1  # mean |trainer - sampler| log-prob: bf16 vLLM on a GPU sits near 0.01-0.03
CAPPED_SHARE = 0.01


def sampler_mismatch(delta_mean: Series, capped: Series) -> list[Flag]:
    """The first step whose sampler disagreed with the trainer past the thresholds: the
    rollouts came from another policy than the one trained (stale weights, a broken sync)."""
    bad = sorted(
        [(step, f"mean |delta log p| {v:.3f} nats") for step, v in delta_mean if math.isfinite(v) and v > MISMATCH_NATS]
        + [(step, f"{v:.1%} of TIS weights capped") for step, v in capped if math.isfinite(v) and v > CAPPED_SHARE]
    )
    return [Flag("sampler mismatch", bad[0][0], bad[0][1])] if bad else []


def dynamic_sampling_short(short: Series) -> list[Flag]:
    """The first step whose dynamic sampling ran out of rounds, with how many did. Never
    noise: each such step trained on fewer informative groups than its batch holds."""
    steps = [step for step, value in short if value and math.isfinite(value)]
    if not steps:
        return []
    return [Flag("dynamic sampling short", steps[0], f"{len(steps)} step{'s' if len(steps) != 1 else ''} short")]


def accuracy_stuck_at_zero(accuracy: Series, persist: int = PERSIST) -> list[Flag]:
    """The last `persist` (or more) evaluations all scored 0."""
    points = _finite(accuracy)
    zeros = 0
    while zeros < len(points) and points[-1 - zeros][1] == 0:
        zeros += 1
    if zeros < persist:
        return []
    return [Flag("eval accuracy at 0", points[-zeros][0], f"last {zeros} evals scored 0")]


def accuracy_drop(accuracy: Series, drop: float = 0.1, fraction: float = 0.2, persist: int = PERSIST) -> list[Flag]:
    """`persist` evaluations running that sit more than `drop` (absolute) and `fraction`
    (relative) below the best before them: the policy collapsed, whether or not it came
    back later (the tiny lr=1e-3 run falls from 0.40 to 0.06 and recovers only as its lr
    decays), or it peaked and is unlearning (the seed's no_baseline runs "peak early then
    decline"). Both margins, so eval noise (about ±5-10 points on a few hundred
    problems) does not fire it."""
    points = _finite(accuracy)
    best = [max(v for _, v in points[: i + 1]) for i in range(len(points))]
    below = [i > 0 and v < best[i - 1] - drop and v < best[i - 1] * (1 - fraction) for i, (_, v) in enumerate(points)]
    start = _first_stretch(points, lambda i, v: below[i], persist)
    if start is None:
        return []
    end = start
    while end + 1 < len(points) and below[end + 1]:
        end += 1
    low_step, low = min(points[start : end + 1], key=lambda p: p[1])
    recovered = "" if end == len(points) - 1 else f", recovered by step {points[end + 1][0]}"
    return [
        Flag(
            "eval accuracy drop",
            points[start][0],
            f"{low:.3f} at step {low_step} vs {best[start - 1]:.3f} before{recovered}",
        )
    ]


# --------------------------------------------------------------------------- one run


def run_flags(
    series: dict[str, Series], status: str | None = None, last_step: int | None = None, error: str | None = None
) -> list[Flag]:
    """Every flag for one run, from its metric series and status, in step order."""
    get = series.get
    flags = (
        entropy_collapse(get(metrics.TOKEN_ENTROPY, []))
        + length_flags(
            get(metrics.RESPONSE_LENGTH, []), get(metrics.RESPONSE_CLIP_FRACTION, []), get(metrics.WORKING_SHARE, [])
        )
        + grad_explosion(get(metrics.GRAD_NORM, []))
        + flat_reward(get(metrics.REWARD, []))
        + grading_errors(get(metrics.GRADING_ERRORS, []), get(metrics.EVAL_GRADING_ERRORS, []))
        + dynamic_sampling_short(get(metrics.DYNAMIC_SAMPLING_SHORT, []))
        + sampler_mismatch(get(metrics.TIS_DELTA_MEAN, []), get(metrics.TIS_CAPPED_FRACTION, []))
    )
    stuck = accuracy_stuck_at_zero(get(metrics.EVAL_ACCURACY, []))
    flags += stuck or accuracy_drop(get(metrics.EVAL_ACCURACY, []))  # zeros are a drop too
    if status == "diverged":
        flags.append(Flag("diverged", max(last_step or 0, 0), error or "the trainer stopped it"))
    return sorted(flags, key=lambda f: f.step)


def grad_norm_measure(series: list, at_step: int | None = None) -> float | None:
    """The one gradient-norm measure (compare's column, the report, the findings): the
    mean of a run's per-step train/grad_norm up to `at_step`. One step's value swings
    with its batch; the mean over steps is what "lower gradient norms" means. NaN when
    any step's norm is not finite: such a run has no meaningful mean (JSON: null)."""
    return series_mean(series, None, at_step)


def series_mean(series: list, first: int | None = None, last: int | None = None) -> float | None:
    """The mean of a per-step series over its steps from `first` to `last` (either end
    open when None); None without a step there, NaN when any of them is not finite."""
    values = [v for s, v in series if (first is None or s >= first) and (last is None or s <= last)]
    if not values:
        return None
    if not all(v is not None and math.isfinite(v) for v in values):
        return math.nan
    return math.fsum(values) / len(values)
