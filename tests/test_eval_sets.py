"""Several eval sets in one run (eval.sets, issue 23): each set recorded under its own
names, the first (the headline) also under the unprefixed ones; every set's problems held
out of training; `compare` and `report` read any set as the headline (--headline), test
pass@k and maj@k against the baseline as they test accuracy, and `report` shows pass@k,
maj@k and the breakdowns (MATH500's levels and subjects) in tables and curves."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli import invoke
from conftest import SHARED_DATA, lab_overrides

from grpoctl import metrics
from grpoctl.analysis.breakdown import breakdown
from grpoctl.analysis.compare import build_compare_table
from grpoctl.config import config_diff, load_config, to_dict
from grpoctl.config_checks import validate
from grpoctl.data import file_hash
from grpoctl.data.files import load_math_jsonl
from grpoctl.data.load import load_examples
from grpoctl.data.run_data import load_run_data
from grpoctl.errors import UserError
from grpoctl.registry import Registry
from grpoctl.rules import config_hash
from grpoctl.views import compare_view as tables
from grpoctl.views.report_view import write_report

MATH500 = SHARED_DATA / "math500_test.jsonl"
needs_math500 = pytest.mark.skipif(not MATH500.exists(), reason="needs ../shared/data/math500_test.jsonl")


def shortest_math500(dest: Path, n: int) -> Path:
    """The n MATH500 problems with the shortest text, as they are (the lab model's context is short)."""
    lines = [line for line in MATH500.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda line: len(json.loads(line)["problem"]))
    dest.write_text("\n".join(lines[:n]) + "\n")
    return dest


# --------------------------------------------------------------------------- names, checks, identity


def test_a_sets_metric_names_come_from_the_table():
    assert metrics.in_eval_set("gsm8k", metrics.EVAL_ACCURACY) == "eval/gsm8k/accuracy"
    assert metrics.in_eval_set("", metrics.EVAL_ACCURACY) == metrics.EVAL_ACCURACY
    assert metrics.split_eval_set("eval/gsm8k/pass@8") == ("gsm8k", metrics.pass_at(8))
    assert metrics.split_eval_set(metrics.pass_at(8)) == (None, metrics.pass_at(8))
    assert metrics.split_eval_set(metrics.REWARD) == (None, metrics.REWARD)
    info = metrics.describe("eval/math500/maj@4")  # a k and a set this process never wrote
    assert info is not None and info.higher_is_better and info.unit == "fraction"
    assert not metrics.lower_is_better("eval/math500/accuracy") and metrics.is_sampled_score("eval/math500/pass@2")
    assert metrics.NAME_RE.match(metrics.in_eval_set("math-500.v2", metrics.pass_at(16)))
    with pytest.raises(ValueError):
        metrics.in_eval_set("gsm8k", metrics.REWARD)


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ("[gsm8k]", "eval.sets[0] must be a mapping"),
        ("[{name: a, bogus: 1}]", "unknown key(s) bogus"),
        ("[{name: 'a b'}]", "eval.sets[0].name='a b' must be 1-40 letters"),
        ("[{source: synthetic}]", "eval.sets[0].name=None"),
        ("[{name: a}, {name: a}]", "the name 'a' is used twice"),
        ("[{name: a, source: csv}]", "eval.sets[0].source='csv' is not one of"),
        ("[{name: a}, {name: b, source: math}]", "eval.sets[1] (b): source=math needs a path"),
        ("[{name: a, subset: 0}]", "eval.sets[0].subset must be an integer >= 1"),
        ("[{name: a, path: ''}]", "eval.sets[0].path must be a non-empty string"),
    ],
)
def test_bad_eval_sets_are_refused_in_one_line(sets, says):
    with pytest.raises(UserError) as refused:
        validate(load_config(None, [f"eval.sets={sets}"]))
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_bad_set_stops_train_before_anything_is_written(tmp_path):
    out = invoke("train", "eval.sets=[{name: m, source: math}]", f"--db={tmp_path / 'r.db'}", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "needs a path" in out.stderr
    assert not (tmp_path / "r.db").exists()


def test_no_sets_keep_every_runs_identity_and_sets_change_it():
    plain = config_hash(load_config("lab", []))
    assert config_hash(load_config("lab", ["eval.sets=[]"])) == plain
    assert config_hash(load_config("lab", ["eval.sets=[{name: lab}]"])) != plain


# --------------------------------------------------------------------------- data


def test_every_sets_problems_are_held_out_of_training(tmp_path):
    trained_on = load_examples("lab", split="train")[:6]
    extra = tmp_path / "extra.jsonl"
    extra.write_text(
        "".join(
            json.dumps({"problem": ex.question, "answer": ex.answer, "kind": f"k{i % 2}"}) + "\n"
            for i, ex in enumerate(trained_on)
        )
    )
    plain = load_run_data(load_config("lab", []))
    sets = f"eval.sets=[{{name: lab, subset: 5}}, {{name: extra, source: jsonl, path: {extra}, subset: 4}}]"
    data = load_run_data(load_config("lab", [sets]))
    assert [s.name for s in data.sets] == ["lab", "extra"]
    headline, other = data.sets
    assert data.eval == headline.examples and len(headline.examples) == 5 and len(other.examples) == 4
    assert (data.eval_source, data.data_hash) == (headline.source, headline.data_hash) == ("lab", plain.data_hash)
    assert (other.source, other.data_hash) == ("jsonl", file_hash(extra))
    # All six of the set's problems are held out, not only the four its subset drew.
    held_out = {ex.question for ex in trained_on}
    assert not held_out & {ex.question for ex in data.train}
    assert len(data.train) == len(plain.train) - len(held_out)
    # Without eval.sets, the one unnamed set of data.eval_*, as before.
    assert [s.name for s in plain.sets] == [""] and plain.sets[0].examples == plain.eval


def test_a_sweep_makes_each_sets_file_absolute_as_it_does_data_eval_path(tmp_path, monkeypatch):
    from grpoctl.sweep.spec import absolute_paths

    (tmp_path / "m.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        "lab", ["eval.sets=[{name: m, source: math, path: m.jsonl}, {name: hub, source: hub, path: a/b}]"]
    )
    absolute_paths(cfg)
    assert [entry.get("path") for entry in cfg.eval.sets] == [str(tmp_path / "m.jsonl"), "a/b"]  # a hub id stays


# --------------------------------------------------------------------------- compare and report


def _study(registry: Registry, math500: list) -> None:
    """An ablation of two variants x two seeds, each run evaluated on two sets: `lab` (the
    headline: the variants tie) and `math500` (the real problems: `better` is ahead), with
    sampled evals on both; and an older run of the same study's group without eval sets."""
    sweep = registry.get_or_create_sweep("sets", "ablation", {"file": "experiments/sets.yaml", "baseline": "base"})
    sets = "eval.sets=[{name: lab}, {name: math500, source: math, path: math500.jsonl}]"
    for variant, lr, lift in (("base", "3e-4", 0.0), ("better", "1e-4", 0.2)):
        for seed in (0, 1):
            cfg = load_config("lab", [sets, f"optimizer.lr={lr}", f"seed={seed}", "loop.n_grpo_steps=20"])
            run = registry.create_run(
                name=f"sets-{variant}-s{seed}",
                config=to_dict(cfg),
                config_diff=config_diff(cfg),
                config_hash=config_hash(cfg),
                seed=seed,
                total_steps=20,
                group="sets",
                variant=variant,
            )
            registry.add_sweep_member(sweep.id, run.config_hash, variant, seed)
            for step in (0, 10, 15, 20):
                t = step / 20
                lab = 0.30 + 0.2 * t + 0.01 * seed  # the variants tie on the headline set
                m500 = 0.10 + lift * t + 0.01 * seed
                right = [{"accuracy": float(i % 10 < round(m500 * 10))} for i in range(len(math500))]
                rows, figures = [], {}
                for name, acc, n, head, table in (
                    ("lab", lab, 640, True, {}),
                    ("math500", m500, 500, False, breakdown(math500, right)),
                ):
                    scores = {metrics.pass_at(1): acc, metrics.pass_at(4): min(1.0, acc + 0.3 + lift * t)}
                    common = dict(format_rate=1.0, mean_response_length=9.0, eval_set=name, headline=head)
                    rows.append(dict(n=n, accuracy=acc, breakdown=json.dumps(table), **common))
                    rows.append(dict(kind="sampled", n=64, accuracy=acc, scores=json.dumps(scores), **common))
                    named = {metrics.EVAL_ACCURACY: acc, **scores}
                    figures |= {metrics.in_eval_set(name, k): v for k, v in named.items()}
                    figures |= named if head else {}
                registry.log_step(run.id, step, {metrics.REWARD: 0.5, **figures}, eval=rows)
            registry.set_status(run.id, "finished")
    old = load_config("lab", ["optimizer.lr=1e-3", "loop.n_grpo_steps=20"])
    run = registry.create_run(
        name="sets-old", config=to_dict(old), config_diff=config_diff(old), config_hash=config_hash(old),
        seed=0, total_steps=20, group="sets", variant="old",
    )  # fmt: skip
    registry.add_sweep_member(sweep.id, run.config_hash, "old", 0)
    registry.log_step(
        run.id, 20, {metrics.EVAL_ACCURACY: 0.4}, eval=dict(n=640, accuracy=0.4, format_rate=1, mean_response_length=9)
    )
    registry.set_status(run.id, "finished")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    if not MATH500.exists():
        pytest.skip("needs ../shared/data/math500_test.jsonl")
    path = tmp_path_factory.mktemp("sets") / "registry.db"
    with Registry(str(path)) as registry:
        _study(registry, load_math_jsonl(MATH500))
    return path


def _rows(table) -> dict:
    return {row.label: row for row in table.rows}


def test_compare_reads_the_headline_set_unless_told_another(study):
    with Registry(str(study), readonly=True) as registry:
        default = build_compare_table(registry, ["sets"])
        other = build_compare_table(registry, ["sets"], headline="math500")
        named = build_compare_table(registry, ["sets"], metric="eval/math500/accuracy")
        with pytest.raises(UserError, match="no run has an eval set named 'nope' .*lab, math500"):
            build_compare_table(registry, ["sets"], headline="nope")
        with pytest.raises(UserError, match="names the eval set 'math500' but --headline names 'lab'"):
            build_compare_table(registry, ["sets"], metric="eval/math500/pass@4", headline="lab")
    rows = _rows(default)
    assert rows["base"].values["final_acc"].mean == pytest.approx(0.505)  # lab: 0.5 and 0.51 at step 20
    assert rows["old"].values["final_acc"].mean == pytest.approx(0.4)  # a run from before eval sets
    # the variants tie on the headline set, seed by seed: the paired t has no spread to test against
    assert default.versus is not None
    tied = {v.label: v for v in default.versus.rows}["better"]
    assert tied.verdict == "untested" and tied.note == "every seed's difference is the same: nothing to test"
    rows = _rows(other)
    assert other.title == "sets (eval set math500)" and other.eval_set == "math500"
    assert rows["better"].values["final_acc"].mean == pytest.approx(0.305)
    assert "old" in _rows(other) and "final_acc" not in rows["old"].values
    assert other.warnings == ["1 of 5 runs have no eval set named 'math500', so no eval here: sets-old"]
    assert other.versus is not None and {v.label: v.verdict for v in other.versus.rows}["better"] == "better"
    assert [r.label for r in other.rows if r.best] == ["better"]
    assert _rows(named)["better"].values["final_acc"].mean == pytest.approx(0.305)


def test_pass_at_k_is_compared_and_tested_like_accuracy(study):
    with Registry(str(study), readonly=True) as registry:
        table = build_compare_table(registry, ["sets"], metric="eval/math500/pass@4")
        lab = build_compare_table(registry, ["sets"], metric=metrics.pass_at(4), last_k=1)
    rows = _rows(table)
    # math500's pass@4 at step 20: acc + 0.3 + lift; at steps 10, 15, 20 for the last-3 measure.
    assert rows["better"].values["metric"].mean == pytest.approx(0.305 + 0.3 + 0.2)
    assert rows["better"].values["metric_best"].mean == pytest.approx(0.805)
    assert table.versus is not None and table.versus.metric == metrics.pass_at(4)
    versus = {v.label: v for v in table.versus.rows}
    last3 = [sum(0.1 + 0.2 * t + s + 0.3 + 0.2 * t for t in (0.5, 0.75, 1.0)) / 3 for s in (0.0, 0.01)]
    assert versus["better"].measure == pytest.approx(sum(last3) / 2) and versus["better"].verdict == "better"
    assert tables.measure_name(table.versus) == "pass@4, mean of last 3 evals"
    assert "in pass@4" in tables.versus_legend(table.versus)
    assert [r.label for r in table.rows if r.best] == ["better"]  # the star follows pass@4's verdict
    one = _rows(lab)["base"].values["metric"]
    assert one.mean == pytest.approx(0.805) and one.k == 2  # lab: 0.5 + 0.3 (+ 0.01 for seed 1), final
    assert tables.measure_name(lab.versus) == "final pass@4"
    cell = tables.cell("metric", _rows(lab)["old"].values.get("metric"))
    assert cell == ""  # the old run sampled nothing


def test_compare_cli_takes_headline(study):
    out = invoke(
        "compare", "sets", "--headline", "math500", "--metric", "eval/pass@4", "--format", "json", f"--db={study}"
    )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    rows = {r["variant"]: r for r in document["rows"]}
    assert rows["better"]["final_acc"] == pytest.approx(0.305) and rows["better"]["metric"] == pytest.approx(0.805)
    assert document["baseline"]["measure"] == "pass@4, mean of last 3 evals"
    assert "sets-old" in out.stderr  # its warning, on stderr beside the JSON
    bad = invoke("compare", "sets", "--headline", "nope", f"--db={study}")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@needs_math500
def test_report_shows_pass_at_k_and_math500s_breakdowns_for_the_headline_asked(study, tmp_path, monkeypatch):
    from grpoctl.views import report_evals, report_plots

    records = [json.loads(line) for line in MATH500.read_text().splitlines()]
    monkeypatch.setattr(report_plots, "plot_all", lambda *args, **kw: [])  # the usual curves: tested elsewhere
    with Registry(str(study), readonly=True) as registry:
        path = write_report(registry, "sets", tmp_path / "other", headline="math500")
        # the default headline, read for its text only
        monkeypatch.setattr(report_plots, "plot_metric", lambda *args, **kw: False)
        monkeypatch.setattr(report_evals, "plot_breakdown", lambda *args, **kw: False)
        plain = write_report(registry, "sets", tmp_path / "plain")
    text = path.read_text()
    assert "Headline eval set: **math500**" in text and "## pass@k and maj@k" in text
    scores = text.split("## pass@k and maj@k")[1].split("##")[0]
    line = next(row for row in scores.splitlines() if row.startswith("| better |"))
    assert line.split(" | ")[2:4] == ["0.305 ± 0.007 sd", "0.805 ± 0.007 sd"]  # final pass@1, pass@4
    assert (path.parent / "eval_pass_at_4.png").stat().st_size > 5000
    against = text.split("### pass@4 against base")[1].split("###")[0]
    better = next(row for row in against.splitlines() if row.startswith("| better |"))
    assert "| better |" in better[10:] and "pass@4, mean of last 3 evals" in against  # its verdict, its measure
    levels = text.split("### By level")[1].split("###")[0]
    counts = {str(level): sum(r["level"] == level for r in records) for level in range(1, 6)}
    for level, n in counts.items():
        assert any(row.startswith(f"| {level} | {n} | ") for row in levels.splitlines())
    subjects = text.split("### By subject")[1].split("##")[0]
    assert sum(row.startswith("| ") for row in subjects.splitlines()) == 2 + len({r["subject"] for r in records})
    assert (path.parent / "breakdown_level.png").stat().st_size > 5000
    assert (path.parent / "breakdown_subject.png").stat().st_size > 5000
    # The headline set (lab) has no breakdown here; its pass@k are its own.
    own = plain.read_text()
    assert "Headline eval set" not in own and "## Breakdowns" not in own and "| base | 2 | 0.505 ± 0.007 sd" in own


# --------------------------------------------------------------------------- a real run


@pytest.mark.slow
@needs_math500
def test_a_two_set_run_records_each_set_and_the_headline_unprefixed(tmp_path):
    math500 = shortest_math500(tmp_path / "math500_short.jsonl", 12)
    db = tmp_path / "registry.db"
    sets = f"eval.sets=[{{name: lab, subset: 6}}, {{name: math500, source: math, path: {math500}, subset: 10}}]"
    args = lab_overrides("lab", tmp_path, **{"runtime.threads": 1, "loop.n_grpo_steps": 1})
    sampled = ["eval.sampled.n=2", "eval.sampled.subset=4", "eval.sampled.every=1"]
    out = invoke("train", *args, sets, *sampled, "name=two", f"--db={db}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    with sqlite3.connect(db) as conn:
        figures = dict(((s, n), v) for s, n, v in conn.execute("SELECT step, name, value FROM metric"))
        evals = conn.execute(
            "SELECT step, kind, eval_set, headline, n, accuracy, data_source, data_hash, breakdown FROM evalresult"
        ).fetchall()
    sets_rows = (("lab", 1, 6), ("math500", 0, 10))  # name, headline, problems
    assert sorted(e[:5] for e in evals) == sorted(
        [(step, "greedy", name, head, n) for step in (0, 1) for name, head, n in sets_rows]
        + [(step, "sampled", name, head, 4) for step in (0, 1) for name, head, _ in sets_rows]
    )
    for step in (0, 1):
        greedy = {e[2]: e for e in evals if e[0] == step and e[1] == "greedy"}
        # the headline set under both names; the other set only under its own
        assert figures[(step, metrics.EVAL_ACCURACY)] == figures[(step, "eval/lab/accuracy")] == greedy["lab"][5]
        assert figures[(step, "eval/math500/accuracy")] == greedy["math500"][5]
        assert figures[(step, metrics.pass_at(2))] == figures[(step, "eval/lab/pass@2")]
        assert (step, "eval/math500/pass@2") in figures and (step, "eval/math500/maj@2") in figures
        assert greedy["math500"][6:8] == ("math", file_hash(math500))
        assert set(json.loads(greedy["math500"][8])) == {"level", "subject"}
    compared = invoke("compare", "two", "--headline", "math500", "--format", "json", f"--db={db}", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    row = json.loads(compared.stdout)["rows"][0]
    assert row["final_acc"] == figures[(1, "eval/math500/accuracy")]
    reported = invoke("report", "two", "--headline", "math500", "-o", "rep", f"--db={db}", cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert "### By subject" in (tmp_path / "rep" / "report.md").read_text()
    # `grpoctl eval` of its checkpoint evaluates the headline set, and says which it was.
    ckpt = tmp_path / "ckpt" / "two" / "step-1"
    assert invoke("eval", str(ckpt), f"--db={db}", cwd=tmp_path).returncode == 0
    with sqlite3.connect(db) as conn:
        # (the run sampled, so its checkpoint is sampled too: eval.sampled.subset problems)
        evaluated = conn.execute("SELECT eval_set, kind, n FROM evalresult WHERE checkpoint_path IS NOT NULL")
        assert evaluated.fetchall() == [("lab", "sampled", 4)]
