"""A throwaway Ray cluster for the tests: one node on 127.0.0.1, with as many fake GPUs as
asked (Ray hands each `num_gpus=1` task its own CUDA_VISIBLE_DEVICES; the trainers run on
CPU whatever it says), token auth off (nothing listens beyond loopback).

The cluster's worker processes inherit this process's environment as it is when the
cluster starts, which is how the tests hand the trainers their settings: the train
command ($GRPOCTL_TRAIN_CMD, a recorder around tests/digit_reward_train.py, see
`recorder`) and fault points ($GRPOCTL_FAULT). Sweeps then join it with
`grpoctl sweep ... --executor ray --ray-address ADDRESS`, as on a real cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import trainer_zygote
from conftest import fast_overrides, record_service_start
from run_rows import url_rows

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
# Loopback only, no token: a cluster that nothing beyond this machine can reach.
LOCAL_ONLY = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

# Runs as `grpoctl train` for the members: notes which devices and command each trainer
# process saw, then becomes tests/digit_reward_train.py in the same process (so that
# the trainer is still the member's direct child, as `grpoctl train` would be).
# Where $RAYTEST_FAULTS names a directory, a file there named after this machine's
# hostname holds the $GRPOCTL_FAULT its trainers get (tests/cluster.py, `set_fault`): a
# fault for one node, set between tests without restarting the node.
RECORDER = r"""
import os, runpy, socket, sys
path = os.path.join(os.environ["RAYTEST_RECORD"], f"{os.getpid()}")
with open(path + ".tmp", "w") as out:
    out.write(os.environ.get("CUDA_VISIBLE_DEVICES", "-") + "\n" + " ".join(sys.argv[1:]) + "\n")
os.replace(path + ".tmp", path + ".txt")  # whole, for a test that reads it meanwhile
faults = os.environ.get("RAYTEST_FAULTS")
fault = os.path.join(faults, socket.gethostname()) if faults else None
if fault and os.path.exists(fault):
    os.environ["GRPOCTL_FAULT"] = open(fault).read().strip()
script = os.path.join(os.environ["RAYTEST_REPO"], "tests", "digit_reward_train.py")
sys.argv = [script, "train", *sys.argv[1:]]
runpy.run_path(script, run_name="__main__")
"""


# The fault tests' sweep (test_ray_faults, test_cluster): two members, one per learning
# rate, each a run of FAULT_STEPS steps with checkpoints at 2, 4 and 5, all kept, and evals
# at 0, 2, 4 and 5: a trainer held at step 3 (a fault point) has a checkpoint to resume from.
FAULT_STEPS = 5
FAULT_CONFIG = {"loop.n_grpo_steps": FAULT_STEPS, "checkpoint.every": 2, "checkpoint.keep_last": 3, "eval.every": 2}
FAULT_LRS = ("1e-3", "2e-3")


def start_straight_runs(model: Path, workdir: Path) -> dict[str, tuple[Path, object]]:
    """Each fault-sweep member's run trained by plain `grpoctl train` (the members' reward
    script) on SQLite, never interrupted, started here: {lr: (its directory, its process)}.
    Their rows are what every fault test's members must end with (`straight_rows`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOCTL_FAULT", "GRPOCTL_DB")}
    env["PYTHONPATH"] = str(REPO)
    procs = {}
    for lr in FAULT_LRS:
        where = workdir / f"straight-{lr}"
        where.mkdir()
        args = fast_overrides(model, where, **FAULT_CONFIG, **{"optimizer.lr": lr}) + ["name=straight"]
        cmd = [sys.executable, str(REPO / "tests" / "digit_reward_train.py"), "train", "addition", *args]
        # a child of the tests' fork server: the imports are paid once
        procs[lr] = (where, trainer_zygote.spawn(cmd, where, env, stdout=subprocess.DEVNULL))
    return procs


def straight_rows(procs: dict[str, tuple[Path, object]], timeout: float) -> dict[str, dict]:
    """{lr: rows} of the runs `start_straight_runs` started, once they end."""
    out = {}
    for lr, (where, proc) in procs.items():
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-2000:]
        out[lr] = url_rows(str(where / "registry.db"), "straight")
    return out


def lr_sweep_argv(address: str, db: str, values: tuple[str, ...], overrides: list[str], *extra: str) -> list[str]:
    """`grpoctl sweep lr` over `values` on the Ray cluster at `address`, as the fault tests run it."""
    # --config addition: the straight runs' task (a sweep without one builds on the lab, as train does)
    argv = [sys.executable, "-m", "grpoctl", "sweep", "lr", "--values", ",".join(values), "--config", "addition"]
    return (
        argv
        + [*overrides]
        + [
            "--executor",
            "ray",
            "--ray-address",
            address,
            "--db",
            db,
            *extra,
        ]
    )


def need_ray():
    """Ray, or a skip (a failure under CI=true, where the `test` extra must have brought it)."""
    try:
        import ray
    except ImportError:
        if IN_CI:
            pytest.fail("Ray is not installed under CI=true (the `test` extra brings it)")
        pytest.skip("Ray is not installed (pip install 'grpoctl[ray]')")
    return ray


def recorder(workdir: Path) -> dict[str, str]:
    """The environment that makes members train through RECORDER, recording into workdir/seen."""
    script = workdir / "record_and_train.py"
    script.write_text(RECORDER)
    (workdir / "seen").mkdir(exist_ok=True)
    return {
        "GRPOCTL_TRAIN_CMD": f"{sys.executable} {script}",
        "RAYTEST_RECORD": str(workdir / "seen"),
        "RAYTEST_REPO": str(REPO),
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
    }


def process_state(pid: int) -> str | None:
    """The state letter of process `pid` in /proc (T: stopped, as at a fault point's
    SIGSTOP), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def stopped(pid: int) -> bool:
    """Whether the trainer `pid` stopped itself at its fault point (and is still there)."""
    return process_state(pid) == "T"


def seen(workdir: Path) -> dict[int, tuple[str, str]]:
    """{trainer pid: (CUDA_VISIBLE_DEVICES, its arguments)} of every trainer the members started."""
    out = {}
    for path in (workdir / "seen").glob("*.txt"):
        devices, args = path.read_text().splitlines()[:2]
        out[int(path.stem)] = (devices, args)
    return out


@contextmanager
def local_cluster(env: dict[str, str], num_cpus: int, num_gpus: int):
    """Start the cluster with `env` in its workers; yields its address."""
    ray = need_ray()
    saved = {k: os.environ.get(k) for k in {**LOCAL_ONLY, **env}}
    os.environ.update({**LOCAL_ONLY, **env})
    try:
        # address="local": a new cluster of our own, even where `ray start` left one running
        # (a bare ray.init() would join that one).
        started = time.monotonic()
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
        record_service_start("ray", time.monotonic() - started)
        try:
            yield ray.get_runtime_context().gcs_address
        finally:
            ray.shutdown()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
