"""Faults during a run, and what `--resume` makes of them.

Each test breaks a real `grpoctl train` (a random tiny model with a reward it can earn,
tests/digit_reward_train.py) in one way: kill -9 mid-step or while a checkpoint is being
written, SIGINT or SIGTERM once or twice, checkpoint files deleted, a checkpoint
directory that turns read-only. Then it resumes (or sees the resume refused in one line)
and checks that the run's rows are exactly those of an uninterrupted run of the same
seed: the same (step, opt_step, name) metric keys with no duplicates, values to rtol
1e-5, the same stored completions and evals.

Where a fault must land at a given point of a step, the process stops itself there
(GRPOCTL_FAULT, see grpoctl/train/faults.py) and the test acts while it is stopped, so
no outcome depends on timing.

The broken and resumed trainers are children of the tests' fork server
(tests/trainer_zygote.py: the imports are paid once, not per trainer); the
uninterrupted run they are compared with is a fresh interpreter, so every comparison
also checks that the two are the same.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trainer_zygote
from conftest import REPO, fast_overrides, shared_once
from run_rows import assert_same_rows, rows

DIGIT_TRAIN = [sys.executable, str(REPO / "tests" / "digit_reward_train.py")]
STEPS = 5
# Checkpoints at steps 2, 4 and 5 (the last), all kept; evals at 0, 2, 4 and 5.
FAULT_CONFIG = {"loop.n_grpo_steps": STEPS, "checkpoint.every": 2, "checkpoint.keep_last": 3, "eval.every": 2}
TIMEOUT_S = 300

pytestmark = pytest.mark.slow


def overrides(model_dir: Path, workdir: Path, **extra) -> list[str]:
    return fast_overrides(model_dir, workdir, **(FAULT_CONFIG | extra))


def env(fault: str | None = None) -> dict:
    out = dict(os.environ, PYTHONPATH=str(REPO))
    out.pop("GRPOCTL_DB", None)
    if fault:
        out["GRPOCTL_FAULT"] = fault
    return out


def run(args: list[str], cwd: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    return trainer_zygote.run(DIGIT_TRAIN + args, cwd, env(fault), timeout=TIMEOUT_S)


def start(args: list[str], cwd: Path, fault: str) -> subprocess.Popen:
    # Output to files, not pipes: a stopped reader must never block the trainer.
    out, err = open(cwd / "stdout.txt", "w"), open(cwd / "stderr.txt", "w")
    return trainer_zygote.spawn(DIGIT_TRAIN + args, cwd, env(fault), stdout=out, stderr=err)


def stderr_of(cwd: Path) -> str:
    return (cwd / "stderr.txt").read_text()


def wait_stopped(proc: subprocess.Popen, cwd: Path, timeout: float = TIMEOUT_S) -> None:
    """Until the process has stopped itself at its fault point (state T in /proc)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode} before its fault point: {stderr_of(cwd)[-2000:]}"
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the process never reached its fault point")


def signal_while_stopped(proc: subprocess.Popen, sig: int) -> None:
    """Deliver `sig` as the process continues from its fault point: the handler runs there."""
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)


def wait(proc: subprocess.Popen, cwd: Path) -> int:
    try:
        return proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running: {stderr_of(cwd)[-2000:]}") from None


# --------------------------------------------------------------------------- what a run recorded


def status(db: Path, name: str) -> tuple:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT status, error, last_step FROM run WHERE name = ?", (name,)).fetchone()


def live_checkpoints(db: Path, name: str) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT c.step, c.path FROM checkpoint c JOIN run r ON r.id = c.run_id "
            "WHERE r.name = ? AND c.deleted = 0 ORDER BY c.step",
            (name,),
        ).fetchall()


def dump(db: Path) -> list[str]:
    """The registry's logical content (byte comparison would see SQLite fold its WAL in)."""
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict:
    return straight_rows(tmp_path_factory)


def straight_rows(tmp_path_factory) -> dict:
    """The rows of the same run, never interrupted: trained once for all workers, on its own
    copy of the tiny model (the same seed, so the same weights as `tiny_model_dir`)."""
    from grpoctl.tiny.model import create_tiny_model_dir

    def build(workdir: Path) -> None:
        model = create_tiny_model_dir(workdir / "model", seed=0)
        args = ["train", "addition", *overrides(model, workdir), "name=straight"]
        # A fresh interpreter, unlike the runs compared with it.
        out = subprocess.run(
            DIGIT_TRAIN + args, cwd=workdir, env=env(), capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert out.returncode == 0, out.stderr[-2000:]

    return rows(shared_once(tmp_path_factory, "faults-straight", build) / "registry.db", "straight")


def resume_and_compare(name: str, workdir: Path, straight: dict, *extra: str) -> None:
    out = run(["train", "--resume", name, *extra], workdir)
    assert out.returncode == 0, out.stderr[-2000:]
    assert status(workdir / "registry.db", name)[:2] == ("finished", None)
    assert_same_rows(rows(workdir / "registry.db", name), straight)
    assert not list(workdir.rglob("*.tmp")), "a half-written checkpoint was left behind"


# --------------------------------------------------------------------------- kill -9


@pytest.mark.parametrize("point", ["step-train@4", "checkpoint-write@4", "checkpoint-rename@4"])
def test_kill_9_mid_step_or_mid_checkpoint_then_resume(point, tiny_model_dir, tmp_path, straight):
    """Killed mid-step (after its rollouts, before its update), before a checkpoint is
    written, or between writing it (step-4.tmp complete) and renaming it into place."""
    out = run(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=killed"], tmp_path, fault=f"{point}:KILL"
    )
    assert out.returncode == -signal.SIGKILL
    db = tmp_path / "registry.db"
    state, _, last_step = status(db, "killed")
    assert state == "running"  # nobody could mark it: it died
    assert last_step == (3 if point.startswith("step") else 4)  # step 4 is committed before its checkpoint
    assert [s for s, _ in live_checkpoints(db, "killed")] == [2]
    if point == "checkpoint-rename@4":
        assert (Path(live_checkpoints(db, "killed")[0][1]).parent / "step-4.tmp" / "trainer_state.pt").exists()
    resume_and_compare("killed", tmp_path, straight)


def test_kill_9_between_the_eval_and_the_step_commit_leaves_neither_row(tiny_model_dir, tmp_path, straight):
    """Step 4 evaluates; killed once its eval is done but before the step is committed, the
    registry holds neither the eval nor the step (no eval without its step for compare to read)."""
    out = run(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=killed"], tmp_path, fault="step-record@4:KILL"
    )
    assert out.returncode == -signal.SIGKILL
    db = tmp_path / "registry.db"
    assert status(db, "killed")[2] == 3
    with sqlite3.connect(db) as conn:
        evals = [s for (s,) in conn.execute("SELECT step FROM evalresult ORDER BY step")]
        steps = sorted(s for (s,) in conn.execute("SELECT DISTINCT step FROM metric"))
    assert evals == [0, 2] and steps == [0, 1, 2, 3]
    resume_and_compare("killed", tmp_path, straight)


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_finishes_the_step_checkpoints_and_resumes(sig, tiny_model_dir, tmp_path, straight):
    proc = start(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=once"], tmp_path, fault="step-rollouts@3:STOP"
    )
    wait_stopped(proc, tmp_path)
    signal_while_stopped(proc, sig)
    assert wait(proc, tmp_path) == 1
    db = tmp_path / "registry.db"
    state, error, last_step = status(db, "once")
    assert state == "interrupted" and error == (
        "interrupted by the user (Ctrl-C)" if sig == signal.SIGINT else "interrupted by SIGTERM"
    )
    assert last_step == 3 and [s for s, _ in live_checkpoints(db, "once")] == [2, 3]  # step 3 finished, then saved
    resume_and_compare("once", tmp_path, straight)


@pytest.mark.parametrize(
    "first, second", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT)]
)
def test_a_second_signal_stops_at_once_and_resume_still_works(first, second, tiny_model_dir, tmp_path, straight):
    proc = start(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=twice"],
        tmp_path,
        fault="step-rollouts@3:STOP,step-train@3:STOP",
    )
    wait_stopped(proc, tmp_path)
    signal_while_stopped(proc, first)  # handled after step 3's rollouts: "stopping after this step"
    wait_stopped(proc, tmp_path)  # step 3 is about to update the weights
    signal_while_stopped(proc, second)
    assert wait(proc, tmp_path) == 1
    db = tmp_path / "registry.db"
    state, error, last_step = status(db, "twice")
    assert state == "interrupted" and "stopped at once by a second signal" in error
    assert last_step == 2 and [s for s, _ in live_checkpoints(db, "twice")] == [2]  # step 3 left no trace
    assert "stopping after this step" in stderr_of(tmp_path)
    resume_and_compare("twice", tmp_path, straight)


def test_sigterm_from_outside_during_a_plain_run(tiny_model_dir, tmp_path, straight):
    """What a scheduler does: SIGTERM at whatever moment, with no fault point involved."""
    args = ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=preempted"]
    proc = trainer_zygote.spawn(
        DIGIT_TRAIN + args, tmp_path, env(), stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr.txt", "w")
    )
    db = tmp_path / "registry.db"
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline and proc.poll() is None:
        try:
            if db.exists() and (status(db, "preempted") or ("", "", -1))[2] >= 1:
                break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # at step 1 or 2: four steps (seconds) before the end
    code = wait(proc, tmp_path)
    state, error, last_step = status(db, "preempted")
    assert code == 1 and state == "interrupted" and error == "interrupted by SIGTERM"
    assert last_step < STEPS and max(s for s, _ in live_checkpoints(db, "preempted")) == last_step
    resume_and_compare("preempted", tmp_path, straight)


@pytest.mark.parametrize("point, saved", [("step-start@4", 3), ("step-rollouts@4", 3), ("step-train@4", 4)])
def test_checkpoint_now_abandons_a_step_that_has_not_updated(point, saved, tiny_model_dir, tmp_path, straight):
    """runtime.on_signal=checkpoint_now: before step 4 updates the weights (at its start, or
    with its prompts drawn and rollouts generated) the step is dropped, the data and RNG
    rewound, and step 3 (which had no checkpoint) saved; once step 4 is updating, it
    finishes first."""
    args = [
        "train",
        "addition",
        *overrides(tiny_model_dir, tmp_path, **{"runtime.on_signal": "checkpoint_now"}),
        "name=now",
    ]
    proc = start(args, tmp_path, fault=f"{point}:STOP")
    wait_stopped(proc, tmp_path)
    signal_while_stopped(proc, signal.SIGTERM)
    assert wait(proc, tmp_path) == 1
    db = tmp_path / "registry.db"
    state, error, last_step = status(db, "now")
    assert state == "interrupted" and error == "interrupted by SIGTERM"
    assert last_step == saved and [s for s, _ in live_checkpoints(db, "now")] == [2, saved]
    assert ("abandoned step 4" in stderr_of(tmp_path)) == (saved == 3)
    resume_and_compare("now", tmp_path, straight)


# --------------------------------------------------------------------------- files gone or unwritable


def test_deleted_checkpoint_files_are_named_and_can_be_skipped(tiny_model_dir, tmp_path, straight):
    proc = start(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=lost"], tmp_path, fault="step-rollouts@4:STOP"
    )
    wait_stopped(proc, tmp_path)
    signal_while_stopped(proc, signal.SIGTERM)  # step 4 finishes and is saved; the run ends interrupted
    assert wait(proc, tmp_path) == 1
    db = tmp_path / "registry.db"
    (_, step2), (_, step4) = live_checkpoints(db, "lost")
    for name in ("model.safetensors", "trainer_state.pt"):
        (Path(step4) / name).unlink()
    before = dump(db)

    refused = run(["train", "--resume", "lost"], tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "step 4 checkpoint are missing" in line and "--skip-missing-checkpoints" in line and "step 2" in line
    assert dump(db) == before  # a refused resume writes nothing:
    assert status(db, "lost")[:2] == ("interrupted", "interrupted by SIGTERM")  # the run's status stays true

    resume_and_compare("lost", tmp_path, straight, "--skip-missing-checkpoints")


def test_all_checkpoint_files_deleted_is_refused_in_one_line(tiny_model_dir, tmp_path):
    out = run(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=bare"], tmp_path, fault="step-train@5:KILL"
    )
    assert out.returncode == -signal.SIGKILL
    db = tmp_path / "registry.db"
    for _, path in live_checkpoints(db, "bare"):
        subprocess.run(["rm", "-rf", path], check=True)
    before = dump(db)
    for extra in ([], ["--skip-missing-checkpoints"]):
        refused = run(["train", "--resume", "bare", *extra], tmp_path)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "steps 4, 2" in line and "--from bare" in line
        assert dump(db) == before


def _make_read_only(path: Path):
    """Unwritable even for root (the immutable flag); by mode otherwise. Returns the undo."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o555)
    return lambda: path.chmod(0o755)


def test_checkpoint_directory_turning_read_only_fails_cleanly_then_resumes(tiny_model_dir, tmp_path, straight):
    proc = start(
        ["train", "addition", *overrides(tiny_model_dir, tmp_path), "name=ro"],
        tmp_path,
        fault="checkpoint-write@4:STOP",
    )
    wait_stopped(proc, tmp_path)
    db = tmp_path / "registry.db"
    run_dir = Path(live_checkpoints(db, "ro")[0][1]).parent
    undo = _make_read_only(run_dir)
    try:
        if os.access(run_dir, os.W_OK):
            proc.kill()
            pytest.skip("cannot make a directory read-only here")
        proc.send_signal(signal.SIGCONT)
        assert wait(proc, tmp_path) == 1
        assert "Traceback" not in stderr_of(tmp_path)
        state, error, last_step = status(db, "ro")
        assert state == "failed" and "cannot write the step 4 checkpoint" in error and "\n" not in error
        assert last_step == 4 and [s for s, _ in live_checkpoints(db, "ro")] == [2]

        before = dump(db)
        refused = run(["train", "--resume", "ro"], tmp_path)  # still read-only: refused before anything
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "not writable" in refused.stderr and dump(db) == before
    finally:
        undo()
    resume_and_compare("ro", tmp_path, straight)
