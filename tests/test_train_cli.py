"""`grpoctl train` and `eval` up to the point where training would start, in-process
(tests/cli.py): refusals of bad input, dry runs, the default eval set, --version. The
trainer itself, in real processes, is tests/test_train.py."""

from __future__ import annotations

import pytest
from cli import invoke
from conftest import REPO


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "foo=1"], "unknown config key 'foo'"),
        (["train", "lr=abc"], "optimizer.lr"),
        (["train", "rollout.group_size=3"], "divisible"),
        (["train", "loss=bogus"], "not one of"),
        (["train", "nonexistent.yaml"], "no config file"),
        (["train", "--resume", "nope"], "no registry"),
        (["eval", "/nonexistent/dir"], "not a model directory"),
        (["train", "--bogus-flag"], "No such option"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    out = invoke(*args, cwd=tmp_path, env={"GRPOCTL_DB": None})
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # no registry.db, no outputs/


def test_no_config_is_the_lab_and_addition_is_named(tmp_path):
    env = {"GRPOCTL_DB": None}
    default = invoke("train", "--dry-run", cwd=tmp_path, env=env)
    assert default.returncode == 0, default.stderr
    assert "\n  path: lab\n" in default.stdout and "\n  source: lab\n" in default.stdout
    assert default.stdout == invoke("train", "lab", "--dry-run", cwd=tmp_path, env=env).stdout
    overridden = invoke("train", "steps=7", "--dry-run", cwd=tmp_path, env=env)  # overrides alone: on the lab
    assert "\n  path: lab\n" in overridden.stdout and "\n  n_grpo_steps: 7\n" in overridden.stdout
    addition = invoke("train", "addition", "--dry-run", cwd=tmp_path, env=env)
    assert addition.returncode == 0 and "\n  path: tiny\n" in addition.stdout
    assert addition.stdout == invoke("train", str(REPO / "experiments" / "tiny.yaml"), "--dry-run", cwd=tmp_path).stdout
    assert list(tmp_path.iterdir()) == []
    # a file of the name wins over the built-in
    (tmp_path / "lab").write_text("loop:\n  n_grpo_steps: 3\n")
    mine = invoke("train", "lab", "--dry-run", cwd=tmp_path, env=env)
    assert "\n  path: tiny\n" in mine.stdout and "\n  n_grpo_steps: 3\n" in mine.stdout


def test_dry_run_prints_sizes_without_writing(tmp_path):
    out = invoke("train", str(REPO / "experiments" / "tiny.yaml"), "--dry-run", cwd=tmp_path, env={"GRPOCTL_DB": None})
    assert out.returncode == 0, out.stderr
    assert "optimizer steps per GRPO step" in out.stdout.lower() or "optimizer_steps" in out.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_default_eval_set_is_held_out_from_training_and_warm_start():
    from grpoctl.config import load_config
    from grpoctl.data import split_of
    from grpoctl.data.run_data import load_run_data

    for seed in (0, 1, 2):
        data = load_run_data(load_config(None, [f"seed={seed}"]))
        assert len(data.eval) >= 256
        train_questions = {ex.question for ex in data.train}
        assert not train_questions & {ex.question for ex in data.eval}
        # the warm-start draws only from the train split, so it never sees these either
        assert all(split_of(ex.question) == "eval" for ex in data.eval)
        again = load_run_data(load_config(None, [f"seed={seed}"]))
        assert [ex.id for ex in again.eval] == [ex.id for ex in data.eval]  # deterministic subset


@pytest.mark.slow
def test_dry_run_of_from_and_resume_shows_the_runs_config(tmp_path):
    from conftest import registry_rows

    from grpoctl.config import config_diff, load_config, to_dict
    from grpoctl.registry import Registry
    from grpoctl.rules import config_hash

    db = str(tmp_path / "registry.db")
    cfg = load_config(None, ["lr=0.0123", "group_size=16", "steps=7"])
    with Registry(db) as registry:
        run = registry.create_run(
            name="parent",
            config=to_dict(cfg),
            config_diff=config_diff(cfg),
            config_hash=config_hash(cfg),
            seed=0,
            total_steps=7,
        )
        registry.set_status(run.id, "interrupted")
    before = registry_rows(db)
    for args, lr in (
        (["--resume", "parent"], "0.0123"),
        (["--from", "parent"], "0.0123"),
        (["--from", "parent", "lr=0.5"], "0.5"),
    ):
        out = invoke("train", *args, "--dry-run", "--db", db, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        config = out.stdout.split("derived sizes:")[0]
        assert f"\n  lr: {lr}\n" in config and "\n  group_size: 16\n" in config and "\n  n_grpo_steps: 7\n" in config
        assert "prompts_per_rollout_batch: 16" in out.stdout  # 256 rollouts / 16 per group
    assert registry_rows(db) == before  # a dry run writes nothing
    missing = invoke("train", "--from", "nope", "--dry-run", "--db", db, cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip() == "error: no run named 'nope'"


def test_version():
    out = invoke("--version")
    from grpoctl import __version__

    assert out.returncode == 0 and out.stdout == f"grpoctl {__version__}\n"
