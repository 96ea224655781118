"""`grpoctl runs ...` as a user runs it, against a registry (a SQLite file in the project
directory, or a PostgreSQL database named by $GRPOCTL_DB): in-process (tests/cli.py),
except the check of what a fresh process imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli import Result, invoke
from conftest import registry_rows

from grpoctl.registry import Registry

ROOT = Path(__file__).resolve().parents[1]


def grpoctl(*args: str, cwd: Path, input: str | None = None, **env) -> Result:
    # $GRPOCTL_DB is the `project` fixture's registry (for SQLite: ./registry.db in cwd).
    return invoke(*args, cwd=cwd, input=input, env=env)


def assert_one_line_error(result: Result, fragment: str) -> None:
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.fixture
def project(tmp_path, db_url, monkeypatch):
    """A project directory whose registry ($GRPOCTL_DB) holds three runs, one with everything."""
    monkeypatch.setenv("GRPOCTL_DB", db_url)
    with Registry(db_url) as registry:
        out = tmp_path / "runs" / "ablation-lr3"
        (out / "step_2").mkdir(parents=True)
        (out / "step_2" / "model.safetensors").write_text("weights")
        run = registry.create_run(
            name="ablation-lr3",
            group="ablation",
            variant="lr=3e-05",
            config={"lr": 3e-5, "loss_type": "grpo_clip"},
            config_diff={"lr": 3e-5},
            config_hash="h-lr3",
            seed=1,
            total_steps=4,
            output_dir=str(out),
        )
        for step in range(3):
            registry.log_step(
                run.id,
                step,
                {
                    "train/reward": 0.25 * step,
                    "train/grad_norm": float("nan") if step == 1 else 1.0,
                    "time/rollout_tokens_per_s": 1500.0 + step,
                    "time/train_tokens_per_s": 4200.0,
                },
                samples=[
                    dict(
                        prompt="Solve [b]: what is 2+2?",
                        response="<answer>4</answer>",
                        ground_truth="4",
                        reward=1.0,
                        format_reward=1.0,
                        answer_reward=1.0,
                        kind="train",
                    )
                ],
            )
        registry.add_eval(
            run_id=run.id,
            step=2,
            n=64,
            accuracy=0.375,
            format_rate=0.9,
            mean_response_length=123.0,
            data_source="synthetic",
            grader="exact",
        )
        registry.add_checkpoint(run.id, 2, str(out / "step_2"), eval_accuracy=0.375)
        registry.set_status(run.id, "finished")
        registry.create_run(
            name="ablation-lr1", group="ablation", config={}, config_diff={}, config_hash="h-lr1", seed=1, total_steps=4
        )
        registry.create_run(name="solo", config={}, config_diff={}, config_hash="h", seed=0, total_steps=4)
    return tmp_path


def test_list_shows_every_run_with_headline_figures(project, monkeypatch, db_url):
    if not db_url.startswith("postgresql"):
        monkeypatch.delenv("GRPOCTL_DB")  # ./registry.db by default
    result = grpoctl("runs", "list", cwd=project)
    assert result.returncode == 0, result.stderr
    for text in ("3 runs", "ablation-lr3", "ablation-lr1", "solo", "finished", "2/4", "0.375", "0.500"):
        assert text in result.stdout
    only = grpoctl("runs", "list", "--group", "ablation", "--status", "finished", cwd=project)
    assert "ablation-lr3" in only.stdout and "ablation-lr1" not in only.stdout


def test_list_of_an_empty_registry_is_friendly(tmp_path, db_url):
    Registry(db_url).close()
    result = grpoctl("runs", "list", cwd=tmp_path, GRPOCTL_DB=db_url)
    assert result.returncode == 0 and "No runs yet" in result.stdout


def test_show_text_and_json(project):
    text = grpoctl("runs", "show", "ablation-lr3", cwd=project)
    assert text.returncode == 0, text.stderr
    for fragment in ("ablation-lr3", "lr = 3e-05", "train/reward", "0.375", "synthetic", "step_2"):
        assert fragment in text.stdout
    for name, last in (("time/rollout_tokens_per_s", "1502"), ("time/train_tokens_per_s", "4200")):
        assert any(name in line and last in line for line in text.stdout.splitlines()), text.stdout

    result = grpoctl("runs", "show", "ablation-lr3", "--format", "json", cwd=project)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # stdout is JSON and nothing else
    assert document["run"]["name"] == "ablation-lr3"
    assert document["run"]["config"] == {"lr": 3e-5, "loss_type": "grpo_clip"}
    assert document["run"]["status"] == "finished"
    assert document["metrics"]["train/reward"] == [[0, 0.0], [1, 0.25], [2, 0.5]]
    assert document["metrics"]["train/grad_norm"][1] == [1, None]  # NaN is null in JSON
    assert document["evals"][0]["accuracy"] == 0.375
    assert document["checkpoints"][0]["path"].endswith("step_2")


def test_samples_are_readable(project):
    result = grpoctl("runs", "samples", "ablation-lr3", "--limit", "1", cwd=project)
    assert result.returncode == 0, result.stderr
    for fragment in ("step 2", "Solve [b]: what is 2+2?", "<answer>4</answer>", "ground truth", "reward 1.00"):
        assert fragment in result.stdout
    none = grpoctl("runs", "samples", "ablation-lr3", "--kind", "eval", cwd=project)
    assert none.returncode == 0 and "no eval samples" in none.stdout


def test_tag_then_filter_then_untag(project):
    assert grpoctl("runs", "tag", "solo", "best", cwd=project).returncode == 0
    listed = grpoctl("runs", "list", "--tag", "best", cwd=project)
    assert "solo" in listed.stdout and "ablation" not in listed.stdout
    assert grpoctl("runs", "tag", "solo", "best", "--remove", cwd=project).returncode == 0
    assert "No runs match" in grpoctl("runs", "list", "--tag", "best", cwd=project).stdout


def test_rm_asks_then_deletes_rows_and_files(project, db_url):
    out = project / "runs" / "ablation-lr3"
    declined = grpoctl("runs", "rm", "ablation-lr3", cwd=project, input="n\n")
    assert declined.returncode != 0 and out.exists()
    result = grpoctl("runs", "rm", "ablation-lr3", "--yes", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "Deleted run 1 'ablation-lr3'" in result.stdout and f"Removed {out}" in result.stdout
    assert not out.exists()
    with Registry(db_url) as registry:
        assert [r.name for r in registry.list_runs()] == ["solo", "ablation-lr1"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("runs", "show", "nope"), "no run named 'nope'"),
        (("runs", "show", "ablation"), "'ablation' matches 2 runs: ablation-lr1, ablation-lr3"),
        (("runs", "show", "solo", "--format", "yaml"), "--format must be 'text' or 'json'"),
        (("runs", "samples", "solo", "--kind", "test"), "--kind must be 'train' or 'eval'"),
        (("runs", "list", "--status", "done"), "unknown status 'done'"),
        (("runs", "list", "--db", "missing.db"), "no registry at missing.db"),
        (("runs", "rm", "nope", "--yes"), "no run named 'nope'"),
        (("runs", "list", "--limit", "many"), "--limit"),
        (("runs", "show"), "Missing argument 'RUN'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project, db_url, args, fragment):
    before = registry_rows(db_url)
    assert_one_line_error(grpoctl(*args, cwd=project), fragment)
    assert not (project / "missing.db").exists()  # reading never creates a registry
    assert registry_rows(db_url) == before  # and bad input writes nothing


def test_help_and_no_arguments_exit_0(tmp_path):
    assert grpoctl("--help", cwd=tmp_path).returncode == 0
    bare = grpoctl("runs", cwd=tmp_path)
    assert bare.returncode == 0 and "list" in bare.stdout and "Traceback" not in bare.stderr


@pytest.mark.slow
def test_reading_commands_do_not_import_torch(tmp_path):
    code = "import sys, grpoctl.registry, grpoctl.cli.runs; sys.exit('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
