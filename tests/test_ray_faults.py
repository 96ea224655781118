"""Members that lose their trainer or their Ray worker mid-run, on a real Ray cluster
(127.0.0.1, 2 fake GPUs) with a PostgreSQL registry and real `grpoctl train` members.

Every trainer stops itself once step 3's rollouts exist (GRPOCTL_FAULT, see
grpoctl/train/faults.py; a checkpoint of step 2 exists by then), and the test acts on it
there, so no outcome depends on timing:
- member A: its trainer is killed (SIGKILL). The member records the run `interrupted`
  and raises MemberLost; Ray runs the member again, which claims the run and resumes it
  from step 2.
- member B: its Ray worker is killed (SIGKILL), the trainer left behind. The trainer gets
  SIGTERM from the kernel (its parent died, see grpoctl/sweep/exec_trainer.py), finishes
  step 3, checkpoints and ends `interrupted`; meanwhile Ray runs the member again, which
  waits for that trainer to let go of the run before it claims and resumes it.

Both then finish, and each run's rows are exactly those of the same run never
interrupted: the same (step, opt_step, name) metric keys with none duplicated, values to
rtol 1e-5, the same stored completions and evals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import drop_pg_database, fast_overrides, fresh_pg_database
from ray_cluster import (
    FAULT_CONFIG,
    FAULT_LRS,
    FAULT_STEPS,
    local_cluster,
    lr_sweep_argv,
    need_ray,
    recorder,
    seen,
    start_straight_runs,
    stopped,
    straight_rows,
)
from run_rows import assert_same_rows, url_rows

need_ray()

from grpoctl.registry import Registry  # noqa: E402

TIMEOUT_S = 600
STEPS, LRS = FAULT_STEPS, FAULT_LRS
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ray-faults")
    with local_cluster(
        recorder(workdir) | {"GRPOCTL_FAULT": "step-rollouts@3:STOP"}, num_cpus=4, num_gpus=2
    ) as address:
        yield address, workdir


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_until_orphaned(pid: int, parent: int, timeout_s: float = 60.0) -> None:
    """Until the kernel has reparented `pid` away from its SIGKILLed `parent`.

    A killed process exits asynchronously: tearing down a Ray worker's threads and memory
    takes a while on a loaded machine. The parent-death SIGTERM is sent in that same exit
    (when the child is reparented), so a trainer woken before it could run its last steps
    and finish the run before the signal came: then the retry finds the run finished and
    never runs (seen once in CI). Waking it only once it is reparented makes the premise
    hold: its SIGTERM is pending when it resumes."""
    deadline = time.monotonic() + timeout_s
    while parent_of(pid) == parent:
        assert time.monotonic() < deadline, f"trainer {pid} still has its killed parent {parent}"
        time.sleep(0.01)


def run_of(args: str) -> str:
    """The run a trainer works on, from its arguments: --resume RUN, or its config file."""
    words = args.split()
    if "--resume" in words:
        return words[words.index("--resume") + 1]
    return yaml.safe_load(Path(words[0]).read_text())["name"]


def test_a_killed_trainer_and_a_killed_worker_are_resumed_without_a_duplicate_row(
    cluster, pg_admin_url, tiny_model_dir, tmp_path
):
    address, workdir = cluster
    db = fresh_pg_database(pg_admin_url)
    try:
        driver = subprocess.Popen(
            lr_sweep_argv(
                address, db, LRS, fast_overrides(tiny_model_dir, tmp_path, **FAULT_CONFIG), "--max-retries", "3"
            ),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ,
        )
        straight = straight_rows(start_straight_runs(tiny_model_dir, tmp_path), TIMEOUT_S)  # meanwhile
        a, b = (f"lr-sweep-lr={lr}-s0" for lr in LRS)
        done: set[int] = set()
        holds: dict[str, int] = {}
        killed_worker = None
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while driver.poll() is None and time.monotonic() < deadline:
                for pid, (_, args) in seen(workdir).items():
                    if pid in done or not stopped(pid):
                        continue
                    done.add(pid)
                    name = run_of(args)
                    holds[name] = holds.get(name, 0) + 1
                    if name == a and holds[name] == 1:
                        os.kill(pid, signal.SIGKILL)  # the trainer dies mid-step
                    elif name == b and holds[name] == 1:
                        killed_worker = parent_of(pid)
                        os.kill(killed_worker, signal.SIGKILL)  # its Ray worker dies; the trainer is orphaned
                        wait_until_orphaned(pid, killed_worker)
                        os.kill(pid, signal.SIGCONT)
                    else:
                        os.kill(pid, signal.SIGCONT)  # a resumed run reaching step 3 again: let it be
                time.sleep(0.1)
            out, _ = driver.communicate(timeout=60)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        assert driver.returncode == 0, out
        # a: killed at step 3, resumed from 2 to pass it again. b: its orphan finishes step 3 and
        # checkpoints on the parent-death SIGTERM, so the retry resumes from 3 -- unless Ray's
        # cleanup of the dead worker's children sends a second SIGTERM first, which stops it at
        # once (as a second signal must), and the retry resumes from 2. Either way no row is
        # lost or written twice (below).
        assert holds[a] == 2 and holds[b] in (1, 2) and len(holds) == 2, holds
        assert killed_worker is not None

        registry = Registry(db)
        for lr, name in zip(LRS, (a, b), strict=True):
            run = registry.get_run(name)
            assert (run.status, run.last_step) == ("finished", STEPS), (name, run.status, run.error)
            assert_same_rows(url_rows(db, name), straight[lr])
            log = "".join(t for _, _, t in registry.log_chunks(name))
            assert log.count(" on ") >= 2 and log.count("--resume " + name) == 1, log  # two attempts, one resumed
        # The orphan heard its parent die (into the node's log file, which it writes itself).
        assert "SIGTERM: stopping after this step" in (tmp_path / "outputs/sweeps/lr-sweep" / f"{b}.log").read_text()
        trainers = [run_of(args) for _, args in seen(workdir).values()]
        assert sorted(trainers) == sorted([a, a, b, b])
        assert len(registry.list_runs()) == 2
        registry.close()
    finally:
        drop_pg_database(pg_admin_url, db)
