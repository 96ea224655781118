"""Speed measures on the compute axes (analysis/axes.py) and the series measure: arms
compared per optimizer update, per rollout and per CPU-second at their common budget, a
per-step series averaged over a step window, and the spec keys' one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpoctl.analysis import axes, run_measures, verdicts
from grpoctl.analysis import findings as F
from grpoctl.errors import UserError
from grpoctl.sweep.spec import ablation

STEPS = 40
OFFSET = {0: 0.002, 1: -0.001, 2: 0.001}  # each seed's own small lift, the same in both arms but for this


def progress(updates: float) -> float:
    """Accuracy as a function of optimizer updates alone: linear, then flat from 20 updates
    (a point of both arms' eval grids, so linear interpolation between them is exact)."""
    return min(0.2 + 0.02 * updates, 0.6)


def config(epochs: int = 1, rollout_batch_size: int = 64, train_batch_size: int = 64, group_size: int = 8) -> str:
    return json.dumps(
        {
            "loop": {"epochs_per_rollout_batch": epochs, "train_batch_size": train_batch_size},
            "rollout": {"rollout_batch_size": rollout_batch_size, "group_size": group_size},
        }
    )


def run(run_id: int, seed: int, cfg: str, evals: list, **series) -> SimpleNamespace:
    return SimpleNamespace(
        run=SimpleNamespace(id=run_id, seed=seed, status="finished", config=cfg), evals=evals, series=dict(series)
    )


def reuse_arms(lift: float = 0.0):
    """An on-policy baseline (1 update a step) and a reuse arm (2 epochs: 2 updates a step),
    each eval every 5 steps reading the policy its updates made; the reuse arm's seeds lift
    by OFFSET[seed] + `lift`."""
    base, reuse = [], []
    for seed in range(3):
        evals = [(s, progress(s), 512) for s in range(0, STEPS + 1, 5)]
        base.append(
            run(seed, seed, config(), evals, **{"train/reward": [(s, progress(s - 1)) for s in range(1, STEPS + 1)]})
        )
        evals = [(s, progress(2 * s) + OFFSET[seed] + lift, 512) for s in range(0, STEPS + 1, 5)]
        reward = [(s, progress(2 * (s - 1)) + OFFSET[seed]) for s in range(1, STEPS + 1)]
        reuse.append(run(10 + seed, seed, config(epochs=2), evals, **{"train/reward": reward}))
    return base, reuse


def table(arms: dict) -> dict:
    rows = [SimpleNamespace(label=label, runs=runs) for label, runs in arms.items()]
    return {"s": SimpleNamespace(rows=rows, versus=SimpleNamespace(baseline="base"))}


def finding(fid: str, measure: str, expect: str, **keys) -> F.Finding:
    rule = (F.Rule("rises_first", "every_arm", 0.0),)
    return F.Finding(fid, "c", "s", "reuse", measure, expect, rule, baseline="base", **keys)


def test_reuse_that_doubles_updates_ties_per_update_and_wins_per_step():
    base, reuse = reuse_arms()
    per_update = finding("per-update", "auc", "same", axis="update")
    per_step = finding("per-step", "auc", "higher")
    results = {
        r.finding.id: r
        for r in verdicts.evaluate(table({"base": base, "reuse": reuse}), [per_update, per_step], {}, {})
    }
    # per update: the same curve, read over the budget both arms reached (the baseline's 40 updates)
    up = results["per-update"]
    assert up.budget == (0.0, 40.0)
    b = verdicts.Arm("base", base).by_seed(per_update, budget=up.budget)
    v = verdicts.Arm("reuse", reuse).by_seed(per_update, budget=up.budget)
    assert {s: v[s] - b[s] for s in b} == pytest.approx(OFFSET, abs=1e-12)
    assert up.verdict.startswith("reproduced: equivalent")
    # per GRPO step the reuse arm is ahead: it reached the plateau in 10 steps, not 20
    assert results["per-step"].diff.diff == pytest.approx(0.05 + sum(OFFSET.values()) / 3)
    assert results["per-step"].verdict == "reproduced"
    assert per_update.measure_text.startswith("area under the curve per optimizer update")
    assert per_update.unit == "accuracy" and per_step.measure_text == F.MEASURES["auc"]


def test_a_lift_per_update_is_seen_per_update():
    base, reuse = reuse_arms(lift=0.05)
    per_update = finding("per-update", "auc", "higher", axis="update")
    (result,) = verdicts.evaluate(table({"base": base, "reuse": reuse}), [per_update], {}, {})
    assert result.diff.diff == pytest.approx(0.05 + sum(OFFSET.values()) / 3) and result.verdict == "reproduced"


def test_steps_to_share_per_update_reads_the_per_step_reward_where_its_policy_was_made():
    base, reuse = reuse_arms()
    speed = {"share": 0.5, "curve": "train/reward"}
    per_update = finding("u", "steps_to_share", "same", axis="update", **speed)
    per_step = finding("s", "steps_to_share", "lower", **speed)
    budget, missing = verdicts.common_budget(per_update, verdicts.Arm("reuse", reuse), verdicts.Arm("base", base))
    # step k's reward was drawn before step k's update: the baseline's 40 points sit at 0..39 updates
    assert missing == 0 and budget == (0.0, 39.0)
    b = verdicts.Arm("base", base).by_seed(per_update, budget=budget)
    v = verdicts.Arm("reuse", reuse).by_seed(per_update, budget=budget)
    # half the gain (0.2 -> 0.6) is first reached at 10 updates in both arms
    assert b == {0: 10.0, 1: 10.0, 2: 10.0} and v == b
    assert per_update.unit == "updates" and per_update.measure_text.startswith("updates to a share")
    # per step the reuse arm gets there in half the steps: at step 6, after 5 steps' 10 updates
    assert verdicts.Arm("reuse", reuse).by_seed(per_step) == {0: 6.0, 1: 6.0, 2: 6.0}
    assert verdicts.Arm("base", base).by_seed(per_step) == {0: 11.0, 1: 11.0, 2: 11.0}


def test_rollouts_count_dynamic_samplings_extra_rounds():
    # 8 prompts of 8 a step; the dynamic-sampling run drew 12 prompts at step 2, 16 at step 3
    plain = run(1, 0, config(), [])
    drawing = run(2, 0, config(), [], **{"train/dynamic_sampling_prompts": [(1, 8.0), (2, 12.0), (3, 16.0)]})
    assert axes.spent(plain, "rollout", 3) == {0: 0.0, 1: 64.0, 2: 128.0, 3: 192.0}
    assert axes.spent(drawing, "rollout", 3) == {0: 0.0, 1: 64.0, 2: 160.0, 3: 288.0}
    # an eval at step 3 reads the policy after 3 steps; step 3's reward was drawn after 2
    assert axes.positions(drawing, "rollout", [0, 3], per_step=False) == {0: 0.0, 3: 288.0}
    assert axes.positions(drawing, "rollout", [1, 3], per_step=True) == {1: 0.0, 3: 160.0}
    assert axes.spent(run(3, 0, config(epochs=4, train_batch_size=16), []), "update", 2) == {0: 0, 1: 16, 2: 32}


def cpu_arms(missing_cpu: bool = False):
    """Both arms learn the same per step; the variant spends 1 CPU-s a step, the baseline
    0.5 (each seed its own jitter), over 20 steps, evaluated every 2."""
    base, variant = [], []
    for seed in range(3):
        evals = [(s, 0.2 + 0.02 * s + 0.01 * seed, 256) for s in range(0, 21, 2)]
        cpu = [(s, 0.5 + 0.01 * seed) for s in range(1, 21)]
        base.append(run(seed, seed, config(), evals, **{"time/cpu": cpu}))
        cpu = [(s, 1.0 + 0.02 * (s % 3)) for s in range(1, 21)]
        variant.append(
            run(10 + seed, seed, config(), evals, **({} if missing_cpu and seed == 1 else {"time/cpu": cpu}))
        )
    return base, variant


def test_cpu_seconds_cut_the_costlier_arm_at_the_common_budget():
    base, variant = cpu_arms()
    f = finding("cpu", "auc", "higher", axis="cpu_second")
    (result,) = verdicts.evaluate(table({"base": base, "reuse": variant}), [f], {}, {})
    assert result.budget == pytest.approx((0.0, 20 * 0.5))  # seed 0's baseline, the cheapest run, ends first
    # the variant read by hand: its points at its cumulative CPU-seconds, cut at 10 s by linear
    # interpolation, the area by trapezoids over 10 s
    for seed, rd in enumerate(variant):
        spent = [0.0]
        for s in range(1, 21):
            spent.append(spent[-1] + 1.0 + 0.02 * (s % 3))
        xs = [spent[s] for s in range(0, 21, 2)]
        ys = [0.2 + 0.02 * s + 0.01 * seed for s in range(0, 21, 2)]
        area, x_prev, y_prev = 0.0, xs[0], ys[0]
        for x, y in zip(xs[1:], ys[1:], strict=True):
            if x >= 10:
                y_cut = y_prev + (y - y_prev) * (10 - x_prev) / (x - x_prev)
                area += (10 - x_prev) * (y_prev + y_cut) / 2
                break
            area += (x - x_prev) * (y_prev + y) / 2
            x_prev, y_prev = x, y
        by_hand = area / 10
        assert verdicts.Arm("v", [rd]).by_seed(f, budget=result.budget)[seed] == pytest.approx(by_hand, rel=1e-12)
    # at an equal CPU budget the cheaper arm has made twice the steps, so it is ahead
    assert result.diff.diff < -0.05 and result.verdict == "contradicted: lower"


def test_a_run_without_time_cpu_is_not_measurable_on_that_axis():
    base, variant = cpu_arms(missing_cpu=True)
    f = finding("cpu", "steps_to_share", "lower", axis="cpu_second", share=0.5)
    per_step = finding("steps", "steps_to_share", "lower", share=0.5)
    results = verdicts.evaluate(table({"base": base, "reuse": variant}), [f, per_step], {}, {})
    cpu, steps = results
    assert not cpu.testable and cpu.verdict == "not testable here" and cpu.p_family is None
    assert cpu.note == "not measurable: time/cpu is missing from 1 of the arms' 6 runs"
    assert all(c.holds for c in cpu.checks)  # its rules hold: the runs lack what it counts
    assert steps.testable and steps.budget is None  # the step axis needs nothing more
    assert verdicts.arm_values(f, verdicts.Arm("reuse", variant), verdicts.Arm("base", base)) == ({}, {})


def test_series_mean_over_a_step_window():
    ratio = [(1, 1.1), (2, 1.5), (3, 2.5), (4, 3.0), (5, float("nan"))]
    assert run_measures.run_measure("series", [], ratio[:4]) == pytest.approx((1.1 + 1.5 + 2.5 + 3.0) / 4)
    assert run_measures.run_measure("series", [], ratio, steps=(2, 3)) == pytest.approx(2.0)
    assert run_measures.run_measure("series", [], ratio) is None  # a non-finite step in the window: no mean
    assert run_measures.run_measure("series", [], ratio, steps=(6, 9)) is None  # the window has no step
    drift = finding("drift", "series", "higher", curve="train/ratio_max", steps=(2, 3))
    rd = run(1, 7, config(), [], **{"train/ratio_max": ratio, "train/grad_norm": [(1, 9.0)]})
    assert verdicts.Arm("v", [rd]).by_seed(drift) == {7: pytest.approx(2.0)}
    assert drift.unit == "ratio" and drift.measure_text == "mean train/ratio_max over steps 2-3"
    # grad_norm stays the same mean, of train/grad_norm
    assert verdicts.Arm("v", [rd]).by_seed(finding("g", "grad_norm", "lower")) == {7: 9.0}


def test_drift_declared_as_a_series_is_tested_like_any_measure():
    base, reuse = [], []
    for seed in range(3):
        ratio = [(s, 1.2 + 0.01 * seed + (0.5 if s > 10 else 0.0)) for s in range(1, 21)]
        base.append(run(seed, seed, config(), [(0, 0.2, 64), (20, 0.5, 64)], **{"train/ratio_max": ratio}))
        drifted = [(s, v + 1.0 + 0.02 * seed) for s, v in ratio]
        reuse.append(
            run(10 + seed, seed, config(epochs=4), [(0, 0.2, 64), (20, 0.4, 64)], **{"train/ratio_max": drifted})
        )
    late = finding("late", "series", "higher", curve="train/ratio_max", steps=(11, 20))
    (result,) = verdicts.evaluate(table({"base": base, "reuse": reuse}), [late], {}, {})
    assert result.variant_values == pytest.approx([1.2 + 0.5 + 1.0 + 0.03 * s for s in range(3)])
    assert result.diff.diff == pytest.approx(1.02) and result.verdict == "reproduced"
    assert result.problem_level is None and not result.robustness  # no problem has a share in a series


SPEC = """baseline: a
variants:
  a: {lr: 1.0e-4}
  b: {lr: 1.0e-3}
findings:
  - {id: f, claim: c, variant: b, expect: lower, testable: {rule: length_cv, at_least: 0.15}, """


@pytest.mark.parametrize(
    "keys, message",
    [
        ("measure: auc, axis: wall}", "axis 'wall' is not one of: step, update, rollout, cpu_second"),
        ("measure: plateau, axis: update}", "'axis' belongs to the speed measures, auc and steps_to_share"),
        ("measure: series}", "measure series needs 'curve'"),
        ("measure: series, curve: eval/accuracy}", "curve 'eval/accuracy' is not a per-step series"),
        ("measure: series, curve: train/drift}", "curve 'train/drift' is not a per-step series"),
        ("measure: plateau, steps: [1, 5]}", "'steps' belongs to measure: series"),
        ("measure: series, curve: train/ratio_max, steps: [5, 1]}", "steps must be [first, last]"),
        ("measure: series, curve: train/ratio_max, steps: [0, 5]}", "steps must be [first, last]"),
        ("measure: series, curve: train/ratio_max, steps: 5}", "steps must be [first, last]"),
    ],
)
def test_bad_axis_and_series_keys_are_one_line(tmp_path, keys, message):
    path = tmp_path / "abl.yaml"
    path.write_text(SPEC + keys + "\n")
    with pytest.raises(UserError) as err:
        ablation(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_an_equivalence_on_a_series_has_its_margin_in_its_unit_and_no_ceiling():
    base, reuse = [], []
    for seed in range(3):
        length = [(s, 40.0 + seed) for s in range(1, 11)]
        base.append(run(seed, seed, config(), [(0, 0.2, 64), (10, 0.5, 64)], **{"train/response_length": length}))
        longer = [(s, v + 0.1 * (seed - 1)) for s, v in length]
        reuse.append(run(10 + seed, seed, config(), [(0, 0.2, 64), (10, 0.5, 64)], **{"train/response_length": longer}))
    same = finding("len", "series", "same", curve="train/response_length", delta=2.0)
    (result,) = verdicts.evaluate(table({"base": base, "reuse": reuse}), [same], {}, {})
    # 40 tokens sits far above an accuracy's ceiling of 1: that check is for points only
    assert result.verdict == "reproduced: equivalent within ±2 tokens" and same.margin == "±2 tokens"


@pytest.mark.parametrize(
    "keys, message",
    [
        (
            "measure: series, curve: train/response_length}",
            "expect: same on tokens needs 'delta', its margin in tokens",
        ),
        ("measure: steps_to_share, share: 0.5, delta: 5, ceiling: 1}", "'ceiling' is for a measure in points"),
    ],
)
def test_an_equivalence_off_points_needs_its_own_margin_and_has_no_ceiling(tmp_path, keys, message):
    path = tmp_path / "abl.yaml"
    path.write_text(SPEC.replace("expect: lower", "expect: same") + keys + "\n")
    with pytest.raises(UserError) as err:
        ablation(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_keys_parse_and_the_defaults_are_the_old_format(tmp_path):
    lines = [
        "measure: auc, curve: train/reward, axis: rollout}",
        "measure: steps_to_share, share: 0.5, axis: cpu_second}",
        "measure: series, curve: train/response_length, steps: [1, 50]}",
        "measure: series, curve: time/cpu}",
        "measure: auc}",
    ]
    found = []
    for i, keys in enumerate(lines):
        path = tmp_path / f"abl{i}.yaml"
        path.write_text(SPEC + keys + "\n")
        found += F.read_findings(Path(path))[1]
    assert [(f.axis, f.steps, f.unit) for f in found] == [
        ("rollout", None, "reward"),
        ("cpu_second", None, "CPU-s"),
        ("step", (1, 50), "tokens"),
        ("step", None, "s"),
        ("step", None, "accuracy"),
    ]


def test_compare_reads_the_axis_and_the_series_from_the_registry(tmp_path):
    """A study recorded in a registry: compare loads time/cpu and the series its findings
    read (compare's own series leave them out), and its JSON record names the axis."""
    from grpoctl.analysis.compare import build_compare_table
    from grpoctl.config import config_diff, load_config, to_dict
    from grpoctl.registry import Registry
    from grpoctl.rules import config_hash
    from grpoctl.views.compare_records import records

    findings = [
        {"id": "cpu", "claim": "c", "variant": "reuse", "measure": "auc", "axis": "cpu_second", "expect": "lower"},
        {"id": "drift", "claim": "c", "variant": "reuse", "measure": "series", "curve": "train/ratio_max",
         "steps": [3, 4], "expect": "higher"},
    ]  # fmt: skip
    for f in findings:
        f["testable"] = {"rule": "rises_first", "in": "every_arm", "at_least": 0.0}
    spec = {"name": "s", "baseline": "base", "variants": {"base": {}, "reuse": {}}, "findings": findings}
    with Registry(str(tmp_path / "r.db")) as registry:
        sweep = registry.get_or_create_sweep("s", "ablation", spec)
        for variant, epochs in (("base", 1), ("reuse", 2)):
            for seed in range(2):
                cfg = load_config(None, [f"seed={seed}", f"loop.epochs_per_rollout_batch={epochs}", "loss=grpo_clip"])
                run = registry.create_run(
                    name=f"{variant}-{seed}", config=to_dict(cfg), config_diff=config_diff(cfg),
                    config_hash=config_hash(cfg), seed=seed, total_steps=4, group="s", variant=variant,
                )  # fmt: skip
                for step in range(5):
                    figures = {"time/cpu": epochs * (1.0 + 0.1 * seed), "train/ratio_max": epochs + step + seed}
                    if step:
                        registry.log_step(run.id, step, figures)
                    registry.add_eval(
                        run_id=run.id, step=step, n=64, accuracy=0.2 + 0.1 * step + 0.01 * seed, format_rate=1.0,
                        mean_response_length=10.0, data_hash="d", subset_hash="s", template_hash="t",
                        decoding={"greedy": True}, grader="exact",
                    )  # fmt: skip
                registry.set_status(run.id, "finished")
                registry.add_sweep_member(sweep.id, run.config_hash, variant, seed)
        table = build_compare_table(registry, ["s"])
    cpu, drift = table.findings
    # the cheapest run (base, seed 0) spent 4 CPU-s; the reuse arm, at 2 CPU-s a step, is cut after 2 steps
    assert cpu.budget == (0.0, 4.0)
    # each curve is linear in its CPU-seconds: its mean height over [0, 4] is its value at 2 CPU-s
    assert cpu.baseline_values == pytest.approx([0.4, 0.21 + 0.1 * 2 / 1.1])
    assert cpu.variant_values == pytest.approx([0.3, 0.21 + 0.1 * 2 / 2.2])
    assert drift.variant_values == pytest.approx([2 + 3.5, 2 + 3.5 + 1]) and drift.baseline_values == [4.5, 5.5]
    record = next(r for r in records(table) if r["variant"] == "reuse")["findings"]
    assert [(f["axis"], f["axis_budget"], f["steps"]) for f in record] == [
        ("cpu_second", [0.0, 4.0], None),
        ("step", None, [3, 4]),
    ]
