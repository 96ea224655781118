"""The mechanism each study is about, measured (analysis/mechanisms.py): each arm's
per-step train series over the last quarter of its ended runs, the results page's
`mechanisms:` section that prints them, and the report's drift and per-level figures,
on a registry built here: a study that reuses its rollouts (off-policy) and one that
does not."""

from __future__ import annotations

import copy
import functools
import statistics
import sys
from pathlib import Path

import pytest

from grpoctl import metrics
from grpoctl.analysis import mechanisms
from grpoctl.analysis.compare import build_compare_table
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.errors import UserError
from grpoctl.registry import Registry
from grpoctl.rules import config_hash

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import results_page  # noqa: E402

STEPS = 8  # the end window: steps 7-8


def entropy(seed: int, step: int, arm: str) -> float:
    return 1.0 - 0.1 * step + 0.01 * seed - (0.2 if arm == "reuse" else 0.0)


def ratio_max(step: int, arm: str) -> float:
    return 1.0 + 0.05 * step if arm == "reuse" else 1.0  # on-policy: exactly 1


@functools.cache
def arm_config(arm: str) -> tuple[dict, dict]:
    """The arm's resolved config and its diff from the defaults, built once (OmegaConf is slow)."""
    overrides = [f"loop.n_grpo_steps={STEPS}"] + (["loop.epochs_per_rollout_batch=2"] if arm == "reuse" else [])
    cfg = load_config(None, overrides)
    return to_dict(cfg), config_diff(cfg)


def add_run(registry: Registry, study: str, arm: str, seed: int, status: str = "finished", steps: int = STEPS):
    config, diff = (copy.deepcopy(part) for part in arm_config(arm))
    config["seed"] = diff["seed"] = seed
    run = registry.create_run(
        name=f"{study}-{arm}-s{seed}",
        config=config,
        config_diff=diff,
        config_hash=config_hash(config),
        seed=seed,
        total_steps=STEPS,
        group=study,
        variant=arm,
    )
    for step in range(1, steps + 1):
        registry.log_step(
            run.id,
            step,
            {
                metrics.TOKEN_ENTROPY: entropy(seed, step, arm) + (5.0 if status == "running" else 0.0),
                metrics.RESPONSE_LENGTH: 10.0 + step + seed,
                metrics.GRAD_NORM: 1.0,
                metrics.RATIO_MAX: ratio_max(step, arm),
                metrics.RATIO_MIN: 2.0 - ratio_max(step, arm),
                metrics.CLIP_FRACTION: 0.001 * step if arm == "reuse" else 0.0,
                metrics.level_accuracy(1): 0.5 + 0.05 * step,
                # level 2 drawn on even steps only: its window mean is step 8's value
                **({metrics.level_accuracy(2): 0.1 * seed} if step % 2 == 0 else {}),
            },
        )
    registry.set_status(run.id, status)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    path = tmp_path_factory.mktemp("mechanisms") / "registry.db"
    with Registry(str(path)) as registry:
        for seed in (0, 1):
            add_run(registry, "reuse-study", "on", seed)
            add_run(registry, "reuse-study", "reuse", seed)
            add_run(registry, "plain", "on", seed)
        add_run(registry, "reuse-study", "reuse", 2, status="running", steps=4)  # not ended: left out
        add_run(registry, "going", "on", 0, status="running", steps=4)
        yield registry


def test_the_end_window_is_the_last_quarter_of_a_runs_steps():
    assert mechanisms.end_window(100) == (76, 100)
    assert mechanisms.end_window(35) == (28, 35)
    assert mechanisms.end_window(2) == (2, 2)


def test_each_arm_is_its_ended_runs_means_over_the_window(registry):
    m = mechanisms.study_mechanism(registry, build_compare_table(registry, ["reuse-study"]))
    assert m is not None and m.off_policy and m.unended == 1
    ratios = [metrics.RATIO_MAX, metrics.RATIO_MIN, metrics.CLIP_FRACTION]
    levels = [metrics.level_accuracy(1), metrics.level_accuracy(2)]
    assert m.series == [metrics.TOKEN_ENTROPY, metrics.RESPONSE_LENGTH, metrics.GRAD_NORM, *ratios, *levels]
    arms = {arm.label: arm for arm in m.arms}
    reuse = arms["reuse"]
    assert reuse.seeds == 2 and reuse.windows == [(7, 8), (7, 8)]  # the running seed 2 is not counted
    per_seed = [statistics.fmean([entropy(seed, 7, "reuse"), entropy(seed, 8, "reuse")]) for seed in (0, 1)]
    assert reuse.end[metrics.TOKEN_ENTROPY].mean == pytest.approx(0.055)  # steps 7-8: 0.1 and 0.0, + 0.01 x seed
    assert reuse.end[metrics.TOKEN_ENTROPY].mean == pytest.approx(statistics.fmean(per_seed))
    assert reuse.end[metrics.TOKEN_ENTROPY].sd == pytest.approx(statistics.stdev(per_seed))
    assert reuse.start[metrics.TOKEN_ENTROPY].mean == pytest.approx(0.9 - 0.2 + 0.005)  # step 1
    assert reuse.start[metrics.RESPONSE_LENGTH].mean == pytest.approx(11.5)
    assert reuse.end[metrics.RATIO_MAX].mean == pytest.approx(1.375) and reuse.end[metrics.RATIO_MAX].sd == 0
    assert reuse.end[metrics.level_accuracy(2)].mean == pytest.approx(0.05)  # step 8 only: 0.0 and 0.1
    assert arms["on"].end[metrics.RATIO_MAX].mean == 1.0


def test_an_on_policy_study_has_no_drift_and_one_without_ended_runs_is_none(registry):
    m = mechanisms.study_mechanism(registry, build_compare_table(registry, ["plain"]))
    assert m is not None and not m.off_policy
    assert not set(mechanisms.DRIFT) & set(m.series) and metrics.TOKEN_ENTROPY in m.series
    assert not mechanisms.moved_off_policy([[(1, 1.0), (2, 1.0009)]])
    assert mechanisms.moved_off_policy([[(1, 1.0), (2, 0.998)]])
    only = mechanisms.study_mechanism(registry, build_compare_table(registry, ["reuse-study"]), [metrics.GRAD_NORM])
    assert only is not None and only.series == [metrics.GRAD_NORM]  # drift read for the rule, not shown


def test_the_pages_section_prints_the_registrys_numbers(registry):
    tables = {s: build_compare_table(registry, [s]) for s in ("reuse-study", "plain")}
    text = "\n".join(
        results_page.mechanisms_section(registry, tables, ["reuse-study", "plain", "later"], list(mechanisms.SERIES))
    )
    reuse, plain, later = text.split("### ")[1:]
    assert reuse.startswith("reuse-study: steps 7-8 (the last quarter), and step 1")
    assert "4 ended runs; 1 not ended yet, left out." in reuse
    head = next(line for line in reuse.splitlines() if line.startswith("| arm"))
    assert "| ratio_max | ratio_min | clip_fraction |" in head and "accuracy/L2 |" in head
    row = next(line for line in reuse.splitlines() if line.startswith("| `reuse`"))
    assert row.startswith("| `reuse` | 2 | 0.705 ± 0.0071 | 0.055 ± 0.0071 | 11.5 ± 0.7 | 18.0 ± 0.7 | 1 ± 0 |")
    assert "| 1.38 ± 0 |" in row  # ratio max over steps 7-8: 1.35, 1.4
    assert "on-policy throughout" in plain and "ratio_max" not in plain and "clip_fraction" not in plain
    assert later == "later\n\nNot run yet.\n"
    going = {"going": build_compare_table(registry, ["going"])}
    assert "### going\n\nNot run yet (1 run not ended yet)." in "\n".join(
        results_page.mechanisms_section(registry, going, ["going"], list(mechanisms.SERIES))
    )


def test_the_page_key_is_checked_and_defaults(tmp_path):
    def page(extra: str) -> dict:
        path = tmp_path / "page.yaml"
        path.write_text(f"name: p\nregistry: r.db\nout: o\nstudies: []\n{extra}")
        return results_page.read_page(path)

    assert "mechanisms" not in page("")
    assert page("mechanisms: {}\n")["mechanisms"] == {"series": list(mechanisms.SERIES), "level_plots": []}
    chosen = page("mechanisms:\n  series: [train/grad_norm, train/accuracy/L*]\n  level_plots: [s]\n")
    assert chosen["mechanisms"] == {"series": [metrics.GRAD_NORM, mechanisms.LEVELS], "level_plots": ["s"]}
    for bad, said in (
        ("mechanisms: {plots: [s]}\n", "mechanisms: a mapping of level_plots and series"),
        ("mechanisms: {series: [eval/accuracy]}\n", "'eval/accuracy' is not a per-step train metric"),
        ("mechanisms: {series: train/grad_norm}\n", "mechanisms: series is a list"),
    ):
        with pytest.raises(UserError, match=said):
            page(bad)


def test_an_on_policy_report_not_asked_for_levels_gets_neither_figure(registry, tmp_path):
    from grpoctl.views.report_view import _panel_plots

    assert _panel_plots(registry, build_compare_table(registry, ["plain"]), tmp_path, "plain", False) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_report_draws_drift_off_policy_and_levels_when_asked(registry, tmp_path):
    from grpoctl.views import report_plots
    from grpoctl.views.report_view import _panel_plots

    reuse = build_compare_table(registry, ["reuse-study"])
    assert _panel_plots(registry, reuse, tmp_path, "r", level_accuracy=False) == [report_plots.DRIFT_PLOT]
    plain = build_compare_table(registry, ["plain"])
    assert _panel_plots(registry, plain, tmp_path, "plain", level_accuracy=True) == [report_plots.LEVEL_PLOT]
    for filename, _ in (report_plots.DRIFT_PLOT, report_plots.LEVEL_PLOT):
        data = (tmp_path / filename).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 150_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accuracy_by_level.png", "drift.png"]
