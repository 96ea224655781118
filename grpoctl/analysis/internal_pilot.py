"""Seeds sized by the sweep's own first seeds: one internal pilot with a blinded re-estimate
of the variance (`grpoctl sweep SPEC --seeds auto`).

The design is Wittes and Brittain's internal pilot (Stat Med 1990; 9:65-72), with the
variance re-estimated blinded as Kieser and Friede studied it (Stat Med 2003;
22:3571-3581):

1. every arm runs n0 seeds (the pilot);
2. for each finding that declares an effect, the variance its test needs is estimated
   without the arms' labels;
3. the final number of seeds per arm is the one that gives the finding's declared effect
   the planned power at the planned alpha, never fewer than n0, never more than the
   maximum (the largest over the sized findings);
4. the remaining seeds run, and each finding is tested once, at the fixed alpha, with
   every seed: the pilot's seeds are study seeds (that is what makes the pilot
   "internal"), and nothing is tested at the pilot.

The test is the paired t over seeds (analysis/paired.py): arms with the same seed draw
the same prompts, so it plans from the spread of the per-seed differences d_s = variant
minus baseline. Without labels a seed's two runs are an unordered pair: |d_s| is known,
its sign (which run is the variant) is not. The blinded estimate is therefore the one
sample second moment of the unsigned differences, mean(d_s^2), the one-sample variance
estimator of Kieser and Friede applied to the quantity the paired test uses. Its
expectation is sd_d^2 + effect^2: the arms' true difference inflates it.

Kieser and Friede's adjusted estimator subtracts the declared effect's share,
mean(d_s^2) - effect^2 (0 at least): unbiased when the true difference is the declared
one. grpoctl uses the unadjusted estimate (`ADJUSTED = False`), for what `simulate`
measured at a 3-seed pilot: with the per-seed sd equal to the declared effect (10 pairs
needed when the sd is known) the adjusted estimate is so noisy that the design reached
power 0.60 against the planned 0.80; the unadjusted one reached 0.83, on 17 seeds per
arm on average. The price of the unadjusted estimate is seeds: a true difference as
large as the declared one inflates it: with the per-seed sd half the effect, 10.3 seeds
per arm on average (at most 12) where 5 would do. Neither touches alpha much: which n is
chosen depends on the pilot's |d_s| only, and under no difference the signs of d_s are
independent of them; over 200,000 simulated sweeps the final paired t rejected a true
null 4.9-5.2% of the time at alpha 0.05: a small excess, at a pilot this small.

Planning is by the same noncentral t as every other "seeds needed" in grpoctl
(paired.paired_power). `simulate` runs the whole design on synthetic per-seed outcomes,
many sweeps at once: the test of the design and the docs' worked figures share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpoctl.analysis import paired, stats

if TYPE_CHECKING:
    import numpy as np

PILOT_SEEDS = 3  # n0: the fewest that give a per-seed spread with 2 df to re-estimate
MAX_SEEDS = 12  # per arm, unless the sweep says otherwise
ADJUSTED = False  # the Kieser-Friede adjustment (subtract the declared effect's share): off, see above
ESTIMATOR = "mean square of the unsigned per-seed differences, " + ("adjusted" if ADJUSTED else "unadjusted")


def blinded_variance(pilot_differences: Any, effect: float = 0.0, adjusted: bool = ADJUSTED) -> Any:
    """The blinded estimate of the variance of the per-seed differences.

    pilot_differences: [..., seeds] variant minus baseline per pilot seed; only their
    magnitudes are read (a blinded reviewer has no sign). Returns [...]: mean(d^2), less
    effect^2 when `adjusted` (0 at least).
    """
    import numpy as np

    d = np.asarray(pilot_differences, dtype=float)
    second_moment = (d**2).mean(axis=-1)
    if adjusted:
        return np.maximum(second_moment - effect**2, 0.0)
    return second_moment


def variance_limits(
    effect: float, max_pairs: int, alpha: float = stats.ALPHA, power: float = stats.POWER
) -> np.ndarray:
    """limits[n] (n = 0..max_pairs): the largest variance of the per-seed differences at
    which n pairs give the paired t `power` to detect `effect` at `alpha` (0 below 2 pairs).

    Power falls as the variance grows, so n pairs suffice exactly when the variance is at
    most limits[n]: the plan for any number of estimates is one lookup (`pairs_for`).
    """
    import numpy as np
    from scipy.optimize import brentq

    limits = np.zeros(max_pairs + 1)
    for n in range(2, max_pairs + 1):

        def short(sd: float, n: int = n) -> float:
            return float(paired.paired_power(effect, sd, n, alpha)) - power

        high = abs(effect)
        while short(high) > 0:  # power falls with the spread: bracket the root
            high *= 2
        low = high / 2
        while short(low) < 0 and low > 1e-12 * abs(effect):
            low /= 2
        limits[n] = brentq(short, low, high, xtol=1e-12 * abs(effect)) ** 2 if short(low) >= 0 else 0.0
    return limits


def pairs_for(variance: Any, limits: np.ndarray, pilot: int) -> Any:
    """Seeds per arm for each variance estimate: the fewest n in pilot..len(limits)-1 with
    variance <= limits[n] (the maximum when none has). Same shape as `variance`."""
    import numpy as np

    n = np.arange(pilot, len(limits))
    enough = np.asarray(variance, dtype=float)[..., None] <= limits[pilot:]
    return np.where(enough.any(axis=-1), n[np.argmax(enough, axis=-1)], len(limits) - 1)


@dataclass(frozen=True)
class Plan:
    """One finding's re-estimate and the seeds per arm it asks for."""

    finding: str
    effect: float  # the declared effect it is sized for, signed as declared
    pilot_pairs: int
    variance: float  # the blinded estimate of the per-seed differences' variance
    unadjusted: float  # mean(d^2), before the adjustment
    alpha: float
    power: float
    pairs: int  # seeds per arm it needs, within pilot..maximum
    capped: bool  # it needs more than the maximum

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)

    def as_record(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def plan_finding(
    finding: str,
    pilot_differences: list[float],
    effect: float,
    pilot: int,
    maximum: int,
    alpha: float = stats.ALPHA,
    power: float = stats.POWER,
    adjusted: bool = ADJUSTED,
) -> Plan:
    """The plan for one finding from its pilot's per-seed differences (variant - baseline)."""
    variance = float(blinded_variance(pilot_differences, effect, adjusted))
    limits = variance_limits(effect, maximum, alpha, power)
    pairs = int(pairs_for(variance, limits, pilot))
    return Plan(
        finding,
        effect,
        len(pilot_differences),
        variance,
        float(blinded_variance(pilot_differences, adjusted=False)),
        alpha,
        power,
        pairs,
        bool(variance > limits[maximum]),
    )


def final_seeds(plans: list[Plan], pilot: int, maximum: int) -> tuple[int, str]:
    """The seeds per arm the sweep runs in all, and why, in words."""
    if not plans:
        return pilot, "no finding was sized: the pilot's seeds are the study"
    top = max(plans, key=lambda p: p.pairs)
    if top.capped:
        return maximum, (
            f"capped at the maximum, {maximum}: {top.finding} needs more than {maximum} seeds per arm "
            f"for {_signed(top.effect)} at alpha {top.alpha:g}, power {top.power:g}"
        )
    if top.pairs <= pilot:
        return pilot, (
            f"the pilot's {pilot} seeds suffice: every finding reaches power {top.power:g} for its declared "
            f"effect at {pilot} seeds per arm"
        )
    return top.pairs, (
        f"{top.finding} needs {top.pairs} seeds per arm for {_signed(top.effect)} at alpha {top.alpha:g}, "
        f"power {top.power:g} (blinded sd of the per-seed differences {top.sd:.4g})"
    )


def _signed(effect: float) -> str:
    return f"an effect of {effect:+.4g}"


def describe(design: dict) -> list[str]:
    """A `--seeds auto` sweep's recorded design (sweep.design) in lines, as the sweep prints
    them and its report shows them: the pilot, each finding's re-estimate, the final n and
    why."""
    if not design:
        return []
    pilot, first = design["pilot"], design["first_seed"]
    lines = [
        f"pilot: {pilot} seeds per arm (seeds {first}-{first + pilot - 1}), at most {design['maximum']}; "
        f"stage reached: {design.get('stage', 'pilot')}"
    ]
    for e in design.get("estimates", []):
        lines.append(
            f"re-estimate, {e['finding']}: blinded sd of the per-seed differences {e['variance'] ** 0.5:.4g} "
            f"over {e['pilot_pairs']} pilot seeds ({design.get('estimator', ESTIMATOR)}); "
            f"for its declared effect {e['effect']:+.4g} at alpha {e['alpha']:.3g}, power {e['power']:g}: "
            f"{e['pairs']}{'+' if e['capped'] else ''} seeds per arm"
        )
    if "final" in design:
        lines.append(f"final: {design['final']} seeds per arm ({design['reason']})")
    return lines


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Simulated:
    """What `simulate` found over its sweeps."""

    sweeps: int
    rejected: float  # share of sweeps whose final paired t rejected no difference at alpha
    in_direction: float  # share that rejected with the effect's sign (the claim reproduced)
    mean_seeds: float  # seeds per arm run, on average
    at_maximum: float  # share of sweeps that hit the maximum


def simulate(
    true_effect: float,
    declared_effect: float,
    sd: float,
    pilot: int = PILOT_SEEDS,
    maximum: int = MAX_SEEDS,
    alpha: float = stats.ALPHA,
    power: float = stats.POWER,
    sweeps: int = 10_000,
    seed_share: float = 0.5,
    adjusted: bool = ADJUSTED,
    rng: int = 0,
) -> Simulated:
    """Run the internal-pilot design on `sweeps` synthetic studies at once.

    Each study has two arms with matched seeds. A seed's outcome is a component both arms
    share (share `seed_share` of the variance, as seeds that draw the same prompts do)
    plus each run's own noise, scaled so that per-seed differences spread by `sd`; the
    variant adds `true_effect`. The pilot's blinded estimate sizes each study (for
    `declared_effect`), the remaining seeds are drawn, and the paired t over all of them
    is read once at `alpha`.
    """
    import numpy as np

    generator = np.random.default_rng(rng)
    own_sd = sd / math.sqrt(2)  # each run's own noise: the difference of two has sd `sd`
    shared_sd = own_sd * math.sqrt(seed_share / (1 - seed_share)) if seed_share < 1 else 0.0
    shared = generator.normal(0.0, shared_sd, (sweeps, maximum))
    baseline = shared + generator.normal(0.0, own_sd, (sweeps, maximum))
    variant = shared + true_effect + generator.normal(0.0, own_sd, (sweeps, maximum))
    differences = variant - baseline  # [sweeps, seeds]

    estimate = blinded_variance(differences[:, :pilot], declared_effect, adjusted)
    pairs = pairs_for(estimate, variance_limits(declared_effect, maximum, alpha, power), pilot)

    kept = np.arange(maximum)[None, :] < pairs[:, None]
    mean = np.where(kept, differences, 0.0).sum(axis=1) / pairs
    variance = np.where(kept, (differences - mean[:, None]) ** 2, 0.0).sum(axis=1) / (pairs - 1)
    t = mean / np.sqrt(variance / pairs)
    from scipy.stats import t as student_t

    rejected = 2 * student_t.sf(np.abs(t), pairs - 1) < alpha
    right_sign = np.sign(mean) == (np.sign(true_effect) if true_effect else np.sign(declared_effect))
    return Simulated(
        sweeps,
        float(rejected.mean()),
        float((rejected & right_sign).mean()),
        float(pairs.mean()),
        float((pairs == maximum).mean()),
    )
