"""Findings declared in study specs: the format's checks (one line, exit 2, nothing
written), the measures and testability rules on hand-made runs, and the page's family."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from cli import invoke

from grpoctl.analysis import findings as F
from grpoctl.analysis import run_measures, stats, verdicts
from grpoctl.analysis.testability import RULES
from grpoctl.errors import UserError
from grpoctl.sweep.spec import ablation

ROOT = Path(__file__).resolve().parents[1]
TINY = ["tiny-lr-sweep", "tiny-baseline-ablation", "tiny-length-normalization", "tiny-std-normalization"]
TINY += ["tiny-off-policy", "tiny-sft-init"]

SPEC = """baseline: a
variants:
  a: {lr: 1.0e-4}
  b: {lr: 1.0e-3}
findings:
"""
GOOD = (
    "  - {id: f, claim: c, variant: b, measure: plateau, expect: lower, testable: {rule: length_cv, at_least: 0.15}}\n"
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_every_tiny_study_declares_its_findings():
    ids = []
    for study in TINY:
        name, found = F.read_findings(ROOT / "experiments" / f"{study}.yaml")
        assert name == study and found, study
        ids += [f.id for f in found]
    assert len(ids) == len(set(ids)) == 13
    std = next(f for study in TINY for f in F.read_findings(ROOT / "experiments" / f"{study}.yaml")[1])
    assert all(rule.rule in RULES for rule in std.testable)


@pytest.mark.parametrize(
    "finding, message",
    [
        ("  - {id: f}\n", "finding 1: missing 'claim'"),
        (GOOD.replace("variant: b", "variant: z"), "finding 'f': variant 'z' is not one of the variants: a, b"),
        (GOOD.replace("variant: b", "variant: a"), "variant 'a' is the baseline itself"),
        (GOOD.replace("plateau", "vibes"), "measure 'vibes' is not one of: plateau, collapse, peak_decline"),
        (GOOD.replace("lower", "better"), "expect 'better' is not one of: higher, lower, same"),
        (GOOD.replace("expect: lower", "expect: lower, delta: 0.03"), "'delta' is the equivalence margin"),
        (GOOD.replace("expect: lower", "expect: same, delta: -1"), "delta must be positive"),
        (GOOD.replace("expect: lower", "expect: lower, after_step: 10"), "'after_step' belongs to measure: collapse"),
        (GOOD.replace("length_cv", "hunch"), "testable: rule 'hunch' is not one of"),
        (GOOD.replace("at_least: 0.15", "at_least: 0.15, at_most: 1"), "exactly one threshold"),
        (GOOD.replace("at_least: 0.15", "at_least: lots"), "at_least must be a finite number, got 'lots'"),
        (GOOD.replace("id: f,", "id: f, colour: red,"), "unknown key 'colour'"),
        (GOOD + GOOD, "finding 'f' is declared twice"),
        ("  - 3\n", "finding 1 must be a mapping"),
        (GOOD.replace("measure: plateau", "measure: plateau, curve: train/loss"), "curve 'train/loss' is not a curve"),
        (GOOD.replace("measure: plateau", "measure: plateau, curve: train/reward"), "only auc and steps_to_share"),
        (GOOD.replace("measure: plateau", "measure: steps_to_share"), "needs 'share'"),
        (GOOD.replace("measure: plateau", "measure: steps_to_share, share: 1.5"), "share must lie in (0, 1]"),
        (GOOD.replace("measure: plateau", "measure: steps_to_share, share: 0.5, window: 0"), "window must be"),
        (GOOD.replace("measure: plateau", "measure: plateau, share: 0.5"), "'share' belongs to measure"),
        (GOOD.replace("measure: plateau", "measure: grad_norm, curve: eval/pass@1"), "takes no 'curve'"),
        (GOOD.replace("expect: lower", "expect: same, min_effect: 0.02"), "'min_effect' is the smallest effect"),
        (GOOD.replace("expect: lower", "expect: lower, ceiling: 0.99"), "'ceiling' is for an 'expect: same'"),
    ],
)
def test_bad_findings_are_one_line(tmp_path, finding, message):
    with pytest.raises(UserError) as err:
        ablation(write(tmp_path / "abl.yaml", SPEC + finding))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_findings_need_a_baseline_and_a_list(tmp_path):
    with pytest.raises(UserError, match="'findings' need a 'baseline:'"):
        ablation(write(tmp_path / "a.yaml", SPEC.replace("baseline: a\n", "") + GOOD))
    with pytest.raises(UserError, match="'findings' must be a list"):
        ablation(write(tmp_path / "b.yaml", SPEC + "  {id: f}\n"))
    assert len(ablation(write(tmp_path / "c.yaml", SPEC + GOOD)).variants) == 2  # a good one expands


def test_a_bad_finding_stops_the_sweep_with_exit_2_and_writes_nothing(tmp_path):
    spec = write(tmp_path / "abl.yaml", SPEC + GOOD.replace("plateau", "vibes"))
    db = tmp_path / "r.db"
    out = invoke("sweep", str(spec), "--db", str(db), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "measure 'vibes' is not one of" in out.stderr
    assert not db.exists() and not (tmp_path / "outputs").exists()


# --------------------------------------------------------------------------- measures

EVALS = [(0, 0.40, 512), (10, 0.25, 512), (20, 0.55, 512), (30, 0.60, 512), (40, 0.50, 512)]


def test_the_measures_of_one_run():
    assert run_measures.run_measure("plateau", EVALS, []) == pytest.approx((0.55 + 0.60 + 0.50) / 3)
    assert run_measures.run_measure("collapse", EVALS, []) == pytest.approx(0.25)  # step 0 never counts
    assert run_measures.run_measure("collapse", EVALS, [], after_step=20) == pytest.approx(0.50)
    assert run_measures.run_measure("peak_decline", EVALS, []) == pytest.approx(0.60 - 0.50)
    assert run_measures.run_measure("grad_norm", [], [(1, 0.2), (2, 0.3), (3, 0.4)]) == pytest.approx(0.3)
    # compare's measure: one non-finite step leaves a run without a mean
    assert run_measures.run_measure("grad_norm", [], [(1, 0.2), (2, float("nan")), (3, 0.4)]) is None
    assert run_measures.final_eval(EVALS) == 0.50 and run_measures.final_eval([(0, 0.4, 8)]) is None
    # trapezoids: 10*(.40+.25)/2 + 10*(.25+.55)/2 + 10*(.55+.60)/2 + 10*(.60+.50)/2 = 18.5, over 40 steps
    assert run_measures.auc(EVALS) == pytest.approx(18.5 / 40)


def test_speed_and_sampled_measures():
    # steps_to_share on a per-step curve: the trailing mean of 2 points goes 0.1, 0.15, 0.3, 0.5, 0.6, 0.6;
    # the gain is 0.5 from the first window to the last, half of it (0.35) is first reached at step 5
    reward = [(1, 0.1, None), (2, 0.1, None), (3, 0.2, None), (4, 0.4, None), (5, 0.6, None), (6, 0.6, None)]
    reward.append((7, 0.6, None))
    assert run_measures.steps_to_share(reward, 0.5, window=2) == 5.0
    assert run_measures.steps_to_share(reward, 1.0) == 5.0  # the end's level, first reached at step 5
    assert run_measures.steps_to_share([(1, 0.5, None), (2, 0.4, None)], 0.5) is None  # no gain: no such step
    assert run_measures.run_measure("auc", reward, []) == pytest.approx(sum((a + b) / 2 for (_, a, _), (_, b, _) in zip(reward, reward[1:], strict=False)) / 6)  # fmt: skip
    # a finding on the sampled pass@1 reads the runs' pass@1 curve, not the greedy one
    run = rd(1, EVALS)
    run.scores = {"eval/pass@1": [(0, 0.2, 64), (10, 0.3, 64), (20, 0.35, 64), (30, 0.4, 64), (40, 0.45, 64)]}
    finding = F.Finding("f", "c", "s", "v", "plateau", "higher", (), curve="eval/pass@1")
    assert verdicts.Arm("v", [run]).by_seed(finding) == {1: pytest.approx((0.35 + 0.4 + 0.45) / 3)}
    speed = F.Finding("g", "c", "s", "v", "steps_to_share", "lower", (), curve="train/reward", share=0.5, window=2)
    run.series["train/reward"] = [(s, v) for s, v, _ in reward]
    assert verdicts.Arm("v", [run]).by_seed(speed) == {1: 5.0} and speed.unit == "steps"


def test_each_measure_is_a_weighted_sum_of_evals_and_so_of_problems():
    from grpoctl.analysis.problems import weighted
    from grpoctl.registry.outcomes import encode

    # 4 problems per eval; each eval's accuracy is its problems' mean
    right = {0: [1, 0, 0, 0], 10: [0, 1, 0, 0], 20: [1, 1, 1, 0], 30: [1, 1, 0, 1], 40: [1, 0, 1, 0]}
    evals = [(s, sum(r) / 4, 4) for s, r in right.items()]
    stored = {s: ("h", encode(r, 1)) for s, r in right.items()}
    for measure in ("plateau", "collapse", "peak_decline", "auc", "final"):
        weights = run_measures.measure_weights(measure, evals)
        problems = weighted(stored, weights)
        assert sum(problems.values) / 4 == pytest.approx(run_measures.run_measure(measure, evals, [])), measure
    assert weighted({**stored, 40: ("other", stored[40][1])}, run_measures.measure_weights("plateau", evals)) is None
    assert (
        weighted({s: ("h", None) for s in right}, run_measures.measure_weights("plateau", evals)) is None
    )  # not recorded


def rd(run_id: int, evals=EVALS, grad=(), length=(), seed=None, status="finished"):
    return SimpleNamespace(
        run=SimpleNamespace(id=run_id, seed=run_id if seed is None else seed, status=status),
        evals=evals,
        series={"train/grad_norm": list(grad), "train/response_length": list(length)},
    )


def test_testability_rules_measure_the_runs():
    from grpoctl.analysis.testability import check, run_values

    extra = {1: {"zero_std_at_start": 0.95, "sample_lengths": [30, 30, 31, 29]}, 2: {"zero_std_at_start": 0.30}}
    variant, base = (
        verdicts.Arm("v", [rd(1, grad=[(1, 0.1)], seed=0)], extra),
        verdicts.Arm("b", [rd(2, grad=[(1, 0.2)], length=[(1, 16)], seed=0)], extra),
    )
    assert run_values("mixed_groups_at_start", variant, base, 32) == pytest.approx([0.05])
    assert run_values("mixed_groups_at_start", base, variant, 32) == pytest.approx([0.70])
    # statistics.stdev([30, 30, 31, 29]) / 30
    assert run_values("length_cv", variant, base, 32) == pytest.approx([0.816496580927726 / 30])
    assert run_values("length_fill", base, variant, 32) == pytest.approx([0.5])
    assert run_values("step1_grad_norm_gap", variant, base, 32) == pytest.approx([0.5])  # the seed-0 pair
    rule = F.Rule("mixed_groups_at_start", "every_arm", 0.2)
    finding = F.Finding("f", "c", "s", "v", "plateau", "higher", (rule,))
    result = verdicts.Result(finding, "b")
    verdicts.decide_testable(result, variant, base, 32)
    assert not result.testable and result.rule_value == pytest.approx(0.05)  # the worse arm decides
    assert result.rule_values == pytest.approx({"v": 0.05, "b": 0.70})
    result = verdicts.Result(finding, "b")
    verdicts.decide_testable(result, verdicts.Arm("b2", base.runs, extra), base, 32)
    assert result.testable
    assert check(rule, variant, verdicts.Arm("x", [rd(3, seed=0)], extra), 32).holds is None  # run 3 has no step 1


def table(study, base_label, arms):
    """A stand-in CompareTable: rows of runs with evals, the baseline named."""
    rows = [SimpleNamespace(label=label, runs=runs) for label, runs in arms.items()]
    return SimpleNamespace(rows=rows, versus=SimpleNamespace(baseline=base_label))


def curve(final):
    return [(0, 0.4, 512), (10, final - 0.02, 512), (20, final + 0.01, 512), (30, final, 512)]


@pytest.mark.slow
def test_one_family_over_the_testable_findings_and_the_verdicts():
    extra = {i: {"zero_std_at_start": 0.3} for i in range(100)}
    extra.update({i: {"zero_std_at_start": 0.99} for i in range(90, 100)})  # a start with no signal
    base = [rd(i, curve(m)) for i, m in enumerate([0.60, 0.62, 0.61])]
    worse = [rd(10 + i, curve(m)) for i, m in enumerate([0.50, 0.52, 0.51])]
    same = [rd(20 + i, curve(m)) for i, m in enumerate([0.605, 0.612, 0.611])]
    dead = [rd(90 + i, curve(m)) for i, m in enumerate([0.01, 0.02, 0.00])]
    tables = {"s": table("s", "base", {"base": base, "worse": worse, "same": same, "dead": dead})}
    rule = (F.Rule("mixed_groups_at_start", "every_arm", 0.2),)
    declared = [
        F.Finding("w", "c", "s", "worse", "plateau", "lower", rule),
        F.Finding("e", "c", "s", "same", "plateau", "same", rule),
        F.Finding("d", "c", "s", "dead", "plateau", "higher", rule),
        F.Finding("x", "c", "s", "worse", "plateau", "higher", rule),
    ]
    results = {r.finding.id: r for r in verdicts.evaluate(tables, declared, extra, {"s": 32})}
    assert not results["d"].testable and results["d"].p_family is None and results["d"].verdict == "not testable here"
    # The family is w, e and x: Holm over their own p's (Welch for w and x, TOST for e).
    family = [results[k].p for k in ("w", "e", "x")]
    assert [results[k].p_family for k in ("w", "e", "x")] == pytest.approx(stats.holm(family))
    assert results["e"].p == pytest.approx(stats.tost([0.605, 0.612, 0.611], [0.60, 0.62, 0.61]).p)
    assert results["w"].verdict == "reproduced" and results["x"].verdict == "contradicted: lower"
    assert results["e"].verdict.startswith("reproduced: equivalent")
    assert results["w"].mde == pytest.approx(stats.mde(stats.pooled_sd([0.50, 0.52, 0.51], [0.60, 0.62, 0.61]), 3, 3))
    assert results["w"].mde_family > results["w"].mde  # at alpha / 3
    assert set(results["w"].robustness) == {"last-3", "final", "AUC"}


# --------------------------------------------------------------------------- on the committed registry

REGISTRY = ROOT / "docs" / "results" / "registry.db.xz"  # committed compressed: read through its cache
PAGE = ROOT / "experiments" / "pages" / "addition.yaml"


def compare_json(*args: str) -> dict:
    out = invoke("compare", *args, "--db", str(REGISTRY), "--format", "json", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout)


def raw_measures(db: Path, study: str, variant: str, measure: str, after_step: int = 1) -> dict[int, float]:
    """Per seed, a finding's measure straight from the registry's rows (sqlite3, not grpoctl):
    the mean of the last 3 trained evals (plateau), or the lowest from after_step (collapse)."""
    import sqlite3

    query = (
        "SELECT r.seed, e.step, e.accuracy FROM sweep s JOIN sweepmember m ON m.sweep_id = s.id "
        "JOIN run r ON r.config_hash = m.config_hash JOIN evalresult e ON e.run_id = r.id "
        "WHERE s.name = ? AND m.variant = ? AND r.status IN ('finished', 'diverged') AND e.kind = 'greedy' "
        "AND e.checkpoint_path IS NULL AND e.step > 0 ORDER BY r.seed, e.step"
    )
    curves: dict[int, list[tuple[int, float]]] = {}
    with sqlite3.connect(db) as conn:
        for seed, step, accuracy in conn.execute(query, (study, variant)):
            curves.setdefault(seed, []).append((step, accuracy))
    if measure == "plateau":
        return {seed: sum(a for _, a in c[-3:]) / len(c[-3:]) for seed, c in curves.items()}
    return {seed: min(a for s, a in c if s >= after_step) for seed, c in curves.items()}


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down by hand: the i-th smallest of m times (m - i), kept non-decreasing."""
    order = sorted(range(len(pvalues)), key=pvalues.__getitem__)
    out, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        out[i] = running
    return out


# The addition page's six testable findings: (study, variant, baseline, measure, after_step).
TESTED = {
    "lr-too-high-collapses": ("tiny-lr-sweep", "lr=1e-3", "lr=3e-4", "collapse", 10),
    "lr-3x-lower-is-worse": ("tiny-lr-sweep", "lr=1e-4", "lr=3e-4", "plateau", 1),
    "std-norm-higher-accuracy": ("tiny-std-normalization", "std_off", "std_on", "plateau", 1),
    "aggressive-reuse-collapses": ("tiny-off-policy", "e4_tb64_ga2", "e1_tb256_ga8", "collapse", 10),
    "mild-reuse-2-epochs-behind": ("tiny-off-policy", "e2_tb256_ga8", "e1_tb256_ga8", "plateau", 1),
    "mild-reuse-half-batches-behind": ("tiny-off-policy", "e1_tb128_ga4", "e1_tb256_ga8", "plateau", 1),
}


def paired_family(db: Path, ids: list[str]) -> dict[str, float]:
    """Holm over the named findings' paired p's (scipy.stats.ttest_rel over the seeds both arms ran)."""
    import scipy.stats

    raw = {}
    for fid in ids:
        study, variant, base, measure, after = TESTED[fid]
        v, b = raw_measures(db, study, variant, measure, after), raw_measures(db, study, base, measure, after)
        seeds = sorted(set(v) & set(b))
        assert len(seeds) >= 2 and seeds == sorted(v) == sorted(b)  # matched seeds: the paired t applies
        raw[fid] = float(scipy.stats.ttest_rel([v[s] for s in seeds], [b[s] for s in seeds]).pvalue)
    return dict(zip(ids, holm(list(raw.values())), strict=True))


@pytest.mark.slow
def test_compare_json_tests_the_page_family(committed_registry):
    payload = compare_json("tiny-off-policy", "--findings", str(PAGE))
    family = payload["baseline"]["family"]
    assert family["findings"] == 13 and family["tested"] == 6  # 7 are untestable by their rules, or untested
    rows = {r["variant"]: r for r in payload["rows"]}
    # Holm over the six testable findings' own paired p's, recomputed from the registry's rows
    expected = paired_family(committed_registry("registry.db"), list(TESTED))
    assert rows["e4_tb64_ga2"]["family_p_holm"] == pytest.approx(expected["aggressive-reuse-collapses"], rel=1e-6)
    assert rows["e2_tb256_ga8"]["family_p_holm"] == pytest.approx(expected["mild-reuse-2-epochs-behind"], rel=1e-6)
    assert rows["e1_tb128_ga4"]["family_p_holm"] == pytest.approx(expected["mild-reuse-half-batches-behind"], rel=1e-6)
    assert rows["e4_tb128_ga4"]["family_p_holm"] is None and rows["e4_tb128_ga4"]["exploratory"] is True
    finding = rows["e4_tb64_ga2"]["findings"][0]
    assert finding["id"] == "aggressive-reuse-collapses" and finding["measure"] == "collapse"
    assert finding["diff_test"] == "paired" and finding["problem_level"] == "problem level: not recorded"
    # -14.6 points on each of 3 pairs, but the pairs barely correlate: 2 df leave it unresolved after Holm
    assert expected["aggressive-reuse-collapses"] > 0.05 and finding["diff"] == pytest.approx(-0.146, abs=5e-4)
    assert finding["verdict"] == "inconclusive: not resolved at these seeds"
    # the study's own family (3 findings) when no page is named: Holm over 3, not 6
    own = {r["variant"]: r for r in compare_json("tiny-off-policy")["rows"]}
    ids = ["aggressive-reuse-collapses", "mild-reuse-2-epochs-behind", "mild-reuse-half-batches-behind"]
    in_study = paired_family(committed_registry("registry.db"), ids)
    for variant, fid in zip(("e4_tb64_ga2", "e2_tb256_ga8", "e1_tb128_ga4"), ids, strict=True):
        assert own[variant]["family_p_holm"] == pytest.approx(in_study[fid], rel=1e-6)
    # every old key is still there, beside the new ones
    old = {"diff", "diff_ci_low", "p_value", "p_holm", "verdict", "seeds_needed", "best_diff", "final_acc", "health"}
    assert old | {"mde", "tost_p", "family_p_holm", "diff_test_name", "problem_level"} <= set(rows["e2_tb256_ga8"])


@pytest.mark.slow
def test_the_sft_and_length_findings_are_untestable_by_their_rules():
    from grpoctl.analysis.compare import family_results
    from grpoctl.registry import Registry

    with Registry(str(REGISTRY), readonly=True) as registry:
        declared = [f for spec in F.family_specs(PAGE) for f in F.read_findings(spec)[1]]
        results = {r.finding.id: r for r in family_results(registry, declared)[0]}
    sft = results["sft-early-checkpoint-beats-final"]
    # warmstart_100's first step: train/zero_std_group_fraction 0.9375, 1.0, 0.96875 over seeds -> 3.1% mixed
    assert not sft.testable and sft.rule_value == pytest.approx(1 - 0.96875)
    length = results["length-norm-constant-same-accuracy"]
    assert not length.testable and length.rule_value < 0.05  # 29-31-byte completions
    assert not results["std-off-lower-grad-norm"].testable  # ratio ~0.45 at step 1: the division itself
    assert results["aggressive-reuse-collapses"].testable


def _verdict_of(finding, v_means, b_means):
    """The verdict of one finding on arms of 3 matched seeds with these plateaus."""
    extra = {i: {"zero_std_at_start": 0.3} for i in range(20)}
    base = [rd(i, curve(m), seed=i) for i, m in enumerate(b_means)]
    variant = [rd(10 + i, curve(m), seed=i) for i, m in enumerate(v_means)]
    (result,) = verdicts.evaluate(table_of(base, variant), [finding], extra, {"s": 32})
    return result


def table_of(base, variant):
    return {"s": table("s", "b", {"b": base, "v": variant})}


RULE = (F.Rule("mixed_groups_at_start", "every_arm", 0.2),)


def test_not_reproduced_when_the_interval_excludes_the_seeds_effect_or_a_minimum():
    flat = F.Finding("std", "c", "s", "v", "plateau", "lower", RULE, seed_effect=-0.07)
    # paired differences +0.001, -0.002, +0.0015: unresolved, and [-0.004, +0.004] lies short of -7 points
    result = _verdict_of(flat, [0.601, 0.618, 0.6115], [0.60, 0.62, 0.61])
    assert result.diff.test == "paired" and result.diff.low > -0.07
    assert result.verdict == "not reproduced: the interval excludes the seed's effect"
    # a wide interval that still holds -7 points: inconclusive
    wide = _verdict_of(flat, [0.50, 0.66, 0.58], [0.60, 0.62, 0.61])
    assert wide.diff.low < -0.07 < wide.diff.high and wide.verdict == "inconclusive: not resolved at these seeds"
    # a declared minimum (signed in the claim's direction) works the same way
    floor = F.Finding("m", "c", "s", "v", "plateau", "higher", RULE, min_effect=0.02)
    assert _verdict_of(floor, [0.601, 0.618, 0.6115], [0.60, 0.62, 0.61]).verdict.endswith("the declared minimum")
    assert (
        verdicts.short_of(-0.004, 0.004, -0.07)
        and not verdicts.short_of(-0.08, 0.004, -0.07)
        and verdicts.short_of(-0.01, 0.01, 0.02)
    )


def test_equivalence_at_the_ceiling_gets_no_verdict_and_no_place_in_the_family():
    same = F.Finding("e", "c", "s", "v", "plateau", "same", RULE, ceiling=0.99)
    result = _verdict_of(same, [0.966, 0.968, 0.965], [0.965, 0.969, 0.966])
    assert result.equivalence.outcome == "both at ceiling: equivalence uninformative"
    assert result.p is None and result.p_family is None and result.verdict == result.equivalence.outcome
    # the same arms against the default ceiling, 1.0: 3.4 points of room, so TOST decides
    free = _verdict_of(
        F.Finding("e", "c", "s", "v", "plateau", "same", RULE), [0.966, 0.968, 0.965], [0.965, 0.969, 0.966]
    )
    assert free.equivalence.outcome == "" and free.verdict.startswith("reproduced: equivalent")


def test_findings_pair_problems_where_the_runs_recorded_them():
    from grpoctl.analysis import paired
    from grpoctl.registry.outcomes import decode, encode

    def with_outcomes(run, flips):
        run.outcomes = {"greedy": {}}
        for step, acc, _ in run.evals:
            right = [int(i < round(acc * 20)) for i in range(20)]
            right = [1 - r if i in flips and step > 0 else r for i, r in enumerate(right)]
            run.outcomes["greedy"][step] = ("h", encode(right, 1))
        run.evals = [(s, sum(decode(o).correct) / 20, 20) for s, (_, o) in run.outcomes["greedy"].items()]
        return run

    extra = {i: {"zero_std_at_start": 0.3} for i in range(20)}
    base = [with_outcomes(rd(i, curve(0.6), seed=i), {i}) for i in range(3)]
    variant = [with_outcomes(rd(10 + i, curve(0.6), seed=i), {15, 16 + i}) for i in range(3)]
    finding = F.Finding("p", "c", "s", "v", "plateau", "higher", RULE)
    (result,) = verdicts.evaluate(table_of(base, variant), [finding], extra, {"s": 32})
    assert result.diff.test == paired.TWO_LEVEL and result.problem_level == "problem level: in the interval"
    assert set(result.robustness) == {"last-3", "final", "AUC"}
    assert result.robustness["final"].test == paired.TWO_LEVEL


def test_a_finding_no_run_shows_is_not_seen():
    flat = [(0, 0.4, 512), (10, 0.5, 512), (20, 0.6, 512)]  # rising to the end: best minus final is 0
    extra = {i: {"zero_std_at_start": 0.3} for i in range(10)}
    tables = {"s": table("s", "b", {"b": [rd(i, flat) for i in range(3)], "v": [rd(5 + i, flat) for i in range(3)]})}
    rule = (F.Rule("mixed_groups_at_start", "every_arm", 0.2),)
    (result,) = verdicts.evaluate(
        tables, [F.Finding("p", "c", "s", "v", "peak_decline", "higher", rule)], extra, {"s": 32}
    )
    assert result.testable and result.diff is None and result.p_family is None
    assert result.verdict == "not seen: 0 in every run of both arms"


def test_no_verdict_until_every_declared_seed_has_ended(tmp_path):
    """A study read while it runs gives no verdict: a finding waits for every seed its spec
    lists, in both arms, so nothing is read off part of the seeds."""
    extra = {i: {"zero_std_at_start": 0.3} for i in range(20)}
    rule = (F.Rule("mixed_groups_at_start", "every_arm", 0.2),)
    finding = F.Finding("p", "c", "s", "v", "plateau", "higher", rule, seeds=(0, 1, 2))
    base = [rd(i, curve(m), seed=i) for i, m in enumerate([0.60, 0.62, 0.61])]
    variant = [rd(10 + i, curve(m), seed=i) for i, m in enumerate([0.70, 0.73, 0.71])]
    running = rd(12, curve(0.71), seed=2, status="running")
    (partial,) = verdicts.evaluate(table_of(base, variant[:2] + [running]), [finding], extra, {"s": 32})
    assert partial.verdict == "not run" and partial.note == "not run yet: `v` has 2 of its 3 seeds ended"
    (whole,) = verdicts.evaluate(table_of(base, variant), [finding], extra, {"s": 32})
    assert whole.verdict == "reproduced"
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\nseeds: [4, 5]\nbaseline: b\nvariants: {b: {}, v: {lr: 1.0e-4}}\n"
        "findings: [{id: p, claim: c, variant: v, measure: plateau, expect: higher,\n"
        "  testable: {rule: mixed_groups_at_start, in: every_arm, at_least: 0.2}}]\n"
    )
    assert [f.seeds for f in F.read_findings(spec)[1]] == [(4, 5)]


def test_a_finding_not_run_yet_counts_in_the_family_at_p_one():
    """While a round runs, each finding not run yet is in the Holm family at p = 1, so an
    adjusted p read now is no smaller than the one the finished round gives."""
    extra = {i: {"zero_std_at_start": 0.3} for i in range(20)}
    rule = (F.Rule("mixed_groups_at_start", "every_arm", 0.2),)
    base = [rd(i, curve(m), seed=i) for i, m in enumerate([0.60, 0.62, 0.61])]
    variant = [rd(10 + i, curve(m), seed=i) for i, m in enumerate([0.64, 0.67, 0.63])]
    ran = F.Finding("p", "c", "s", "v", "plateau", "higher", rule)
    waiting = F.Finding("q", "c", "later", "v", "plateau", "higher", rule)
    (alone,) = verdicts.evaluate(table_of(base, variant), [ran], extra, {"s": 32})
    now, later = verdicts.evaluate(table_of(base, variant), [ran, waiting], extra, {"s": 32})
    assert later.verdict == "not run" and later.p_family is None
    assert now.p_family == pytest.approx(min(1.0, 2 * alone.p_family))


def test_it_differs_only_when_the_difference_clears_the_family():
    """An equivalence claim whose TOST fails is "contradicted: it differs" only when the
    difference's own p clears alpha adjusted for the page's family, as every verdict does."""
    same = F.Finding("e", "c", "s", "v", "plateau", "same", (), delta=0.03)
    result = verdicts.Result(same, "b")
    result.testable, result.p_family = True, 0.6  # the TOST's, family-adjusted
    result.diff = SimpleNamespace(diff=0.022, low=0.001, high=0.043, p=0.03)
    assert verdicts.verdict(result) == "contradicted: it differs"  # a family of one
    assert verdicts.verdict(result, family=27).startswith("inconclusive")
    result.diff = SimpleNamespace(diff=0.06, low=0.05, high=0.07, p=1e-5)
    assert verdicts.verdict(result, family=27) == "contradicted: it differs"


def test_findings_from_a_file_without_this_studys_findings_warn(tmp_path):
    out = invoke(
        "compare",
        "tiny-std-normalization",
        "--db",
        str(REGISTRY),
        "--findings",
        "experiments/tiny-lr-sweep.yaml",
        "--format",
        "json",
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "experiments/tiny-lr-sweep.yaml declares no findings of tiny-std-normalization" in out.stderr
    missing = invoke(
        "compare", "tiny-std-normalization", "--db", str(REGISTRY), "--findings", str(tmp_path / "nope.yaml"), cwd=ROOT
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no ablation spec at" in missing.stderr


@pytest.mark.slow
def test_a_study_report_tests_its_findings_in_the_page_family(tmp_path, committed_registry):
    from grpoctl.registry import Registry
    from grpoctl.views.report_view import write_report

    with Registry(str(REGISTRY), readonly=True) as registry:
        text = write_report(registry, "tiny-off-policy", tmp_path / "rep", findings=str(PAGE)).read_text()
    section = text.split("## Declared findings\n\n", 1)[1].split("## Curves", 1)[0]
    assert f"Declared in {PAGE}" in section and "Holm over the family's 6 testable findings" in section
    # the page's Holm p for aggressive reuse, as test_compare_json_tests_the_page_family recomputes it
    expected = paired_family(committed_registry("registry.db"), list(TESTED))["aggressive-reuse-collapses"]
    assert "| aggressive-reuse-collapses | e4_tb64_ga2 | minimum eval after warm-up |" in section
    assert f"| {expected:.3f} | paired t (seeds) | inconclusive: not resolved at these seeds |" in section
