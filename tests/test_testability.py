"""Testability rules (analysis/testability.py): a list of rules per finding, each judged at
its worst case in its direction; the step-0 rules; "not run" before "not testable" and out
of the Holm family; the AUC measure; a page's own rules; lengths in tokens."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from grpoctl.analysis import findings as F
from grpoctl.analysis import run_measures, stats, verdicts
from grpoctl.analysis.testability import Rule, check, check_all, load_extra, parse_rules
from grpoctl.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def rd(run_id, seed, start_acc=0.25, final=0.6, grad1=0.2, status="finished"):
    evals = [(0, start_acc, 640), (10, final - 0.02, 640), (20, final + 0.01, 640), (30, final, 640)]
    return SimpleNamespace(
        run=SimpleNamespace(id=run_id, seed=seed, status=status),
        evals=evals,
        series={"train/grad_norm": [(1, grad1), (2, grad1)], "train/response_length": []},
    )


def arm(label, runs, extra=None):
    return verdicts.Arm(label, runs, extra or {})


def test_an_at_most_rule_is_judged_on_its_highest_run():
    # mixed groups 0.10, 0.25, 0.40 over seeds: at_most 0.3 fails on the worst seed (0.40),
    # though the lowest (0.10) would pass; at_least 0.2 fails on the lowest
    extra = {i: {"zero_std_at_start": 1 - m} for i, m in enumerate([0.10, 0.25, 0.40])}
    base = arm("b", [rd(i, i) for i in range(3)], extra)
    variant = arm("v", [rd(10, 0)], extra | {10: {"zero_std_at_start": 0.5}})
    most = check(Rule("mixed_groups_at_start", "baseline", at_most=0.3), variant, base, 96)
    assert most.value == pytest.approx(0.40) and most.holds is False
    least = check(Rule("mixed_groups_at_start", "baseline", at_least=0.2), variant, base, 96)
    assert least.value == pytest.approx(0.10) and least.holds is False
    every = check(Rule("mixed_groups_at_start", "every_arm", at_most=0.45), variant, base, 96)
    assert every.per_arm == pytest.approx({"v": 0.5, "b": 0.40}) and every.value == pytest.approx(0.5)
    assert every.holds is False


def test_the_start_rules_pair_seeds_and_read_step_0():
    base = arm("r1", [rd(i, i, start_acc=0.25) for i in range(3)], {i: {"format_rate_at_start": 1.0} for i in range(3)})
    # question_only starts 14, 12 and 9 points above r1_zero at seeds 0, 1, 2
    qo = arm("qo", [rd(10 + i, i, start_acc=0.25 + d) for i, d in enumerate([0.14, 0.12, 0.09])])
    gap = check(Rule("start_accuracy_gap", "variant", at_least=0.10), qo, base, 96)
    assert gap.value == pytest.approx(0.09) and gap.holds is False  # the worst seed decides
    fmt = check(Rule("start_format_rate", "baseline", at_least=0.02), qo, base, 96)
    assert fmt.value == 1.0 and fmt.holds
    # a seed the other arm did not run has no pair: only seeds 0-1 count
    two = arm("qo", [rd(10, 0, start_acc=0.39), rd(11, 1, start_acc=0.37), rd(19, 9, start_acc=0.0)])
    assert check(Rule("start_accuracy_gap", "variant", at_least=0.10), two, base, 96).value == pytest.approx(0.12)
    # grad-norm gap per seed pair, worst (highest) for at_most
    v = arm("v", [rd(20, 0, grad1=0.21), rd(21, 1, grad1=0.3)])
    b = arm("b", [rd(30, 0, grad1=0.2), rd(31, 1, grad1=0.2)])
    assert check(Rule("step1_grad_norm_gap", "variant", at_most=0.1), v, b, 96).value == pytest.approx(0.5)


def test_every_rule_of_a_list_must_hold_and_the_first_failing_one_decides():
    base = arm("r1", [rd(i, i) for i in range(3)], {i: {"format_rate_at_start": 0.01} for i in range(3)})
    qo = arm("qo", [rd(10 + i, i, start_acc=0.40) for i in range(3)])
    rules = parse_rules(
        [
            {"rule": "start_accuracy_gap", "at_least": 0.10},
            {"rule": "start_format_rate", "in": "baseline", "at_least": 0.02},
        ],
        "spec",
    )
    assert rules[0].arms == "variant"  # a pair rule's default
    checks, deciding = check_all(rules, qo, base, 96)
    assert [c.holds for c in checks] == [True, False] and deciding is checks[1]
    finding = F.Finding("p", "c", "s", "qo", "plateau", "lower", rules)
    result = verdicts.Result(finding, "r1")
    verdicts.decide_testable(result, qo, base, 96)
    assert not result.testable and result.rule_value == pytest.approx(0.01)


@pytest.mark.parametrize(
    "raw, message",
    [
        ([], "'testable' lists no rule"),
        ({"rule": "start_accuracy_gap", "in": "every_arm", "at_least": 0.1}, "its 'in' is variant"),
        ([{"rule": "length_cv", "at_least": 0.1}, 3], "rule 2: 'testable' must be a mapping"),
        ({"rule": "start_format_rate", "at_least": 0.1, "at_most": 0.5}, "exactly one threshold"),
        ({"rule": "baseline_converged", "at_least": 0.9}, "baseline_converged needs 'min_gain'"),
        ({"rule": "rises_first", "at_least": 0.05, "min_gain": 0.1}, "rises_first takes no 'min_gain'"),
        ({"rule": "rises_first", "at_least": 0.05, "curve": "eval/pass@1"}, "'curve' is for baseline_converged"),
        (
            {"rule": "baseline_converged", "at_least": 0.9, "min_gain": 0.1, "curve": "train/reward"},
            "got 'train/reward'",
        ),
    ],
)
def test_bad_rules_are_one_line(raw, message):
    with pytest.raises(UserError) as err:
        parse_rules(raw, "spec: finding 'f'")
    assert message in str(err.value) and "\n" not in str(err.value)


def table(base_label, arms):
    rows = [SimpleNamespace(label=label, runs=runs) for label, runs in arms.items()]
    return SimpleNamespace(rows=rows, versus=SimpleNamespace(baseline=base_label))


@pytest.mark.slow  # a family's tests and MDEs (scipy's noncentral t): seconds
def test_not_run_comes_before_not_testable_and_stays_out_of_the_family():
    extra = {i: {"zero_std_at_start": 0.99} for i in range(100)}  # no arm could be testable
    extra.update({i: {"zero_std_at_start": 0.3} for i in range(40, 60)})
    base = [rd(40 + i, i, final=0.60 + 0.01 * i) for i in range(3)]
    worse = [rd(50 + i, i, final=0.50 + 0.01 * i) for i in range(3)]
    running = [rd(60 + i, i, status="running") for i in range(3)]  # members still running: not measured
    tables = {"s": table("base", {"base": base, "worse": worse, "running": running, "dead": base})}
    rule = (Rule("mixed_groups_at_start", "every_arm", 0.2),)
    declared = [
        F.Finding("w", "c", "s", "worse", "plateau", "lower", rule),
        F.Finding("r", "c", "s", "running", "plateau", "lower", rule),
        F.Finding("n", "c", "other", "worse", "plateau", "lower", rule),  # a study not run at all
    ]
    results = {r.finding.id: r for r in verdicts.evaluate(tables, declared, extra, {"s": 96})}
    assert results["r"].verdict == "not run" and results["r"].unended == 3 and "`running`" in results["r"].note
    assert results["n"].verdict == "not run" and results["n"].p_family is None
    assert results["w"].testable and results["w"].p_family == pytest.approx(results["w"].p)  # a family of one
    assert results["w"].mde_family == pytest.approx(results["w"].mde)


def test_rises_first_and_baseline_converged():
    rises = Rule("rises_first", "variant", at_least=0.05)
    flat = [rd(1, 0, start_acc=0.25, final=0.26), rd(2, 1, start_acc=0.25, final=0.40)]
    climbing = arm("b", [rd(3, 0, start_acc=0.25, final=0.9)])
    c = check(rises, arm("v", flat), climbing, 96)
    # the worst seed's best eval is 0.27 (0.26 + 0.01 at step 20) against 0.25 at step 0
    assert c.holds is False and c.value == pytest.approx(0.02)
    converged = Rule("baseline_converged", "baseline", at_least=0.9, min_gain=0.1)
    # evals 0.25 -> 0.88, 0.91, 0.90: a gain of 0.6467 of which 0.63 was made by step 10, the window's first
    c = check(converged, arm("v", flat), climbing, 96)
    assert c.holds is True and c.value == pytest.approx((0.88 - 0.25) / ((0.88 + 0.91 + 0.90) / 3 - 0.25))
    # a baseline that gained 1 point fails with that gain as its number, not its share
    c = check(converged, arm("v", flat), arm("b", flat[:1]), 96)
    assert c.holds is False and c.short_gain == c.value == pytest.approx((0.24 + 0.27 + 0.26) / 3 - 0.25)
    still = arm("b", [SimpleNamespace(run=SimpleNamespace(id=9, seed=0, status="finished"),
                                      evals=[(0, 0.2, 8), (10, 0.3, 8), (20, 0.6, 8), (30, 0.9, 8)], series={})])  # fmt: skip
    c = check(converged, arm("v", flat), still, 96)  # 0.3 of a 0.4667 gain by step 10: still climbing
    assert c.holds is False and c.short_gain is None and c.value == pytest.approx(0.1 / (0.6 - 0.2))


def test_a_reanalysis_adds_rules_to_the_frozen_specs_and_never_replaces_them(tmp_path):
    spec = tmp_path / "study.yaml"
    spec.write_text(
        "name: study\nbaseline: a\nvariants:\n  a: {optimizer.lr: 1.0e-4}\n  b: {optimizer.lr: 1.0e-3}\nfindings:\n"
        "  - {id: f, claim: c, variant: b, measure: plateau, expect: lower, seed_effect: -0.05,"
        " testable: {rule: mixed_groups_at_start, at_least: 0.2}}\n"
        "  - {id: g, claim: c, variant: b, measure: plateau, expect: same, testable: {rule: length_cv, at_least: 0.1}}\n"
        "  - {id: h, claim: c, variant: b, measure: grad_norm, expect: lower,"
        " testable: {rule: step1_grad_norm_gap, at_most: 0.1}}\n"
    )
    (tmp_path / "page.yaml").write_text("name: p\nstudies: [study.yaml]\n")
    overlay = tmp_path / "again.yaml"
    overlay.write_text(
        "name: again\nof: page.yaml\nwhy: after the data\nmeasures:\n"
        "  plateau: [{rule: baseline_converged, at_least: 0.9, min_gain: 0.1}]\n"
        "  grad_norm: [{rule: step1_grad_norm_gap, at_most: 0.1}]\n"
        "findings:\n  f: {min_effect: -0.02}\n  g: {ceiling: 0.99}\n"
    )
    declared = {f.id: f for f in F.family_findings(tmp_path / "page.yaml")}
    again = {f.id: f for f in F.family_findings(overlay)}  # compare --findings takes the overlay too
    assert [r.rule for r in again["f"].testable] == ["mixed_groups_at_start", "baseline_converged"]
    assert again["f"].testable[:1] == declared["f"].testable and again["f"].min_effect == -0.02
    assert again["f"].seed_effect == declared["f"].seed_effect == -0.05
    assert again["g"].ceiling == 0.99 and declared["g"].ceiling == 1.0
    assert again["h"].testable == declared["h"].testable  # the rule it declared is not added twice
    for text, message in (
        ("name: x\nof: page.yaml\nfindings:\n  z: {ceiling: 0.9}\n", "'z' is not a finding of page.yaml"),
        ("name: x\nof: nope.yaml\n", "'of' must name the page file"),
        ("name: x\nof: page.yaml\nmeasures: {vibes: []}\n", "'measures' maps measures"),
        ("name: x\nof: page.yaml\nfindings:\n  g: {min_effect: 0.1}\n", "'min_effect' is for a direction"),
        ("name: x\nof: page.yaml\nfindings:\n  f: {colour: red}\n", "sets one or more of"),
    ):
        overlay.write_text(text)
        with pytest.raises(UserError) as err:
            F.family_findings(overlay)
        assert message in str(err.value) and "\n" not in str(err.value)


def test_the_lab_reanalysis_adds_the_rules_issue_35_names():
    declared = {f.id: f for f in F.family_findings(ROOT / "experiments" / "pages" / "lab.yaml")}
    again = {f.id: f for f in F.family_findings(ROOT / "experiments" / "pages" / "lab-reanalysis.yaml")}
    assert set(again) == set(declared)
    for fid, f in again.items():
        assert f.testable[: len(declared[fid].testable)] == declared[fid].testable  # declared rules first, kept
        if f.measure == "grad_norm":  # one gradient-norm rule for every grad-norm finding
            assert any(r.rule == "step1_grad_norm_gap" and r.at_most == 0.1 for r in f.testable)
        if f.measure in ("plateau", "collapse"):
            assert any(r.rule == "baseline_converged" for r in f.testable)
    assert any(r.rule == "rises_first" for r in again["lab-no-baseline-peaks-then-declines"].testable)


def test_auc_is_a_measure():
    evals = [(0, 0.2, 8), (10, 0.4, 8), (20, 0.8, 8)]
    assert run_measures.run_measure("auc", evals, []) == pytest.approx((10 * 0.3 + 10 * 0.6) / 20)
    assert "auc" in F.MEASURES


def test_a_page_sets_a_findings_rules_in_place_of_its_specs(tmp_path):
    spec = tmp_path / "study.yaml"
    spec.write_text(
        "name: study\nbaseline: a\nvariants:\n  a: {optimizer.lr: 1.0e-4}\n  b: {optimizer.lr: 1.0e-3}\nfindings:\n"
        "  - {id: f, claim: c, variant: b, measure: auc, expect: lower,"
        " testable: {rule: mixed_groups_at_start, in: baseline, at_most: 0.3}}\n"
    )
    page = tmp_path / "page.yaml"
    page.write_text(
        "name: p\nstudies: [study.yaml]\ntestable:\n  f:\n    - {rule: start_accuracy_gap, at_least: 0.1}\n"
        "    - {rule: start_format_rate, in: baseline, at_least: 0.02}\n"
    )
    (finding,) = F.family_findings(page)
    assert [r.rule for r in finding.testable] == ["start_accuracy_gap", "start_format_rate"]
    assert F.read_findings(spec)[1][0].testable[0].rule == "mixed_groups_at_start"  # the spec's own, unchanged
    page.write_text("name: p\nstudies: [study.yaml]\ntestable:\n  g: {rule: length_cv, at_least: 0.1}\n")
    with pytest.raises(UserError, match="'g' is not a finding of the page's studies"):
        F.family_findings(page)


def test_the_lab_page_states_the_prompt_studys_own_rule():
    by_id = {f.id: f for f in F.family_findings(ROOT / "experiments" / "pages" / "lab.yaml")}
    assert len(by_id) == 21
    prompt = by_id["lab-r1-zero-beats-question-only"].testable
    assert [(r.rule, r.arms, r.at_least) for r in prompt] == [
        ("start_accuracy_gap", "variant", 0.10),
        ("start_format_rate", "baseline", 0.02),
    ]


def test_load_extra_reads_step_1_step_0_and_token_lengths():
    run = SimpleNamespace(id=7, config='{"model": {"path": "tiny"}}')
    series = {"train/zero_std_group_fraction": [(1, 0.25), (2, 0.5)], "eval/format_rate": [(0, 0.97), (10, 1.0)]}
    registry = SimpleNamespace(
        metric_series=lambda run_id, names: series,
        samples=lambda run_id, kind: [SimpleNamespace(response="12+3=15"), SimpleNamespace(response="é")],
    )
    extra = load_extra(registry, [run])[7]
    assert extra["zero_std_at_start"] == 0.25 and extra["format_rate_at_start"] == 0.97
    assert extra["sample_lengths"] == [7, 2] and extra["length_unit"] == "tokens"  # the tiny model: a byte a token
    assert stats.spread([7, 2]) > 0


@pytest.mark.slow  # builds the lab tokenizer (imports transformers: ~9 s)
def test_lab_lengths_are_tokens_not_bytes():
    from transformers import AutoTokenizer

    from grpoctl.analysis.token_lengths import token_counter
    from grpoctl.warmstart.lab import resolve_lab_model

    count, unit = token_counter("lab-sft@800")
    text = " 47+8=55 </think> <answer>55</answer>"
    shipped = AutoTokenizer.from_pretrained(resolve_lab_model("lab", "/nonexistent-cache", log=lambda *_: None))
    assert count(text) == len(shipped(text, add_special_tokens=False)["input_ids"]) == 10 and unit == "tokens"
    assert token_counter("/no/such/dir")[1] == "bytes"


def test_a_finding_not_run_names_its_specs_baseline_and_one_seed_is_no_test():
    (finding,) = F.read_findings(ROOT / "experiments" / "lab-prompt.yaml")[1]
    assert finding.baseline == "r1_zero"
    (result,) = verdicts.evaluate({}, [finding], {}, {})  # the study has no table: not recorded yet
    assert result.not_run and result.baseline == "r1_zero" and result.verdict == "not run"
    one = verdicts.Result(finding, "r1_zero", testable=True, variant_values=[0.5], baseline_values=[0.6, 0.7, 0.65])
    assert verdicts.verdict(one) == "no test: 1 seed(s) against 3"


def test_baseline_converged_reads_the_curve_it_names():
    """On the greedy eval the baseline has converged; on its sampled pass@1 it is still
    climbing, and a rule that names that curve says so (and names it)."""
    runs = []
    for i in range(2):
        greedy = [(0, 0.25, 640), (10, 0.88, 640), (20, 0.91, 640), (30, 0.90, 640)]
        sampled = [(0, 0.20, 512), (10, 0.40, 512), (20, 0.60, 512), (30, 0.70 + 0.01 * i, 512)]
        runs.append(SimpleNamespace(
            run=SimpleNamespace(id=i, seed=i, status="finished"), evals=greedy, scores={"eval/pass@1": sampled}, series={}
        ))  # fmt: skip
    base, variant = arm("b", runs), arm("v", [rd(5, 0)])
    (greedy_rule,) = parse_rules({"rule": "baseline_converged", "at_least": 0.9, "min_gain": 0.1}, "page")
    (sampled_rule,) = parse_rules(
        {"rule": "baseline_converged", "at_least": 0.9, "min_gain": 0.1, "curve": "eval/pass@1"}, "page"
    )
    assert check(greedy_rule, variant, base, 96).holds is True
    c = check(sampled_rule, variant, base, 96)
    # worst seed (1): 0.20 -> 0.40, 0.60, 0.71: 0.2 of a 0.37 gain by step 10
    assert c.holds is False and c.value == pytest.approx(0.2 / ((0.40 + 0.60 + 0.71) / 3 - 0.20))
    assert sampled_rule.describe().startswith(
        "share of its final gain made by the first eval of its last 3 on eval/pass@1"
    )
    assert greedy_rule != sampled_rule  # a re-analysis can add the one beside the other
