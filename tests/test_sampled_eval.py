"""The sampled eval: pass@k and maj@k from its own seed, recorded per eval, and training
rows bit-identical with it and without it."""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch
from cli import invoke
from conftest import lab_overrides

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.data import Example
from grpoctl.data.run_data import EvalSet
from grpoctl.evals.on_set import eval_row
from grpoctl.evals.sampled import (
    sampled_eval_due,
    sampled_eval_seed,
    sampled_evaluate,
    sampled_ks,
)
from grpoctl.registry import outcomes
from grpoctl.rollout.base import Rollouts, SamplingSettings


class ScriptedBackend:
    """Answers from a script per question, reseeding the global generator as hf does."""

    def __init__(self, script: dict[str, list[str]]):
        self.script = script
        self.seeds = []

    def generate(self, prompts, n, sampling, seed):
        torch.manual_seed(seed)
        self.seeds.append(seed)
        texts = []
        for prompt in prompts:
            question = next(q for q in self.script if q in prompt)
            texts += self.script[question][:n]
        return Rollouts(prompt_ids=[[0]] * len(prompts), response_ids=[[1, 2]] * len(texts), response_texts=texts)


def answer(text: str) -> str:
    return f" ok </think> <answer>{text}</answer>"


def test_pass_and_maj_from_scripted_samples_leave_the_global_generator_alone():
    problems = [
        Example(id="a", question="QA", answer="\\frac{1}{2}", level=1, subject="Algebra"),
        Example(id="b", question="QB", answer="7", level=2, subject="Algebra"),
    ]
    backend = ScriptedBackend(
        {
            # Two right (written two ways) of four, and the majority is wrong "3" ... tied 2-2:
            # the tie goes to the class seen first, 0.5.
            "QA": [answer("0.5"), answer("3"), answer("3"), answer("\\dfrac12")],
            "QB": [answer("8"), "no format", answer("8"), answer("7")],
        }
    )
    torch.manual_seed(123)
    state = torch.get_rng_state()
    outcome = sampled_evaluate(
        backend,
        problems,
        "{question}",
        "r1_zero",
        SamplingSettings(greedy=False),
        n=4,
        ks=[1, 2, 4],
        seed=99,
        batch_size=4,
    )
    assert torch.equal(torch.get_rng_state(), state)
    assert backend.seeds == [99, 99 + 4]  # one problem per call (batch_size // n), seeds apart by n
    assert outcome.accuracy == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert outcome.pass_at[4] == 1.0
    assert outcome.pass_at[2] == pytest.approx(((1 - 1 / 6) + (1 - 3 / 6)) / 2)
    assert outcome.maj_at[4] == pytest.approx((1 + 0) / 2)  # A: tie to 0.5 (right); B: 8 wins
    assert outcome.format_rate == pytest.approx(7 / 8)
    row = eval_row(
        outcome, problems, EvalSet("", problems, "math", "h"), "t", "{question}", SamplingSettings(greedy=False)
    )
    assert row["kind"] == "sampled" and json.loads(row["sampling"])["n"] == 4
    assert json.loads(row["scores"])[metrics.maj_at(4)] == pytest.approx(0.5)
    levels = json.loads(row["breakdown"])["level"]
    assert levels["1"][metrics.maj_at(4)] == 1.0 and levels["2"][metrics.maj_at(4)] == 0.0
    assert json.loads(row["breakdown"])["subject"]["Algebra"]["n"] == 2


def test_when_it_is_due_and_its_seed():
    cfg = load_config(None, ["eval.sampled.n=4", "eval.sampled.every=3", "loop.n_grpo_steps=7"])
    assert [s for s in range(8) if sampled_eval_due(cfg, s)] == [0, 3, 6, 7]
    assert sampled_ks(cfg.eval.sampled) == [1, 4]
    off = load_config(None, [])
    assert not any(sampled_eval_due(off, s) for s in range(200))
    seeds = {sampled_eval_seed(seed, step) for seed in range(3) for step in range(50)}
    assert len(seeds) == 150  # a seed of its own per (seed, step)


def test_k_above_n_is_refused_in_one_line(tmp_path):
    out = invoke("train", "eval.sampled.n=4", "eval.sampled.k=[1,8]", f"--db={tmp_path / 'r.db'}", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "eval.sampled.k" in out.stderr
    assert not (tmp_path / "r.db").exists()


def _train_rows(db, name):
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("SELECT id FROM run WHERE name = ?", (name,)).fetchone()
        train = conn.execute(
            "SELECT step, opt_step, name, value FROM metric WHERE run_id = ? AND name LIKE 'train/%' "
            "ORDER BY step, coalesce(opt_step, -1), name",
            (run_id,),
        ).fetchall()
        samples = conn.execute(
            "SELECT step, prompt, response, reward FROM sample WHERE run_id = ? AND kind = 'train' ORDER BY id",
            (run_id,),
        ).fetchall()
        evals = conn.execute(
            "SELECT step, kind, n, accuracy, sampling, scores, breakdown FROM evalresult WHERE run_id = ? "
            "ORDER BY step, kind",
            (run_id,),
        ).fetchall()
    return train, samples, evals


@pytest.mark.slow
def test_training_rows_are_bit_identical_with_and_without_sampled_evals(tmp_path):
    db = tmp_path / "registry.db"
    base = [*lab_overrides("lab", tmp_path, **{"runtime.threads": 1, "loop.n_grpo_steps": 3}), f"--db={db}"]
    sampled = ["eval.sampled.n=4", "eval.sampled.k=[1,2,4]", "eval.sampled.subset=6", "eval.sampled.every=1"]
    assert invoke("train", *base, "name=plain", cwd=tmp_path).returncode == 0
    out = invoke("train", *base, *sampled, "name=sampled", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    plain_train, plain_samples, plain_evals = _train_rows(db, "plain")
    train, samples, evals = _train_rows(db, "sampled")
    assert plain_train and train == plain_train  # every train/* value, exactly
    assert samples == plain_samples
    assert [e[:4] for e in evals if e[1] == "greedy"] == [e[:4] for e in plain_evals]
    sampled_rows = [e for e in evals if e[1] == "sampled"]
    assert [e[0] for e in sampled_rows] == [0, 1, 2, 3] and all(e[2] == 6 for e in sampled_rows)
    for row in sampled_rows:
        settings, scores = json.loads(row[4]), json.loads(row[5])
        assert settings["n"] == 4 and settings["k"] == [1, 2, 4]
        assert scores[metrics.pass_at(1)] <= scores[metrics.pass_at(2)] <= scores[metrics.pass_at(4)]
        assert scores[metrics.pass_at(1)] == pytest.approx(row[3])
        assert set(json.loads(row[6])["level"]) <= {"1", "2", "3", "4", "5"}
    with sqlite3.connect(db) as conn:
        names = {n for (n,) in conn.execute("SELECT DISTINCT name FROM metric")}
    assert {metrics.pass_at(4), metrics.maj_at(4), metrics.maj_at(2)} <= names


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--samples", "0"], "--samples must be at least 1"),
        (["--samples", "4", "--k", "1,8"], "between 1 and --samples (4)"),
        (["--samples", "4", "--k", "1,two"], "whole numbers"),
        (["--k", "1,4"], "--k needs --samples"),
    ],
)
def test_eval_refuses_bad_sampling_flags_in_one_line(tmp_path, args, says):
    out = invoke("eval", str(tmp_path / "no-model"), *args, f"--db={tmp_path / 'r.db'}", cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.db").exists()


@pytest.mark.slow
def test_eval_of_a_checkpoint_with_samples_prints_its_cost_and_records_pass_and_maj(tmp_path):
    db = tmp_path / "registry.db"
    args = lab_overrides("lab", tmp_path, **{"runtime.threads": 1, "loop.n_grpo_steps": 1})
    assert invoke("train", *args, f"--db={db}", "name=one", cwd=tmp_path).returncode == 0
    ckpt = tmp_path / "ckpt" / "one" / "step-1"
    out = invoke("eval", str(ckpt), "--samples", "4", "--k", "1,2,4", "--subset", "6", f"--db={db}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    cost = next(i for i, line in enumerate(lines) if line.startswith("estimated cost: 24 completions"))
    assert cost < next(i for i, line in enumerate(lines) if line.startswith("sampling "))
    assert "pass@4" in lines[-1] and "maj@2" in lines[-1] and "recorded for run one" in lines[-1]
    with sqlite3.connect(db) as conn:
        kind, n, sampling, scores, accuracy, stored = conn.execute(
            "SELECT kind, n, sampling, scores, accuracy, outcomes FROM evalresult WHERE checkpoint_path IS NOT NULL"
        ).fetchone()
        greedy = conn.execute("SELECT count(*) FROM evalresult WHERE kind = 'greedy' AND outcomes IS NOT NULL")
        assert greedy.fetchone()[0] == 2  # the run's own evals at steps 0 and 1
    assert (kind, n, json.loads(sampling)["k"]) == ("sampled", 6, [1, 2, 4])
    assert set(json.loads(scores)) >= {metrics.pass_at(k) for k in (1, 2, 4)} | {metrics.maj_at(4)}
    # right samples of 4 for each of the 6 problems, with the lab's levels: their mean is pass@1
    right = outcomes.decode(stored)
    assert right.samples == 4 and right.problems == 6 and right.levels is not None
    assert sum(right.shares()) / 6 == pytest.approx(accuracy)
