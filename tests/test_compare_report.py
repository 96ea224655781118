"""`compare` and `report` on a registry built here: an ablation with a healthy variant
(two seeds), one that collapses and is stopped as diverged, and one that failed."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from statistics import median

import pytest
from cli import Result, invoke
from conftest import drop_pg_database, fresh_pg_database
from sqlalchemy import update

from grpoctl.analysis.compare import build_compare_table
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.registry import Registry, Run
from grpoctl.registry.models import utcnow
from grpoctl.registry.outcomes import encode as encode_outcomes
from grpoctl.rules import config_hash
from grpoctl.views import compare_view as tables
from grpoctl.views.report_view import write_report

ROOT = Path(__file__).resolve().parents[1]
N_EVAL = 1024
DECODING = {"greedy": True, "max_tokens": 32}


def make_run(
    registry,
    name,
    overrides,
    group="abl",
    variant=None,
    steps=20,
    status="finished",
    error=None,
    collapse_at=None,
    reward_top=0.7,
    decoding=DECODING,
    subset_hash="s1",
    logged=None,
    grader="exact",
):
    """A run whose metrics follow a learning curve, or collapse from `collapse_at`; it
    stops after `logged` steps (all of them by default)."""
    cfg = load_config(None, overrides + [f"loop.n_grpo_steps={steps}"])
    run = registry.create_run(
        name=name,
        config=to_dict(cfg),
        config_diff=config_diff(cfg),
        config_hash=config_hash(cfg),
        seed=cfg.seed,
        total_steps=steps,
        group=group,
        variant=variant,
    )
    wiggle = 0.01 * (cfg.seed + 1)
    logged = steps if logged is None else logged
    for step in range(logged):
        broken = collapse_at is not None and step >= collapse_at
        t = step / max(steps - 1, 1)
        metrics = {
            "train/reward": 0.0 if broken else 0.3 + (reward_top - 0.3) * t + (wiggle if step % 2 else -wiggle),
            "train/token_entropy": 0.02 if broken else 1.0 - 0.4 * t,
            "train/response_length": 32.0 if broken else 14.0 + (step % 3),
            "train/response_clip_fraction": 1.0 if broken else 0.01,
            "train/grad_norm": 0.5 + 0.1 * (step % 2),
            "time/step": 1.0 + 0.1 * step,
            "time/rollout_tokens_per_s": 2000.0 + 10 * step,
            "time/train_tokens_per_s": 9000.0 - 10 * step,
            "mem/peak": 500.0 + step,
        }
        registry.log_step(run.id, step, metrics)
        if step % 5 == 0 or step == logged - 1:
            accuracy = 0.0 if broken else round(0.35 + (reward_top - 0.35) * t, 4)
            registry.log_step(run.id, step, {"eval/accuracy": accuracy})
            registry.add_eval(
                run_id=run.id,
                step=step,
                n=N_EVAL,
                accuracy=accuracy,
                format_rate=0.9,
                mean_response_length=14.0,
                data_hash="d1",
                subset_hash=subset_hash,
                template_hash="t1",
                decoding=decoding,
                grader=grader,
            )
    registry.set_status(run.id, status, error=error)
    return cfg, run


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db(request, tmp_path_factory):
    """The registry these tests read, built once per backend."""
    if request.param == "sqlite":
        path = str(tmp_path_factory.mktemp("compare") / "registry.db")
    else:
        admin = request.getfixturevalue("pg_admin_url")
        path = fresh_pg_database(admin)
        request.addfinalizer(lambda: drop_pg_database(admin, path))
    with Registry(str(path)) as registry:
        sweep = registry.get_or_create_sweep("abl", "ablation", {"file": "experiments/abl.yaml"})
        runs = [
            make_run(registry, "abl-good-s0", ["seed=0"], variant="good"),
            make_run(registry, "abl-good-s1", ["seed=1"], variant="good", reward_top=0.66),
            make_run(
                registry,
                "abl-hot-s0",
                ["optimizer.lr=1e-3"],
                variant="hot",
                collapse_at=4,
                status="diverged",
                error="non-finite loss at step 20",
            ),
            make_run(
                registry,
                "abl-broken-s0",
                ["loss.loss_type=no_baseline"],
                variant="broken",
                logged=3,
                status="failed",
                error="RuntimeError: CUDA out of memory\nTraceback...",
            ),
        ]
        for _cfg, run in runs:
            registry.add_sweep_member(sweep.id, run.config_hash, run.variant, run.seed)
        # A later `grpoctl eval` of a checkpoint on other data, linked to the run: not its curve.
        good = runs[0][1]
        registry.add_eval(
            run_id=good.id,
            step=19,
            checkpoint_path="/ckpt/step-19",
            n=200,
            accuracy=0.01,
            format_rate=0.0,
            mean_response_length=31.0,
            data_hash="gsm8k",
            subset_hash="s9",
            template_hash="t1",
            decoding=DECODING,
            grader="exact",
        )
        # Another group, evaluated differently: sampled decoding, another subset.
        make_run(registry, "other-a", ["seed=5"], group="other", variant="a")
        make_run(
            registry,
            "other-b",
            ["seed=6", "optimizer.lr=1e-4"],
            group="other",
            variant="b",
            decoding={"greedy": False, "temperature": 1.0},
            subset_hash="s2",
            status="running",
        )
        with registry.engine.begin() as conn:  # other-b stopped heartbeating an hour ago
            conn.execute(update(Run).where(Run.name == "other-b").values(heartbeat_at=utcnow() - timedelta(hours=1)))
    return path


@pytest.fixture
def registry(db):
    with Registry(str(db)) as registry:
        yield registry


def grpoctl(*args: str) -> Result:
    return invoke(*args, cwd=ROOT)


def test_one_row_per_variant_with_seeds_folded(registry):
    table = build_compare_table(registry, ["abl"])
    rows = {r.label: r for r in table.rows}
    assert list(rows) == ["good", "hot", "broken"]
    assert set(table.keys) == {"optimizer.lr", "loss.loss_type"} and table.keys["optimizer.lr"] == "lr"
    good, hot, broken = rows["good"], rows["hot"], rows["broken"]
    assert [rd.run.name for rd in good.runs] == ["abl-good-s0", "abl-good-s1"]
    assert good.best and not hot.best and not broken.best
    final = good.values["final_acc"]
    assert final.k == 2 and final.mean == pytest.approx((0.7 + 0.66) / 2)
    assert final.sd == pytest.approx(math.sqrt(2 * 0.02**2))
    assert good.values["best_step"].mean == 19
    # A single run carries the eval's binomial standard error. hot collapsed at step 4: its best
    # eval after training began is 0 at step 5; the untrained step-0 eval (0.35) is no one's best.
    assert hot.values["best_acc"].mean == 0.0 and hot.values["best_step"].mean == 5
    p = good.runs[0].evals[-1][1]
    assert rows["broken"].values["best_step"].mean > 0  # its only trained eval, not step 0
    assert good.values["best_acc"].k == 2 and good.values["best_acc"].mean == pytest.approx((0.7 + 0.66) / 2)
    assert p == pytest.approx(0.7)
    assert hot.values["final_acc"].mean == 0.0
    assert hot.status == "diverged" and broken.status == "failed"
    assert {f.split("@")[0] for f in hot.flags} >= {"entropy collapse", "length blow-up", "flat reward", "diverged"}
    assert "entropy collapse@4" in hot.flags
    assert good.flags == [] and table.warnings == []
    assert good.values["s_per_step"].mean == pytest.approx(median(1.0 + 0.1 * s for s in range(20)))
    assert broken.values["s_per_step"].mean == pytest.approx(1.1)  # median of an odd count
    assert good.values["peak_mem"].mean == 519.0
    # throughput: the median over a run's steps, folded over seeds like the rest
    assert good.values["rollout_tok_s"].mean == pytest.approx(median(2000.0 + 10 * s for s in range(20)))
    assert broken.values["train_tok_s"].mean == pytest.approx(9000.0 - 10)  # median of steps 0-2
    headers = dict(table.columns)
    assert headers["rollout_tok_s"] == "rollout tok/s" and headers["train_tok_s"] == "train tok/s"


def test_at_step_and_metric(registry):
    table = build_compare_table(registry, ["abl"], at_step=5)
    rows = {r.label: r for r in table.rows}
    assert rows["hot"].values["final_acc"].mean == 0.0
    assert rows["broken"].values["final_acc"].mean == pytest.approx(0.35 + 0.35 * 2 / 19, abs=1e-4)  # step 2
    assert "best_acc" not in rows["good"].values and ("final_acc", "acc@5") in table.columns
    by_reward = build_compare_table(registry, ["abl"], metric="train/reward")
    assert by_reward.rank_by == "metric" and [r.label for r in by_reward.rows if r.best] == ["good"]
    by_grad = build_compare_table(registry, ["abl-good-s0", "abl-hot-s0"], metric="train/grad_norm")
    assert len([r for r in by_grad.rows if r.best]) == 1  # lower is better for grad norm


def test_markdown_table_matches_the_data(registry):
    table = build_compare_table(registry, ["abl"])
    lines = [line for line in tables.markdown(table).splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {}
    for line in lines[2:]:
        row = dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
        cells[row["variant"]] = row
    assert head[:5] == ["best", "variant", "loss_type", "lr", "seeds"]
    assert cells["good"]["best"] == "★" and cells["hot"]["best"] == ""
    # Every ± says what it is: the sd over a row's seeds, or one eval's standard error.
    assert cells["good"]["final acc"] == "0.680 ± 0.028 sd" and cells["good"]["seeds"] == "2"
    # hot's best after step 0 is a 0 (it collapsed at step 4): the binomial SE of 0 is 0
    assert cells["hot"]["best acc"] == "0.000 ± 0.000 SE" and cells["hot"]["lr"] == "1e-3"
    assert cells["broken"]["loss_type"] == "no_baseline" and cells["broken"]["status"] == "failed"
    assert "entropy collapse@4" in cells["hot"]["health"]


def test_evals_done_differently_are_warned_about_and_stale_is_shown(registry):
    table = build_compare_table(registry, ["other"])
    assert len(table.warnings) == 2
    decoding, subset = table.warnings
    assert decoding.startswith("runs were evaluated with different decoding [expected: eval varies]") is False
    assert "different decoding" in decoding and "other-a" in decoding and "other-b" in decoding
    assert "different subset hash" in subset and "\n" not in subset
    assert {r.label: r.status for r in table.rows} == {"a": "finished", "b": "stale"}


def test_a_study_graded_under_two_normalization_versions_is_warned_about(tmp_path):
    # What evals.on_set.eval_row stores: the grader and its normalization version, which
    # changes what counts as right (grpoctl-3: issue 17's separators, relations, \mathrm).
    old, new = "math-verify 0.9.0 (grpoctl-2)", "math-verify 0.9.0 (grpoctl-3)"
    with Registry(str(tmp_path / "registry.db")) as registry:
        make_run(registry, "mix-a", ["seed=0"], group="mix", variant="a", steps=6, grader=old)
        make_run(registry, "mix-b", ["seed=0", "optimizer.lr=1e-4"], group="mix", variant="b", steps=6, grader=new)
        warnings = build_compare_table(registry, ["mix"]).warnings
        assert len(warnings) == 1 and warnings[0].startswith("runs were evaluated with different grader: ")
        assert f"{old} (mix-a)" in warnings[0] and f"{new} (mix-b)" in warnings[0]
        make_run(registry, "same-a", ["seed=0"], group="same", variant="a", steps=6, grader=new)
        make_run(registry, "same-b", ["seed=0", "optimizer.lr=1e-4"], group="same", variant="b", steps=6, grader=new)
        assert build_compare_table(registry, ["same"]).warnings == []


def test_runs_by_ref(registry):
    table = build_compare_table(registry, ["abl-good-s0", "abl-hot"])  # a name, a unique prefix
    assert [r.label for r in table.rows] == ["good", "hot"] and table.title == "abl-good-s0, abl-hot"
    # Same config but the seed: one variant, whatever the runs were called.
    table = build_compare_table(registry, ["abl-good-s0", "other-a"])
    assert [(r.label, len(r.runs)) for r in table.rows] == [("abl-good-s0", 2)]


@pytest.mark.slow
def test_cli_json_and_csv_parse_and_stay_clear_of_torch(db, tmp_path):
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['grpoctl', 'compare', 'abl', '--db', {str(db)!r}, '--format', 'json']\n"
        "try:\n    runpy.run_module('grpoctl', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'pandas', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "from grpoctl.views.report_view import write_report\n"
        "from grpoctl.registry import Registry\n"
        f"write_report(Registry({str(db)!r}), 'abl', {str(tmp_path)!r})\n"
        "print('REPORT TORCH', 'torch' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "HEAVY []" in out.stderr and "REPORT TORCH False" in out.stderr, out.stderr
    payload = json.loads(out.stdout)
    rows = {r["variant"]: r for r in payload["rows"]}
    assert rows["good"]["best"] and rows["good"]["runs"] == ["abl-good-s0", "abl-good-s1"]
    assert rows["good"]["final_acc"] == pytest.approx(0.68) and rows["good"]["final_acc_sd"] > 0
    assert rows["hot"]["status"] == "diverged" and "entropy collapse@4" in rows["hot"]["health"]

    out = grpoctl("compare", "abl", "--db", str(db), "--format", "csv")
    assert out.returncode == 0, out.stderr
    records = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["variant"] for r in records] == ["good", "hot", "broken"]
    # hot: its best eval after step 0 (the untrained 0.35 is no one's best) is a 0
    assert float(records[1]["best_acc"]) == 0.0 and records[0]["runs"] == "abl-good-s0;abl-good-s1"


@pytest.mark.parametrize(
    "args, message",
    [
        (["compare", "nosuch"], "no sweep, group or run named 'nosuch'"),
        (["compare", "abl", "--format", "xml"], "--format 'xml' is not one of"),
        (["report", "nosuch"], "no sweep, group or run named 'nosuch'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(db, args, message):
    out = grpoctl(*args, "--db", str(db))
    assert out.returncode == 2, out
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and message in out.stderr


@pytest.mark.slow
def test_report_writes_markdown_and_readable_plots(registry, tmp_path):
    path = write_report(registry, "abl", tmp_path / "rep")
    text = path.read_text()
    for heading in (
        "# abl",
        "## What varied",
        "## What was shared",
        "## Results",
        "## Curves",
        "## Health",
        "## Runs that did not finish",
    ):
        assert heading in text, heading
    assert "- `optimizer.lr`: 3e-4, 1e-3\n" in text
    assert "- `loss.loss_type`: grpo_clip, no_baseline\n" in text
    assert "- seeds: 0, 1 (folded into mean ± sd per variant)" in text
    assert "## What was shared\n\n- `loop.n_grpo_steps` = 20\n" in text
    assert "| ★ | good |" in text
    # Who leads, by how much; without a baseline nothing can say it is more than noise, so no "winner".
    assert (
        "**Ahead by final eval accuracy:** good with 0.680, 29.3 points ahead of broken (0.387). "
        "No baseline is named, so nothing says whether this lead is more than noise."
    ) in text
    assert "**Winner" not in text
    assert "## Against the baseline\n\nno baseline to compare against: name one with --baseline VARIANT.\n" in text
    assert "**abl-hot-s0** (hot): entropy collapse from step 4" in text
    assert "**abl-broken-s0**: failed at step 2 of 20: `RuntimeError: CUDA out of memory`" in text
    assert "non-finite loss at step 20" in text

    import matplotlib.image

    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    assert pngs == [
        "eval_accuracy.png",
        "grad_norm.png",
        "response_length.png",
        "token_entropy.png",
        "train_reward.png",
    ]
    for name in pngs:
        data = (path.parent / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path.parent / name)
        assert image.shape[0] > 300 and image.shape[1] > 600
        assert f"]({name})" in text


@pytest.mark.slow
def test_report_calls_a_close_race_within_noise(tmp_path, db_url):
    with Registry(db_url) as registry:
        make_run(registry, "a", ["seed=0"], group="close", variant="a", reward_top=0.70)
        make_run(registry, "b", ["optimizer.lr=1e-4"], group="close", variant="b", reward_top=0.69)
        text = write_report(registry, "close", tmp_path / "rep", baseline="a", last_k=1).read_text()
    # one seed each: only the two runs are compared: no winner, no ★, though a is ahead by a point
    assert "**No winner:** with one seed per arm only the runs are compared" in text and "| ★ |" not in text
    assert "**Ahead by final eval accuracy:** a with 0.700, 1.0 points ahead of b (0.690). Within noise" in text
    assert "- **b** against **a** (final acc, one seed each): 0.690 (Wilson 95% CI " in text
    assert ": **these two runs: no difference shown**. With one seed per arm and no per-problem outcomes" in text


# --------------------------------------------------------------------------- against a baseline


def eval_run(registry, sweep, name, variant, overrides, evals, n=512, group="study", outcomes=None, subset="s1"):
    """A finished run with only evals: (step, accuracy) pairs of `n` problems each; `outcomes`:
    per step, each problem's 0/1 (then its accuracy is theirs), with `subset` its subset_hash."""
    cfg = load_config(None, overrides + ["loop.n_grpo_steps=30"])
    run = registry.create_run(
        name=name,
        config=to_dict(cfg),
        config_diff=config_diff(cfg),
        config_hash=config_hash(cfg),
        seed=cfg.seed,
        total_steps=30,
        group=group,
        variant=variant,
    )
    for step, accuracy in evals:
        registry.log_step(run.id, step, {"train/reward": accuracy})
        right = (outcomes or {}).get(step)
        registry.add_eval(
            run_id=run.id,
            step=step,
            n=n if right is None else len(right),
            accuracy=accuracy if right is None else sum(right) / len(right),
            format_rate=1.0,
            mean_response_length=10.0,
            data_hash="d1",
            subset_hash=subset,
            template_hash="t1",
            decoding=DECODING,
            grader="exact",
            outcomes=None if right is None else encode_outcomes(right, 1, [str(1 + i % 2) for i in range(len(right))]),
        )
    registry.set_status(run.id, "finished")
    if sweep is not None:
        registry.add_sweep_member(sweep.id, run.config_hash, variant, cfg.seed)
    return run


# Per seed, the mean of its last 3 evals; `peak` above it is its best-so-far.
STUDY = {  # variant: (lr, per-seed means, peak)
    "base": ("1e-4", [0.62, 0.65, 0.60], 0.01),
    "better": ("3e-4", [0.70, 0.74, 0.66], 0.05),  # the worked example against base
    "close": ("2e-4", [0.63, 0.61, 0.66], 0.03),
    "lonely": ("5e-4", [0.80], 0.0),  # one seed against three: no test
}
BASE8 = [0.60, 0.62, 0.58, 0.61, 0.63, 0.59, 0.60, 0.62]
WIDE8 = [0.64, 0.66, 0.61, 0.65, 0.67, 0.63, 0.62, 0.66]


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("study") / "registry.db"
    with Registry(str(path)) as registry:
        sweep = registry.get_or_create_sweep("study", "ablation", {"file": "study.yaml", "baseline": "base"})
        for variant, (lr, means, peak) in STUDY.items():
            for seed, m in enumerate(means):
                # The step-0 eval (before training) never joins the mean of the last evals.
                evals = [(0, 0.3), (10, m + peak), (20, m - peak), (29, m)]
                eval_run(registry, sweep, f"{variant}-s{seed}", variant, [f"seed={seed}", f"optimizer.lr={lr}"], evals)
        wide = registry.get_or_create_sweep("wide", "ablation", {"file": "wide.yaml", "baseline": "base8"})
        for variant, lr, finals in (("base8", "1e-4", BASE8), ("wide8", "3e-4", WIDE8)):
            for seed, final in enumerate(finals):
                eval_run(
                    registry,
                    wide,
                    f"{variant}-s{seed}",
                    variant,
                    [f"seed={seed}", f"optimizer.lr={lr}"],
                    [(0, 0.3), (29, final)],
                    group="wide",
                )
        # The same two arms as "study"'s base and better, but run with other seeds: Welch's t.
        shifted = registry.get_or_create_sweep("shifted", "ablation", {"file": "shifted.yaml", "baseline": "base"})
        for variant, lr, first in (("base", "1e-4", 0), ("better", "3e-4", 3)):
            means, peak = STUDY[variant][1], STUDY[variant][2]
            for i, m in enumerate(means):
                evals = [(0, 0.3), (10, m + peak), (20, m - peak), (29, m)]
                seed = first + i
                eval_run(
                    registry,
                    shifted,
                    f"shifted-{variant}-s{seed}",
                    variant,
                    [f"seed={seed}", f"optimizer.lr={lr}"],
                    evals,
                    group="shifted",
                )
        # One seed each, 1000 problems: 700 and 660 right at the end.
        eval_run(registry, None, "solo-a", "a", ["seed=0"], [(0, 0.3), (20, 0.5), (29, 0.700)], n=1000, group="solo")
        eval_run(
            registry,
            None,
            "solo-b",
            "b",
            ["seed=0", "optimizer.lr=1e-4"],
            [(0, 0.3), (20, 0.8), (29, 0.660)],
            n=1000,
            group="solo",
        )
        # Per-problem outcomes (40 problems): "probs" pairs seeds 0-2 problem by problem, but its
        # "moved" arm was graded on another subset; "duo" has one run each.
        probs = registry.get_or_create_sweep("probs", "ablation", {"file": "probs.yaml", "baseline": "base"})
        for variant, lr, subset in (("base", "1e-4", "s1"), ("tuned", "3e-4", "s1"), ("moved", "2e-4", "s2")):
            for seed in range(3):
                right = {step: problem_outcomes(variant, seed, step) for step in OUTCOME_STEPS}
                evals = [(step, 0.0) for step in OUTCOME_STEPS]
                overrides = [f"seed={seed}", f"optimizer.lr={lr}"]
                eval_run(registry, probs, f"probs-{variant}-s{seed}", variant, overrides, evals, group="probs",
                         outcomes=right, subset=subset)  # fmt: skip
        for variant, lr in (("base", "1e-4"), ("tuned", "3e-4")):
            right = {step: problem_outcomes(variant, 0, step) for step in OUTCOME_STEPS}
            evals = [(step, 0.0) for step in OUTCOME_STEPS]
            eval_run(registry, None, f"duo-{variant}", variant, ["seed=0", f"optimizer.lr={lr}"], evals, group="duo",
                     outcomes=right)  # fmt: skip
    return path


OUTCOME_STEPS = (0, 10, 20, 29)
PROBLEMS = 40


def problem_outcomes(variant: str, seed: int, step: int) -> list[int]:
    """0/1 per problem: the baseline gets about 3 in 5 right; "tuned" also gets every 4th
    problem from step 10 on, and loses every 9th; "moved" gets every (6 + seed)th."""
    right = [int((i + seed + step) % 5 < 3) for i in range(PROBLEMS)]
    if variant == "tuned" and step > 0:
        right = [1 if i % 4 == 0 else 0 if i % 9 == 0 else r for i, r in enumerate(right)]
    if variant == "moved" and step > 0:
        right = [1 if i % (6 + seed) == 0 else r for i, r in enumerate(right)]
    return right


def compare_json(db: Path, *args: str) -> tuple[dict, dict]:
    out = grpoctl("compare", *args, "--db", str(db), "--format", "json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    return payload, {r["variant"]: r for r in payload["rows"]}


def test_compare_json_sets_each_variant_against_the_spec_baseline(study_db):
    payload, rows = compare_json(study_db, "study")
    summary = payload["baseline"]
    assert summary["variant"] == "base" and summary["from"] == "the spec" and summary["last_k"] == 3
    assert summary["correction"] == "holm" and summary["comparisons"] == 2  # lonely is not tested
    assert summary["tests"]["paired"] == "paired t (seeds)"
    base, better, close, lonely = rows["base"], rows["better"], rows["close"], rows["lonely"]
    assert base["verdict"] == "baseline" and base["diff"] is None and base["acc_last_k"] == pytest.approx(0.6233333)
    # Seeds 0-2 in both arms: paired seed by seed; no per-problem outcomes were recorded.
    assert better["vs_baseline"] == "base" and better["diff_test"] == "paired" and better["pairs"] == 3
    assert better["diff_test_name"] == "paired t (seeds)" and better["problem_level"] == "problem level: not recorded"
    # scipy.stats.ttest_rel([.70, .74, .66], [.62, .65, .60]): pvalue, confidence_interval()
    assert better["diff"] == pytest.approx(0.07666666666666666, rel=1e-6)
    assert better["p_value"] == pytest.approx(0.012975526527388499, rel=1e-6)
    assert (better["diff_ci_low"], better["diff_ci_high"]) == pytest.approx(
        (0.03872083633069918, 0.11461249700263415), rel=1e-6
    )
    # scipy.stats.ttest_rel([.63, .61, .66], [.62, .65, .60])
    assert close["diff"] == pytest.approx(0.01, abs=1e-9)
    assert close["p_value"] == pytest.approx(0.7620845242845569, rel=1e-6)
    assert (close["diff_ci_low"], close["diff_ci_high"]) == pytest.approx(
        (-0.1142068855875166, 0.13420688558751662), rel=1e-6
    )
    # Holm over the two: 2 x 0.01298 = 0.02595 for the smaller, max(that, 0.762) for the other.
    assert better["p_holm"] == pytest.approx(0.025951053054776997, rel=1e-6)
    assert close["p_holm"] == pytest.approx(0.7620845242845569, rel=1e-6)
    assert better["verdict"] == "better" and close["verdict"] == "within noise"
    # Pairs needed: the smallest n whose paired t (df n - 1, noncentrality 0.0767 / (sd / sqrt(n)), sd of
    # the per-seed differences [.08, .09, .06] = 0.01528) reaches power 0.8: 3.
    assert (better["seeds_needed"], better["seeds_needed_capped"]) == (3, False)
    assert (close["seeds_needed"], close["seeds_needed_capped"]) == (100, True)  # 1 point: beyond reach
    # Best-so-far: per seed mean + peak, paired too; ttest_rel([.75, .79, .71], [.63, .66, .61])
    assert better["best_diff"] == pytest.approx(0.1166666666666667, rel=1e-6)
    assert (better["best_diff_ci_low"], better["best_diff_ci_high"]) == pytest.approx(
        (0.0787208363306992, 0.15461249700263419), rel=1e-6
    )
    assert better["best_diff_test"] == "paired t (seeds)"
    assert better["diff_bca_low"] is None  # 3 pairs: no bootstrap interval
    assert lonely["verdict"] == "untested" and lonely["p_value"] is None and lonely["p_holm"] is None
    assert "1 seed(s) against the baseline's 3" in lonely["comparison_note"]
    # Every existing key is still there.
    assert {
        "final_acc",
        "final_acc_sd",
        "final_acc_se",
        "best_acc",
        "best_step",
        "runs",
        "seeds",
        "status",
        "health",
        "best",
    } <= set(better)
    assert better["final_acc"] == pytest.approx(0.70)


def test_seeds_that_do_not_match_get_welchs_t(study_db):
    # The same numbers as "study"'s base and better, run with seeds 0-2 and 3-5: nothing pairs.
    payload, rows = compare_json(study_db, "shifted")
    better = rows["better"]
    assert better["diff_test"] == "welch" and better["diff_test_name"] == "Welch t (unmatched seeds)"
    assert better["pairs"] is None and better["problem_level"] is None
    # scipy.stats.ttest_ind([.70, .74, .66], [.62, .65, .60], equal_var=False): pvalue, confidence_interval()
    assert better["p_value"] == pytest.approx(0.05886876404903681, rel=1e-6)
    assert (better["diff_ci_low"], better["diff_ci_high"]) == pytest.approx(
        (-0.005026512043801765, 0.1583598453771351), rel=1e-6
    )
    assert better["verdict"] == "within noise"  # raw p 0.059 is no win
    # Seeds needed: smallest n with 1 - nct.cdf(t, 2n-2, nc) + nct.cdf(-t, 2n-2, nc) >= 0.8, where
    # t = t.ppf(0.975, 2n-2), nc = 0.0767 / sqrt((var(better) + var(base)) / 2) * sqrt(n/2): 0.887 at n = 5.
    assert (better["seeds_needed"], better["seeds_needed_capped"]) == (5, False)
    # MDE: brentq(lambda d: power(d, sd, 3, 3) - 0.8, ...) with power from the noncentral t
    # (tests/test_stats.py writes it out) and sd = sqrt((var(better) + var(base)) / 2) = 0.0334165627596057
    assert better["mde"] == pytest.approx(0.10261866414692998, rel=1e-6)
    # TOST at 3 points: ttest_ind([.70-.03, .74-.03, .66-.03], [.62, .65, .60], equal_var=False,
    # alternative="less").pvalue, the larger of the two one-sided p's
    assert better["tost_p"] == pytest.approx(0.9121896802430752, rel=1e-6) and better["tost_delta"] == 0.03
    # Best-so-far: ttest_ind([.75, .79, .71], [.63, .66, .61], equal_var=False)
    assert (better["best_diff_ci_low"], better["best_diff_ci_high"]) == pytest.approx(
        (0.03497348795619827, 0.19835984537713514), rel=1e-6
    )
    assert not any(r["best"] for r in rows.values())  # within noise: no winner
    out = grpoctl("compare", "shifted", "--db", str(study_db), "--format", "markdown")
    assert "Welch t (unmatched seeds): the arms' seeds do not match" in out.stdout


def test_compare_json_carries_mde_tost_and_the_family(study_db):
    payload, rows = compare_json(study_db, "study")
    better, close = rows["better"], rows["close"]
    # MDE of the paired t over 3 pairs: brentq on its power (noncentral t, df 2, noncentrality
    # effect / (sd / sqrt(3))), sd of the per-seed differences 0.0152752523165194
    assert better["mde"] == pytest.approx(0.049859088793768616, rel=1e-6)
    # Paired TOST at 3 points: max(ttest_rel([.70+.03, ...], base, alternative="greater").pvalue,
    # ttest_rel([.70-.03, ...], base, alternative="less").pvalue); its interval, ttest_rel's 90% one
    assert better["tost_p"] == pytest.approx(0.983045891539648, rel=1e-6) and better["tost_delta"] == 0.03
    assert (better["tost_ci_low"], better["tost_ci_high"]) == pytest.approx(
        (0.05091481440829816, 0.10241851892503513), rel=1e-6
    )
    assert better["tost_outcome"] is None  # 0.70 and 0.62: far from the ceiling
    assert close["tost_p"] > 0.05  # +1 point, but 3 seeds cannot show it is within 3
    # no findings declared in this sweep: no family, every comparison exploratory (unadjusted beyond the study)
    assert payload["baseline"]["family"] is None and better["family_p_holm"] is None
    assert better["exploratory"] is True and rows["base"]["exploratory"] is None and better["findings"] == []
    assert rows["lonely"]["mde"] is None and rows["lonely"]["tost_p"] is None


def _last_3(variant: str, seeds):
    """[seeds, problems]: each problem's mean over the last 3 evals (steps 10, 20, 29)."""
    import numpy as np

    return np.array([[np.mean(col) for col in zip(*(problem_outcomes(variant, s, t) for t in OUTCOME_STEPS[1:]), strict=True)] for s in seeds])  # fmt: skip


def test_recorded_outcomes_put_the_problems_in_the_paired_interval(study_db):
    import numpy as np

    from grpoctl.analysis import design, paired

    payload, rows = compare_json(study_db, "probs")
    tuned, moved = rows["tuned"], rows["moved"]
    expected = paired.two_level(_last_3("tuned", range(3)), _last_3("base", range(3)))
    assert tuned["diff_test"] == "paired+problems" and tuned["problem_level"] == "problem level: in the interval"
    assert tuned["diff_test_name"] == f"paired t (seeds) + problems, Satterthwaite df {expected.df:.1f}"
    assert (tuned["diff"], tuned["diff_ci_low"], tuned["diff_ci_high"], tuned["p_value"], tuned["df"]) == pytest.approx(
        (expected.diff, expected.low, expected.high, expected.p, expected.df), rel=1e-9
    )
    assert tuned["problem_var"] == pytest.approx(expected.problem_var) and tuned["problem_var"] > 0
    # learned / forgot by level (levels 1 and 2 alternate), on each arm's mean over its seeds
    mine, theirs = _last_3("tuned", range(3)).mean(axis=0), _last_3("base", range(3)).mean(axis=0)
    table = tuned["learned_forgot"]
    assert table == design.learned_forgot(mine, theirs, [str(1 + i % 2) for i in range(PROBLEMS)])
    assert table["all"]["learned"] == int(((mine > 0.5) & (theirs < 0.5)).sum()) > 0
    assert table["all"]["forgot"] == int(((mine < 0.5) & (theirs > 0.5)).sum()) > 0
    assert table["1"]["problems"] == table["2"]["problems"] == PROBLEMS // 2
    # graded on another subset: the problems are not paired, the seeds still are
    assert moved["diff_test"] == "paired" and moved["learned_forgot"] is None
    assert moved["problem_level"] == "problem level: not paired (the arms graded different problems)"
    assert moved["problems_not_paired"].startswith("per-problem outcomes not paired: the arms graded different")
    markdown = grpoctl("compare", "probs", "--db", str(study_db), "--format", "markdown").stdout
    assert "| variant | level | problems | learned | forgot | both right | both wrong | split |" in markdown
    assert f"| tuned | all | {PROBLEMS} | {table['all']['learned']} | {table['all']['forgot']} |" in markdown
    assert "- moved: per-problem outcomes not paired" in markdown
    terminal = grpoctl("compare", "probs", "--db", str(study_db)).stdout
    assert "learned / forgot against base, by level" in terminal
    assert np.isfinite(tuned["seed_var"])


@pytest.mark.slow
def test_a_report_carries_the_learned_forgot_table(study_db, tmp_path):
    with Registry(str(study_db)) as registry:
        text = write_report(registry, "probs", tmp_path / "rep").read_text()
    section = text.split("### Learned and forgot, problem by problem\n\n", 1)[1]
    assert section.startswith("| variant | level | problems | learned | forgot | both right | both wrong | split |")
    assert "| tuned | 1 | 20 |" in section and "| tuned | 2 | 20 |" in section
    assert "(paired t (seeds) + problems, Satterthwaite df" in text and "problem level: in the interval" in text


def test_one_run_each_with_outcomes_gets_mcnemar_about_the_two_runs(study_db):
    import scipy.stats

    payload, rows = compare_json(study_db, "duo", "--baseline", "base", "--last-k", "1")
    tuned = rows["tuned"]
    a, b = problem_outcomes("tuned", 0, 29), problem_outcomes("base", 0, 29)
    gained = sum(x == 1 and y == 0 for x, y in zip(a, b, strict=True))
    lost = sum(x == 0 and y == 1 for x, y in zip(a, b, strict=True))
    assert tuned["diff_test"] == "mcnemar" and tuned["diff_test_name"] == "McNemar exact (problems, one run each)"
    assert tuned["p_value"] == pytest.approx(scipy.stats.binomtest(gained, gained + lost).pvalue, rel=1e-12)
    assert tuned["diff"] == pytest.approx((gained - lost) / PROBLEMS)
    assert tuned["verdict"] in ("these two runs differ", "these two runs: no difference shown")
    assert tuned["verdict"] == (
        "these two runs differ" if tuned["p_holm"] < 0.05 else "these two runs: no difference shown"
    )
    assert tuned["learned_forgot"]["all"]["learned"] == gained and tuned["learned_forgot"]["all"]["forgot"] == lost
    assert tuned["seeds_needed"] is None and tuned["mde"] is None  # one run per arm: nothing to plan from


def test_last_k_and_another_baseline(study_db):
    payload, rows = compare_json(study_db, "study", "--baseline", "close", "--last-k", "1")
    assert payload["baseline"]["from"] == "--baseline" and payload["baseline"]["measure"] == "final acc"
    assert rows["close"]["verdict"] == "baseline" and rows["base"]["vs_baseline"] == "close"
    # The final evals are the same numbers as the last-3 means here, so base vs close mirrors close vs base.
    assert rows["base"]["diff"] == pytest.approx(-0.01, abs=1e-9)
    assert rows["base"]["p_value"] == pytest.approx(0.7620845242845569, rel=1e-6)
    _, rows = compare_json(study_db, "study", "--last-k", "2")  # steps 20 and 29: mean - peak / 2
    assert rows["better"]["acc_last_k"] == pytest.approx(0.70 - 0.05 / 2)
    _, rows = compare_json(study_db, "study", "--last-k", "4")  # the untrained step-0 eval stays out
    assert rows["better"]["acc_last_k"] == pytest.approx(0.70)


def test_bca_appears_from_eight_seeds_per_arm(study_db):
    payload, rows = compare_json(study_db, "wide")
    wide = rows["wide8"]
    # 8 pairs: ttest_rel(WIDE8, BASE8); bootstrap((WIDE8 - BASE8,), mean, method="BCa", rng=0)
    assert wide["diff_test"] == "paired" and wide["p_value"] == pytest.approx(2.5002640083871833e-06, rel=1e-6)
    assert (wide["diff_bca_low"], wide["diff_bca_high"]) == pytest.approx((0.02875, 0.04), rel=1e-6)
    assert wide["verdict"] == "better" and wide["p_holm"] == wide["p_value"]  # one comparison
    assert (wide["seeds_needed"], wide["seeds_needed_capped"]) == (3, False)


def test_one_seed_each_rests_on_eval_noise(study_db):
    payload, rows = compare_json(study_db, "solo", "--baseline", "a", "--last-k", "1")
    a, b = rows["a"], rows["b"]
    # scipy.stats.binomtest(700, 1000).proportion_ci(method="wilson"); the same for 660
    assert (a["acc_last_k_ci_low"], a["acc_last_k_ci_high"]) == pytest.approx(
        (0.6708761390827828, 0.7275931575229951), rel=1e-6
    )
    assert (b["acc_last_k_ci_low"], b["acc_last_k_ci_high"]) == pytest.approx(
        (0.6300773195897642, 0.6886981176948581), rel=1e-6
    )
    # chi2_contingency([[660, 340], [700, 300]], correction=False).pvalue; Newcombe from the Wilson limits
    assert b["diff_test"] == "two-proportion" and b["diff"] == pytest.approx(-0.04)
    assert b["diff_test_name"] == "two-proportion (one eval each)" and b["problem_level"] is None
    # about these two runs, never the arms: no better or worse
    assert b["p_value"] == pytest.approx(0.05518555099113409, rel=1e-6)
    assert b["verdict"] == b["scope"] == "these two runs: no difference shown"
    assert (b["diff_ci_low"], b["diff_ci_high"]) == pytest.approx(
        (-0.08070318347527537, 0.0008874214637380126), rel=1e-6
    )
    assert (
        b["comparison_note"]
        == "one seed per arm: this compares the two runs, not the arms; another seed may differ by more"
    )
    assert b["seeds_needed"] is None and b["best_diff"] == pytest.approx(0.8 - 0.7)
    out = grpoctl("compare", "solo", "--db", str(study_db), "--baseline", "a", "--last-k", "1", "--format", "markdown")
    assert (
        "| b | 1 | 0.660 [0.630, 0.689] Wilson CI | -0.040 [-0.081, +0.001] | 0.055 | 0.055 "
        "| two-proportion (one eval each) | these two runs: no difference shown |"
    ) in out.stdout
    assert "- b: one seed per arm: this compares the two runs, not the arms" in out.stdout
    assert "Newcombe's score interval and a two-proportion test" in out.stdout


def test_csv_carries_the_comparison_and_a_group_has_no_baseline_until_named(study_db):
    out = grpoctl("compare", "study", "--db", str(study_db), "--format", "csv")
    records = {r["variant"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert float(records["better"]["p_holm"]) == pytest.approx(0.025951053054776997, rel=1e-5)
    assert records["better"]["verdict"] == "better" and records["close"]["seeds_needed_capped"] == "True"
    payload, rows = compare_json(study_db, "solo")
    assert payload["baseline"] is None and rows["b"]["verdict"] is None
    assert payload["baseline_note"] == "no baseline to compare against: name one with --baseline VARIANT"
    table = grpoctl("compare", "solo", "--db", str(study_db))
    assert "no baseline to compare against" in table.stdout


@pytest.mark.slow
def test_scipy_only_when_there_is_something_to_test(study_db, db):
    """scipy.stats costs most of a second to import: compare without a baseline skips it,
    and with one still needs no torch."""
    code = (
        "import sys, runpy, io, contextlib\n"
        "sys.argv = ['grpoctl', 'compare', *sys.argv[1:], '--format', 'json']\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        runpy.run_module('grpoctl', run_name='__main__')\n"
        "    except SystemExit as exc:\n        assert not exc.code, exc.code\n"
        "print([m for m in ('scipy.stats', 'torch') if m in sys.modules])\n"
    )
    for args, loaded in ((["abl", "--db", str(db)], "[]"), (["study", "--db", str(study_db)], "['scipy.stats']")):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert out.stdout.strip() == loaded, out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--baseline", "nope"], "--baseline 'nope' is not one of the variants: base, better, close, lonely"),
        (["--last-k", "0"], "--last-k must be at least 1, got 0"),
    ],
)
def test_bad_comparison_options_are_one_line(study_db, args, message, tmp_path):
    for command in (["compare", "study"], ["report", "study", "-o", str(tmp_path / "rep")]):
        out = grpoctl(*command, *args, "--db", str(study_db))
        assert out.returncode == 2 and out.stderr == f"error: {message}\n", out.stderr
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_report_has_the_comparison_table_and_a_sentence_per_variant(study_db, tmp_path):
    with Registry(str(study_db)) as registry:
        text = write_report(registry, "study", tmp_path / "rep").read_text()
    section = text.split("## Against the baseline\n\n", 1)[1].split("## Curves", 1)[0]
    assert section.startswith("| variant | seeds | acc, mean of last 3 evals | Δ vs base (95% CI) | p | p Holm |")
    assert (
        "| better | 3 | 0.700 ± 0.040 sd | +0.077 [+0.039, +0.115] | 0.013 | 0.026 | paired t (seeds) | better | 3 |"
        in section
    )
    assert (
        "- **better** against **base** (acc, mean of last 3 evals, 3 vs 3 seeds): 0.700 against 0.623, "
        "+7.7 points, 95% CI +3.9 to +11.5 (paired t (seeds); problem level: not recorded), p = 0.013, 0.026 after "
        "Holm over 2: **better**. Seeds needed to resolve a difference this size (α 0.05, power 0.8, paired t "
        "(seeds)): about 3 pairs of seeds (this study has 3)."
    ) in section
    assert "A difference this close to zero would need more than 100 pairs of seeds to resolve" in section
    with Registry(str(study_db)) as registry:
        shifted = write_report(registry, "shifted", tmp_path / "shifted").read_text()
    assert (
        "+7.7 points, 95% CI −0.5 to +15.8 (Welch t (unmatched seeds)), p = 0.059, 0.059 after Holm over 1: "
        "**within noise**. Seeds needed to resolve a difference this size (α 0.05, power 0.8, Welch t (unmatched "
        "seeds)): about 5 seeds per arm (this study has 3)."
    ) in shifted
    assert "- **lonely** against **base**: not tested: 1 seed(s) against the baseline's 3" in section
    assert "(bands: ± 1 sd over seeds)" not in section  # a plot title, not text


def test_json_is_strict_json_with_null_where_a_number_is_not_finite(tmp_path):
    path = str(tmp_path / "registry.db")
    with Registry(path) as registry:
        _, run = make_run(registry, "nan-a", ["seed=0"], group="nan", variant="a", steps=3)
        registry.log_step(run.id, 3, {"train/grad_norm": float("nan"), "train/response_length": float("inf")})
    out = grpoctl("compare", "nan", "--db", path, "--format", "json")
    assert out.returncode == 0, out.stderr

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    row = json.loads(out.stdout, parse_constant=refuse)["rows"][0]
    assert row["grad_norm"] is None and row["length"] is None  # the last values: NaN and inf
    assert row["final_acc"] == pytest.approx(0.7) and row["entropy"] == pytest.approx(0.6)


@pytest.mark.slow
def test_a_run_shared_by_two_studies_carries_each_studys_label(tmp_path):
    # A sweep reuses a finished run with its config hash: two studies with a common
    # baseline run it once. Each study's rows must use its own label for it, or the
    # second study's baseline has "no runs" and nothing is compared.
    path = tmp_path / "registry.db"
    with Registry(str(path)) as registry:
        first = registry.get_or_create_sweep("first", "ablation", {"file": "a.yaml", "baseline": "with_std"})
        second = registry.get_or_create_sweep("second", "ablation", {"file": "b.yaml", "baseline": "mean"})
        for seed, m in enumerate([0.62, 0.65, 0.60]):
            run = eval_run(
                registry,
                first,
                f"first-with_std-s{seed}",
                "with_std",
                [f"seed={seed}"],
                [(0, 0.3), (29, m)],
                group="first",
            )
            registry.add_sweep_member(second.id, run.config_hash, "mean", seed)  # the same config
        for seed, m in enumerate([0.70, 0.74, 0.66]):
            eval_run(
                registry,
                second,
                f"second-token-s{seed}",
                "token",
                [f"seed={seed}", "loss.length_normalization=token"],
                [(0, 0.3), (29, m)],
                group="second",
            )
        table = build_compare_table(registry, ["second"])
    assert sorted(r.label for r in table.rows) == ["mean", "token"]
    assert table.versus is not None and table.versus.baseline == "mean"
    token = next(v for v in table.versus.rows if v.label == "token")
    assert token.diff is not None and token.diff.diff == pytest.approx(0.0766667, abs=1e-6)


def test_the_star_and_the_winner_follow_the_verdicts(study_db, tmp_path):
    # run with other seeds, "better" leads by 7.7 points but Welch's p is 0.059: within noise, no star
    _, rows = compare_json(study_db, "shifted")
    assert not any(r["best"] for r in rows.values())
    # wide8 is better than base8 beyond noise (paired, p 2.5e-6): it is the winner and the ★
    _, rows = compare_json(study_db, "wide")
    assert rows["wide8"]["best"] and not rows["base8"]["best"]
    with Registry(str(study_db)) as registry:
        text = write_report(registry, "wide", tmp_path / "wide").read_text()
        study = write_report(registry, "shifted", tmp_path / "study").read_text()
    # mean(WIDE8) - mean(BASE8) = 0.6425 - 0.60625; p Holm = the paired p (one comparison)
    assert (
        "**Winner:** wide8 (better than base8 beyond noise: +3.6 points, p <0.001 after Holm (paired t (seeds)))."
        " ★ marks it."
    ) in text
    assert "| ★ | wide8 |" in text
    assert "**No winner:** no variant beats base beyond noise, and better within noise of it" in study
    assert "| ★ |" not in study
    # every health flag is defined with when it can fire
    for kind in ("entropy collapse", "length blow-up", "grad-norm explosion", "flat reward", "eval accuracy drop"):
        assert f"- **{kind}**: " in study
    assert "Can fire: the 3x route only when 3x the early length fits under max_tokens" in study


# --------------------------------------------------------------------------- against rollouts generated

# Prompts drawn at steps 1-4 by each seed of the dynamic-sampling arm (group size 4, 16
# rollouts a step without it): more than 16 / 4 = 4 where a round's flat groups were dropped.
PROMPTS_DRAWN = {0: [4, 8, 6, 4], 1: [4, 4, 8, 8]}


def dynamic_sampling_study(path: Path) -> Registry:
    """An ablation of plain GRPO against dynamic sampling, 2 seeds each, 4 steps, evals at 0, 2, 4."""
    registry = Registry(str(path))
    sweep = registry.get_or_create_sweep("ds", "ablation", {"file": "ds.yaml", "baseline": "plain"})
    base = ["rollout.rollout_batch_size=16", "rollout.group_size=4", "loop.train_batch_size=16"]
    for variant, extra in (("plain", []), ("dynamic", ["rollout.dynamic_sampling=true"])):
        for seed in (0, 1):
            run = eval_run(
                registry,
                sweep,
                f"ds-{variant}-s{seed}",
                variant,
                [*base, *extra, f"seed={seed}"],
                [(0, 0.3), (2, 0.4 + 0.01 * seed), (4, 0.5)],
                group="ds",
            )
            if variant == "dynamic":
                for step, drawn in enumerate(PROMPTS_DRAWN[seed], start=1):
                    registry.log_step(run.id, step, {"train/dynamic_sampling_prompts": drawn})
    return registry


def test_a_dynamic_sampling_study_is_also_plotted_against_rollouts_generated(tmp_path, monkeypatch):
    """Issue 22: dynamic sampling is plotted against rollouts generated as well as against
    steps, since its steps draw further rounds of prompts. x at a step: the rollouts
    generated through it, prompts drawn x group size where recorded, else the rollout batch."""
    import matplotlib.axes

    from grpoctl.views import report_plots

    lines: dict[str, tuple[list, list]] = {}  # each variant's mean line, as drawn
    plot = matplotlib.axes.Axes.plot

    def drawn(ax, x, y, *args, **kwargs):
        if "label" in kwargs:
            lines[kwargs["label"].split(" ")[0]] = (list(x), list(y))
        return plot(ax, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", drawn)
    with dynamic_sampling_study(tmp_path / "registry.db") as registry:
        table = build_compare_table(registry, ["ds"])
        rows = {row.label: row for row in table.rows}
        plain, dynamic = rows["plain"].runs[0], rows["dynamic"].runs[0]
        assert report_plots.rollouts_by_step(plain, 4) == {0: 0, 1: 16, 2: 32, 3: 48, 4: 64}
        assert report_plots.rollouts_by_step(dynamic, 4) == {0: 0, 1: 16, 2: 48, 3: 72, 4: 88}  # seed 0
        assert not report_plots.records_dynamic_sampling([rows["plain"]])
        lines.clear()
        text = write_report(registry, "ds", tmp_path / "rep").read_text()
    assert "![eval accuracy against rollouts generated](eval_accuracy_by_rollouts.png)" in text
    assert (tmp_path / "rep" / "eval_accuracy_by_rollouts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The last figure drawn is the one against rollouts: each arm's mean over its seeds.
    # Seed 0 reaches steps 2 and 4 at 48 and 88 rollouts, seed 1 at 32 and 96.
    assert lines["plain"] == ([0, 32, 64], [0.3, pytest.approx(0.405), 0.5])
    assert lines["dynamic"] == ([0, 40, 92], [0.3, pytest.approx(0.405), 0.5])
    # Against steps, as before: the eval curve of both arms at steps 0, 2, 4.
    assert "![eval accuracy](eval_accuracy.png)" in text
