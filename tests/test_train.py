"""The trainer end to end on a tiny random model: what it records, how it ends, how it resumes.

Its `grpoctl` processes are children of the tests' fork server (tests/trainer_zygote.py),
which pays the imports once instead of per process."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trainer_zygote
from conftest import REPO, SHARED_DATA, fast_overrides, grpoctl_cmd

DIGIT_TRAIN = [sys.executable, str(REPO / "tests" / "digit_reward_train.py")]

REQUIRED_METRICS = [
    "train/reward",
    "train/format_reward",
    "train/answer_reward",
    "train/loss",
    "train/grad_norm",
    "train/token_entropy",
    "train/response_length",
    "train/response_clip_fraction",
    "train/working_share",
    "train/clip_fraction",
    "train/zero_std_group_fraction",
    "eval/accuracy",
    "eval/format_rate",
    "eval/response_length",
    "time/rollout",
    "time/reward",
    "time/train",
    "time/eval",
    "time/step",
    "time/cpu",
    "mem/peak",
]


def run_cli(cmd: list[str], cwd: Path, timeout: int = 300, **extra_env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra_env)
    return trainer_zygote.run(cmd, cwd, env, timeout=timeout)


def metric_rows(db: Path, run_name: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT m.step, m.opt_step, m.name, m.value FROM metric m JOIN run r ON r.id = m.run_id "
            "WHERE r.name = ? ORDER BY m.step, m.opt_step, m.name",
            (run_name,),
        ).fetchall()


def run_status(db: Path, run_name: str) -> tuple[str, str | None]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT status, error FROM run WHERE name = ?", (run_name,)).fetchone()


def test_tiny_run_records_every_metric(trained_run):
    db = trained_run / "registry.db"
    assert run_status(db, "e2e") == ("finished", None)
    rows = metric_rows(db, "e2e")
    per_step = {}
    for step, opt_step, name, _ in rows:
        if opt_step is None:
            per_step.setdefault(name, set()).add(step)
    for name in REQUIRED_METRICS:
        assert name in per_step, f"{name} not recorded"
    for name in ("train/reward", "train/grad_norm", "train/token_entropy", "train/response_length"):
        assert per_step[name] == {1, 2, 3}, name
    assert per_step["eval/accuracy"] == {0, 2, 3}  # at start, every 2 steps, at the end
    # one optimizer step per GRPO step on-policy, kept with its own index
    opt_steps = sorted({o for _, o, n, _ in rows if o is not None and n == "train/grad_norm"})
    assert opt_steps == [0, 1, 2]
    with sqlite3.connect(db) as conn:
        evals = conn.execute("SELECT step, n, decoding, subset_hash, template_hash, grader FROM evalresult").fetchall()
        samples = conn.execute("SELECT count(*) FROM sample WHERE kind = 'train'").fetchone()[0]
        ckpts = conn.execute("SELECT step, path, deleted FROM checkpoint ORDER BY step").fetchall()
    assert [e[0] for e in evals] == [0, 2, 3] and all(e[1] == 16 for e in evals)
    assert json.loads(evals[0][2])["greedy"] is True and evals[0][5].startswith("math-verify")
    assert samples == 3 * 4
    # retention keeps the newest (and the best by eval accuracy); the final one is a loadable HF dir
    final = [c for c in ckpts if c[0] == 3][0]
    assert final[2] == 0 and (Path(final[1]) / "model.safetensors").exists()
    assert (Path(final[1]) / "tokenizer.json").exists() and (Path(final[1]) / "trainer_state.pt").exists()


def test_off_policy_run_takes_several_optimizer_steps(tiny_model_dir, tmp_path):
    overrides = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "loop.n_grpo_steps": 2,
            "loop.epochs_per_rollout_batch": 2,
            "loop.train_batch_size": 8,
            "loop.gradient_accumulation_steps": 2,
            "eval.at_start": "false",
        },
    )
    out = run_cli(DIGIT_TRAIN + ["train", "addition", *overrides, "name=offp"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = metric_rows(tmp_path / "registry.db", "offp")
    opt_steps = sorted({o for _, o, n, _ in rows if o is not None and n == "train/grad_norm"})
    assert opt_steps == list(range(8))  # 2 GRPO steps x (2 epochs x 16 rollouts / 8 per batch)
    ratios = [v for _, o, n, v in rows if o is not None and n == "train/ratio_mean"]
    assert ratios and any(abs(r - 1.0) > 1e-6 for r in ratios)  # later updates are off-policy


def _wait_for_step(db: Path, name: str, step: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    row = conn.execute("SELECT last_step FROM run WHERE name = ?", (name,)).fetchone()
                if row and row[0] >= step:
                    return
            except sqlite3.OperationalError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"run {name} never reached step {step}")


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_same_result(tiny_model_dir, tmp_path):
    overrides = fast_overrides(
        tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 7, "checkpoint.every": 3, "checkpoint.keep_last": 1}
    )
    straight = run_cli(DIGIT_TRAIN + ["train", "addition", *overrides, "name=straight"], tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]

    # Killed by its own fault hook as step 6 starts (past the step-3 checkpoint, before the
    # end): a step takes a fraction of a second now, too quick to aim a kill at from outside.
    env = dict(os.environ, PYTHONPATH=str(REPO), GRPOCTL_FAULT="step-start@6:KILL")
    killed = trainer_zygote.run(
        DIGIT_TRAIN + ["train", "addition", *overrides, "name=killed"],
        tmp_path,
        env,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    db = tmp_path / "registry.db"
    assert run_status(db, "killed")[0] == "running"  # nobody marked it: it died

    resumed = run_cli(DIGIT_TRAIN + ["train", "--resume", "killed"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert run_status(db, "killed") == ("finished", None)

    def comparable(rows):
        return [(s, o, n, v) for s, o, n, v in rows if not n.startswith(("time/", "mem/"))]

    a, b = comparable(metric_rows(db, "straight")), comparable(metric_rows(db, "killed"))
    keys_b = [(s, o, n) for s, o, n, _ in b]
    assert len(keys_b) == len(set(keys_b)), "duplicate metric rows after resume"
    assert [(s, o, n) for s, o, n, _ in a] == keys_b, "steps differ (gaps or extra rows)"
    assert sorted({s for s, _, _, _ in b}) == list(range(0, 8))
    for (s, o, n, va), (_, _, _, vb) in zip(a, b, strict=True):
        assert va == pytest.approx(vb, rel=1e-5, abs=1e-6), (s, o, n)


def test_nan_loss_marks_run_diverged(tiny_model_dir, tmp_path):
    # An absurd learning rate (past optimizer.lr's range, which the harness lifts) blows the
    # weights up on the first update; the next loss is nan.
    overrides = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{"optimizer.lr": 1e30, "optimizer.max_grad_norm": 1e30, "loop.n_grpo_steps": 4, "checkpoint.every": 1},
    )
    out = run_cli(DIGIT_TRAIN + ["train", "addition", *overrides, "name=boom"], tmp_path, GRPOCTL_TEST_UNBOUNDED_LR="1")
    assert out.returncode == 1
    status, error = run_status(tmp_path / "registry.db", "boom")
    assert status == "diverged" and "non-finite" in error
    with sqlite3.connect(tmp_path / "registry.db") as conn:
        steps = [r[0] for r in conn.execute("SELECT step FROM checkpoint WHERE deleted = 0")]
    assert steps and max(steps) == 1  # the last good checkpoint is kept


def test_ctrl_c_checkpoints_marks_interrupted_and_resumes(tiny_model_dir, tmp_path):
    overrides = fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 40, "checkpoint.every": 100})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = trainer_zygote.spawn(DIGIT_TRAIN + ["train", "addition", *overrides, "name=ctrlc"], tmp_path, env)
    db = tmp_path / "registry.db"
    _wait_for_step(db, "ctrlc", 2, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 1
    status, error = run_status(db, "ctrlc")
    assert status == "interrupted" and "Ctrl-C" in error
    with sqlite3.connect(db) as conn:
        last_step = conn.execute("SELECT last_step FROM run WHERE name='ctrlc'").fetchone()[0]
        ckpt = conn.execute("SELECT max(step) FROM checkpoint WHERE deleted = 0").fetchone()[0]
    assert 2 <= last_step < 40 and ckpt == last_step  # the step in flight finished, then a checkpoint

    resumed = run_cli(DIGIT_TRAIN + ["train", "--resume", "ctrlc", "steps=41"], tmp_path)
    assert resumed.returncode == 2 and "takes no config file, overrides" in resumed.stderr
    resumed = run_cli(DIGIT_TRAIN + ["train", "--resume", "ctrlc"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert run_status(db, "ctrlc") == ("finished", None)
    steps = sorted({s for s, o, n, _ in metric_rows(db, "ctrlc") if n == "train/reward"})
    assert steps == list(range(1, 41))


def test_a_crash_marks_the_run_failed_with_its_error(tiny_model_dir, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), GRPOCTL_TEST_CRASH="1")
    out = trainer_zygote.run(
        DIGIT_TRAIN + ["train", "addition", *fast_overrides(tiny_model_dir, tmp_path), "name=crash"],
        tmp_path,
        env,
        timeout=300,
    )
    assert out.returncode != 0
    status, error = run_status(tmp_path / "registry.db", "crash")
    assert status == "failed" and "reward function crashed (test)" in error


def test_from_run_and_eval_of_its_checkpoint(tiny_model_dir, tmp_path):
    first = run_cli(
        DIGIT_TRAIN
        + ["train", "addition", *fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 1}), "name=parent"],
        tmp_path,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    child = run_cli(DIGIT_TRAIN + ["train", "--from", "parent", "lr=2e-3", "name=child"], tmp_path)
    assert child.returncode == 0, child.stderr[-2000:]
    db = tmp_path / "registry.db"
    with sqlite3.connect(db) as conn:
        parent_of, config = conn.execute("SELECT parent, config FROM run WHERE name='child'").fetchone()
        ckpt = conn.execute(
            "SELECT c.path FROM checkpoint c JOIN run r ON r.id = c.run_id WHERE r.name='child' AND c.deleted = 0"
        ).fetchone()[0]
    assert parent_of == "parent"
    config = json.loads(config)
    assert config["optimizer"]["lr"] == 2e-3 and config["rollout"]["group_size"] == 4  # parent's, overridden

    evaluated = run_cli(grpoctl_cmd("eval", ckpt, "--subset", "8"), tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "recorded for run child" in evaluated.stdout
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT e.n, e.step, e.checkpoint_path FROM evalresult e JOIN run r ON r.id = e.run_id "
            "WHERE r.name='child' AND e.checkpoint_path IS NOT NULL"
        ).fetchone()
    assert row[0] == 8 and row[1] == 1 and row[2].endswith("step-1")


def test_grading_errors_are_counted_each_step_and_flagged(tiny_model_dir, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), GRPOCTL_TEST_GRADER_ERRORS="1")
    overrides = fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 2, "checkpoint.every": 0})
    out = trainer_zygote.run(
        DIGIT_TRAIN + ["train", "addition", *overrides, "name=broken-grader"],
        tmp_path,
        env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    errors = {
        (s, n): v
        for s, o, n, v in metric_rows(tmp_path / "registry.db", "broken-grader")
        if n.endswith("/grading_errors") and o is None
    }
    # One failed grading per rollout (16 a step) and per eval problem (16, at steps 0 and 2).
    assert errors == {
        (1, "train/grading_errors"): 16,
        (2, "train/grading_errors"): 16,
        (0, "eval/grading_errors"): 16,
        (2, "eval/grading_errors"): 16,
    }
    shown = trainer_zygote.run(
        grpoctl_cmd("compare", "broken-grader", "--format", "json"),
        tmp_path,
        dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "grading errors@0" in json.loads(shown.stdout)["rows"][0]["health"]


def test_token_length_normalization_trains(tiny_model_dir, tmp_path):
    overrides = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{"loop.n_grpo_steps": 1, "eval.at_start": "false", "loss.length_normalization": "token"},
    )
    out = run_cli(DIGIT_TRAIN + ["train", "addition", *overrides, "name=token"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    losses = [v for s, o, n, v in metric_rows(tmp_path / "registry.db", "token") if n == "train/loss" and o is None]
    grads = [v for s, o, n, v in metric_rows(tmp_path / "registry.db", "token") if n == "train/grad_norm"]
    assert len(losses) == 1 and math.isfinite(losses[0]) and grads and all(g > 0 for g in grads)


def shortest(source: Path, dest: Path, key: str, n: int) -> Path:
    """The `n` records of a shared jsonl file with the shortest `key`, copied as they are:
    the tiny model has 1,024 positions, and one token per character."""
    lines = [line for line in source.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda line: len(json.loads(line)[key]))
    dest.write_text("\n".join(lines[:n]) + "\n")
    return dest


@pytest.mark.skipif(
    not (SHARED_DATA / "gsm8k_test.jsonl").exists() or not (SHARED_DATA / "math500_test.jsonl").exists(),
    reason="../shared/data is not there",
)
def test_train_on_gsm8k_and_evaluate_on_math500(tiny_model_dir, tmp_path):
    gsm8k = shortest(SHARED_DATA / "gsm8k_test.jsonl", tmp_path / "gsm8k_short.jsonl", "question", 64)
    math500 = shortest(SHARED_DATA / "math500_test.jsonl", tmp_path / "math500_short.jsonl", "problem", 24)
    overrides = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "loop.n_grpo_steps": 2,
            "data.source": "gsm8k",
            "data.train_path": gsm8k,
            "data.eval_source": "math",
            "data.eval_path": math500,
        },
    )
    out = run_cli(grpoctl_cmd("train", "addition", *overrides, "name=cross"), tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    db = tmp_path / "registry.db"
    with sqlite3.connect(db) as conn:
        evals = conn.execute("SELECT step, n, data_source, data_hash FROM evalresult ORDER BY step").fetchall()
        prompts = conn.execute("SELECT kind, prompt, ground_truth FROM sample").fetchall()
        ckpt = conn.execute("SELECT path FROM checkpoint WHERE deleted = 0 ORDER BY step DESC").fetchone()[0]
    from grpoctl.data import file_hash

    assert evals == [(0, 16, "math", file_hash(math500)), (2, 16, "math", file_hash(math500))]
    problems = {json.loads(line)["problem"] for line in math500.read_text().splitlines()}
    questions = {json.loads(line)["question"] for line in gsm8k.read_text().splitlines()}
    assert all(any(q in p for q in questions) for kind, p, _ in prompts if kind == "train")
    assert all(any(q in p for q in problems) for kind, p, _ in prompts if kind == "eval")
    assert {kind for kind, _, _ in prompts} == {"train", "eval"}

    # `grpoctl eval --data` evaluates on that file, in its own format, whatever the run trained on.
    for path, source, n in ((gsm8k, "gsm8k", 8), (math500, "math", 8)):
        evaluated = run_cli(grpoctl_cmd("eval", ckpt, "--data", str(path), "--subset", str(n)), tmp_path)
        assert evaluated.returncode == 0, evaluated.stderr[-2000:]
        with sqlite3.connect(db) as conn:
            row = conn.execute(
                "SELECT n, data_source, data_hash FROM evalresult WHERE checkpoint_path IS NOT NULL ORDER BY id DESC"
            ).fetchone()
        assert row == (n, source, file_hash(path))


def test_the_reading_commands_show_a_trained_run_and_write_nothing(trained_run):
    from cli import invoke
    from conftest import registry_rows

    db = str(trained_run / "registry.db")
    before = registry_rows(db)
    shown = invoke("runs", "show", "e2e", "--format", "json", "--db", db)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert [s for s, _ in document["metrics"]["train/reward"]] == [1, 2, 3]
    assert [e["step"] for e in document["evals"]] == [0, 2, 3]
    samples = invoke("runs", "samples", "e2e", "--step", "3", "--db", db)
    assert samples.returncode == 0 and "step 3" in samples.stdout, samples.stderr
    compared = invoke("compare", "e2e", "--format", "json", "--db", db)
    assert compared.returncode == 0, compared.stderr
    assert "e2e" in compared.stdout
    assert registry_rows(db) == before
