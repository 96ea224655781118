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
from conftest import drop_pg_database, fresh_pg_database
from sqlalchemy import update

from grpoctl.analysis import tables
from grpoctl.analysis.compare import build_compare_table
from grpoctl.analysis.report import write_report
from grpoctl.config import config_diff, config_hash, load_config, to_dict
from grpoctl.registry import Registry, Run
from grpoctl.registry.models import utcnow

ROOT = Path(__file__).resolve().parents[1]
N_EVAL = 1024
DECODING = {"greedy": True, "max_tokens": 32}


def make_run(registry, name, overrides, group="abl", variant=None, steps=20, status="finished",
             error=None, collapse_at=None, reward_top=0.7, decoding=DECODING, subset_hash="s1",
             logged=None):
    """A run whose metrics follow a learning curve, or collapse from `collapse_at`; it
    stops after `logged` steps (all of them by default)."""
    cfg = load_config(None, overrides + [f"loop.n_grpo_steps={steps}"])
    run = registry.create_run(name=name, config=to_dict(cfg), config_diff=config_diff(cfg),
                              config_hash=config_hash(cfg), seed=cfg.seed, total_steps=steps,
                              group=group, variant=variant)
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
            "mem/peak": 500.0 + step,
        }
        registry.log_step(run.id, step, metrics)
        if step % 5 == 0 or step == logged - 1:
            accuracy = 0.0 if broken else round(0.35 + (reward_top - 0.35) * t, 4)
            registry.log_step(run.id, step, {"eval/accuracy": accuracy})
            registry.add_eval(run_id=run.id, step=step, n=N_EVAL, accuracy=accuracy, format_rate=0.9,
                              mean_response_length=14.0, data_hash="d1", subset_hash=subset_hash,
                              template_hash="t1", decoding=decoding, grader="exact")
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
            make_run(registry, "abl-hot-s0", ["optimizer.lr=1e-3"], variant="hot", collapse_at=4,
                     status="diverged", error="non-finite loss at step 20"),
            make_run(registry, "abl-broken-s0", ["loss.loss_type=no_baseline"], variant="broken", logged=3,
                     status="failed", error="RuntimeError: CUDA out of memory\nTraceback..."),
        ]
        for cfg, run in runs:
            registry.add_sweep_member(sweep.id, run.config_hash, run.variant, run.seed)
        # A later `grpoctl eval` of a checkpoint on other data, linked to the run: not its curve.
        good = runs[0][1]
        registry.add_eval(run_id=good.id, step=19, checkpoint_path="/ckpt/step-19", n=200, accuracy=0.01,
                          format_rate=0.0, mean_response_length=31.0, data_hash="gsm8k", subset_hash="s9",
                          template_hash="t1", decoding=DECODING, grader="exact")
        # Another group, evaluated differently: sampled decoding, another subset.
        make_run(registry, "other-a", ["seed=5"], group="other", variant="a")
        make_run(registry, "other-b", ["seed=6", "optimizer.lr=1e-4"], group="other", variant="b",
                 decoding={"greedy": False, "temperature": 1.0}, subset_hash="s2", status="running")
        with registry.engine.begin() as conn:  # other-b stopped heartbeating an hour ago
            conn.execute(update(Run).where(Run.name == "other-b").values(heartbeat_at=utcnow() - timedelta(hours=1)))
    return path


@pytest.fixture
def registry(db):
    with Registry(str(db)) as registry:
        yield registry


def grpoctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpoctl", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


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
    # A single run carries the eval's binomial standard error.
    p = hot.values["best_acc"].mean
    assert p == pytest.approx(0.35) and hot.values["best_step"].mean == 0
    assert hot.values["best_acc"].se == pytest.approx(math.sqrt(p * (1 - p) / N_EVAL))
    assert hot.values["final_acc"].mean == 0.0
    assert hot.status == "diverged" and broken.status == "failed"
    assert {f.split("@")[0] for f in hot.flags} >= {"entropy collapse", "length blow-up", "flat reward", "diverged"}
    assert "entropy collapse@4" in hot.flags
    assert good.flags == [] and table.warnings == []
    assert good.values["s_per_step"].mean == pytest.approx(median(1.0 + 0.1 * s for s in range(20)))
    assert broken.values["s_per_step"].mean == pytest.approx(1.1)  # median of an odd count
    assert good.values["peak_mem"].mean == 519.0


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
    lines = [l for l in tables.markdown(table).splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {}
    for line in lines[2:]:
        row = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        cells[row["variant"]] = row
    assert head[:5] == ["best", "variant", "loss_type", "lr", "seeds"]
    assert cells["good"]["best"] == "★" and cells["hot"]["best"] == ""
    assert cells["good"]["final acc"] == "0.680 ± 0.028" and cells["good"]["seeds"] == "2"
    se = math.sqrt(0.35 * 0.65 / N_EVAL)
    assert cells["hot"]["best acc"] == f"0.350 ± {se:.3f}" and cells["hot"]["lr"] == "1e-3"
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


def test_runs_by_ref(registry):
    table = build_compare_table(registry, ["abl-good-s0", "abl-hot"])  # a name, a unique prefix
    assert [r.label for r in table.rows] == ["good", "hot"] and table.title == "abl-good-s0, abl-hot"
    # Same config but the seed: one variant, whatever the runs were called.
    table = build_compare_table(registry, ["abl-good-s0", "other-a"])
    assert [(r.label, len(r.runs)) for r in table.rows] == [("abl-good-s0", 2)]


def test_cli_json_and_csv_parse_and_stay_clear_of_torch(db, tmp_path):
    code = ("import sys, runpy\n"
            f"sys.argv = ['grpoctl', 'compare', 'abl', '--db', {str(db)!r}, '--format', 'json']\n"
            "try:\n    runpy.run_module('grpoctl', run_name='__main__')\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "heavy = [m for m in ('torch', 'matplotlib', 'pandas', 'transformers') if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)\n"
            "from grpoctl.analysis.report import write_report\n"
            "from grpoctl.registry import Registry\n"
            f"write_report(Registry({str(db)!r}), 'abl', {str(tmp_path)!r})\n"
            "print('REPORT TORCH', 'torch' in sys.modules, file=sys.stderr)\n")
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
    assert float(records[1]["best_acc"]) == 0.35 and records[0]["runs"] == "abl-good-s0;abl-good-s1"


@pytest.mark.parametrize("args, message", [
    (["compare", "nosuch"], "no sweep, group or run named 'nosuch'"),
    (["compare", "abl", "--format", "xml"], "--format 'xml' is not one of"),
    (["report", "nosuch"], "no sweep, group or run named 'nosuch'"),
])
def test_bad_input_is_one_line_and_exit_2(db, args, message):
    out = grpoctl(*args, "--db", str(db))
    assert out.returncode == 2, out
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and message in out.stderr


def test_report_writes_markdown_and_readable_plots(registry, tmp_path):
    path = write_report(registry, "abl", tmp_path / "rep")
    text = path.read_text()
    for heading in ("# abl", "## What varied", "## What was shared", "## Results", "## Curves",
                    "## Health", "## Runs that did not finish"):
        assert heading in text, heading
    assert "- `optimizer.lr`: 3e-4, 1e-3\n" in text
    assert "- `loss.loss_type`: grpo_clip, no_baseline\n" in text
    assert "- seeds: 0, 1 (folded into mean ± sd per variant)" in text
    assert "## What was shared\n\n- `loop.n_grpo_steps` = 20\n" in text
    assert "| ★ | good |" in text
    assert "**Winner by final eval accuracy:** good with 0.680" in text and "more than the noise" in text
    assert "**abl-hot-s0** (hot): entropy collapse from step 4" in text
    assert "**abl-broken-s0**: failed at step 2 of 20: `RuntimeError: CUDA out of memory`" in text
    assert "non-finite loss at step 20" in text

    import matplotlib.image

    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    assert pngs == ["eval_accuracy.png", "grad_norm.png", "response_length.png", "token_entropy.png",
                    "train_reward.png"]
    for name in pngs:
        data = (path.parent / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path.parent / name)
        assert image.shape[0] > 300 and image.shape[1] > 600
        assert f"]({name})" in text


def test_report_calls_a_close_race_within_noise(tmp_path, db_url):
    with Registry(db_url) as registry:
        make_run(registry, "a", ["seed=0"], group="close", variant="a", reward_top=0.70)
        make_run(registry, "b", ["optimizer.lr=1e-4"], group="close", variant="b", reward_top=0.69)
        text = write_report(registry, "close", tmp_path / "rep").read_text()
    assert "**Winner by final eval accuracy:** a with 0.700, 1.0 points ahead of b (0.690)" in text
    assert "within noise" in text
