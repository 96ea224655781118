"""Per-problem outcomes: stored with every eval row (registry/outcomes.py, migration 0009),
built by the one eval-row builder, round-tripped on SQLite and PostgreSQL, NULL ("not
recorded") on every older row; and the sampled eval's common random numbers across arms."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from grpoctl.config import load_config
from grpoctl.data import Example, subset_hash
from grpoctl.data.run_data import EvalSet
from grpoctl.evals.headline import EvalOutcome
from grpoctl.evals.on_set import eval_row, evaluate_set
from grpoctl.registry import Registry, outcomes
from grpoctl.rollout.base import Rollouts, SamplingSettings

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def answer(text: str) -> str:
    return f" ok </think> <answer>{text}</answer>"


# --------------------------------------------------------------------------- the format


def test_counts_and_levels_round_trip_at_every_width():
    greedy = [1, 0, 0, 1, 1, 0, 1, 0, 1]
    text = outcomes.encode(greedy, 1, ["1", "2", None, "1", "10", "2", "1", "1", "3"])
    back = outcomes.decode(text)
    assert back.correct == tuple(greedy) and back.samples == 1 and back.problems == 9
    assert back.levels == ("1", "2", None, "1", "10", "2", "1", "1", "3")
    assert back.shares() == [float(c) for c in greedy]
    # sampled: 0..8 right of 8 (4 bits each), and 0..300 of 300 (9 bits each)
    for samples, counts in ((8, [0, 8, 3, 5, 7]), (300, [0, 300, 151, 299, 1])):
        back = outcomes.decode(outcomes.encode(counts, samples))
        assert back.correct == tuple(counts) and back.levels is None
        assert back.shares() == [c / samples for c in counts]


def test_a_greedy_eval_of_640_problems_takes_a_bit_per_problem():
    counts = [(i * 7) % 3 == 0 for i in range(640)]
    data = json.loads(outcomes.encode([int(c) for c in counts], 1))
    assert len(outcomes.base64.b64decode(data["correct"])) == 80


def test_what_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="0..1"):
        outcomes.encode([0, 2], 1)
    with pytest.raises(ValueError, match="at least 1"):
        outcomes.encode([0], 0)
    with pytest.raises(ValueError, match="2 problems but 1 levels"):
        outcomes.encode([0, 1], 1, ["1"])


# --------------------------------------------------------------------------- the row builder

PROBLEMS = [  # not in id order: an eval's subset is drawn, not sorted
    Example(id="c", question="QC", answer="3", level=2),
    Example(id="a", question="QA", answer="1", level=1),
    Example(id="b", question="QB", answer="2", level=None),
]


def test_eval_row_stores_right_answers_in_the_order_subset_hash_hashes():
    outcome = EvalOutcome(
        n=3,
        accuracy=2 / 3,
        format_rate=1.0,
        mean_response_length=2.0,
        timeouts=0,
        per_problem=[{"accuracy": 1.0}, {"accuracy": 0.0}, {"accuracy": 1.0}],  # c, a, b
    )
    row = eval_row(outcome, PROBLEMS, EvalSet("", PROBLEMS, "lab", "h"), "t", "{question}", SamplingSettings())
    stored = outcomes.decode(row["outcomes"])
    assert stored.correct == (0, 1, 1) and stored.levels == ("1", None, "2")  # a, b, c
    assert sum(stored.shares()) / stored.problems == pytest.approx(row["accuracy"])
    assert row["subset_hash"] == subset_hash(sorted(PROBLEMS, key=lambda e: e.id))


class CoinBackend:
    """Right or wrong by a coin drawn from the generator seeded with the call's seed, as the
    hf backend seeds it: what a sampled eval draws depends on its seed and nothing else."""

    def __init__(self):
        self.seeds: list[int] = []

    def generate(self, prompts, n, sampling, seed):
        self.seeds.append(seed)
        generator = torch.Generator().manual_seed(seed)
        texts = []
        for prompt in prompts:
            truth = prompt.split("Q")[-1]
            texts += [answer(truth if torch.rand((), generator=generator) < 0.5 else "x") for _ in range(n)]
        return Rollouts(prompt_ids=[[0]] * len(prompts), response_ids=[[1, 2]] * len(texts), response_texts=texts)


def _sampled_row(overrides: list[str], step: int = 10) -> tuple[dict, list[int]]:
    problems = [Example(id=f"p{i:02d}", question=f"Q{i}", answer=str(i), level=1 + i % 3) for i in range(12)]
    cfg = load_config(None, ["eval.sampled.n=8", "eval.sampled.subset=12", *overrides])
    backend = CoinBackend()
    done = evaluate_set(backend, cfg, EvalSet("", problems, "lab", "h"), "t", "{question}", sampled=True, step=step)
    return done.row, backend.seeds


def test_arms_with_one_seed_draw_the_same_samples_so_their_problems_pair():
    # Two arms of a study: what they change (lr, std normalization, length normalization)
    # never reaches the sampled eval's seed, which is sampled_eval_seed(seed, step) alone.
    base, base_seeds = _sampled_row(["seed=3"])
    arm, arm_seeds = _sampled_row(
        ["seed=3", "optimizer.lr=1e-5", "loss.use_std_normalization=false", "loss.length_normalization=constant"]
    )
    assert arm_seeds == base_seeds and arm["outcomes"] == base["outcomes"]
    stored = outcomes.decode(base["outcomes"])
    assert stored.samples == 8 and 0 < sum(stored.correct) < 8 * 12
    assert sum(stored.shares()) / stored.problems == pytest.approx(base["accuracy"])
    # another seed, or another step, draws other numbers
    other, other_seeds = _sampled_row(["seed=4"])
    later, _ = _sampled_row(["seed=3"], step=20)
    assert other_seeds != base_seeds and other["outcomes"] != base["outcomes"] != later["outcomes"]


# --------------------------------------------------------------------------- the registry


def test_outcomes_round_trip_and_every_stored_number_is_kept(db_url):
    greedy = outcomes.encode([1, 0, 1, 1], 1, ["1", "1", "2", "2"])
    sampled = outcomes.encode([3, 0, 8, 5], 8)
    common = dict(n=4, format_rate=1.0, mean_response_length=5.0, subset_hash="s4")
    with Registry(db_url) as registry:
        run = registry.create_run(name="r", config={"seed": 0}, config_diff={}, config_hash="h", seed=0, total_steps=20)
        registry.log_step(run.id, 0, {}, eval=dict(accuracy=0.5, **common))  # written before outcomes existed
        registry.log_step(
            run.id,
            10,
            {},
            eval=[
                dict(accuracy=0.75, outcomes=greedy, **common),
                dict(accuracy=0.5, kind="sampled", outcomes=sampled, **common),
            ],
        )
        stored = registry.eval_outcomes([run.id])
        assert stored[run.id][0] == ("s4", None)
        subset, text = stored[run.id][10]
        back = outcomes.decode(text)
        assert subset == "s4" and back.correct == (1, 0, 1, 1) and back.levels == ("1", "1", "2", "2")
        _, text = registry.eval_outcomes([run.id], kind="sampled")[run.id][10]
        assert outcomes.decode(text).correct == (3, 0, 8, 5) and outcomes.decode(text).samples == 8
        assert [(e.step, e.kind, e.accuracy, e.n) for e in registry.evals(run.id)] == [
            (0, "greedy", 0.5, 4),
            (10, "greedy", 0.75, 4),
            (10, "sampled", 0.5, 4),
        ]


def test_an_old_registry_opens_with_outcomes_not_recorded(tmp_path):
    db = tmp_path / "registry.db"
    shutil.copy(FIXTURES / "registry_v0.db", db)
    with sqlite3.connect(db) as conn:
        before = conn.execute("SELECT run_id, step, n, accuracy, format_rate FROM evalresult ORDER BY id").fetchall()
    with Registry(str(db)) as registry:
        ids = [r.id for r in registry.list_runs()]
        stored = registry.eval_outcomes(ids)
        assert any(stored.values()) and all(o is None for steps in stored.values() for _, o in steps.values())
    with sqlite3.connect(db) as conn:
        after = conn.execute("SELECT run_id, step, n, accuracy, format_rate FROM evalresult ORDER BY id").fetchall()
        assert after == before
        assert conn.execute("SELECT count(*) FROM evalresult WHERE outcomes IS NOT NULL").fetchone() == (0,)


def test_the_committed_lab_registry_says_problem_level_not_recorded(committed_registry):
    from grpoctl.analysis.compare import build_compare_table
    from grpoctl.views import compare_view

    with Registry(str(committed_registry("lab.db")), readonly=True) as registry:
        table = build_compare_table(registry, ["lab-std-normalization"])
    std_off = next(v for v in table.versus.rows if v.label == "std_off")
    assert std_off.choice.test == "paired" and std_off.problem_level == "problem level: not recorded"
    assert "problem level: not recorded: these runs stored no per-problem outcomes" in compare_view.versus_legend(
        table.versus
    )
