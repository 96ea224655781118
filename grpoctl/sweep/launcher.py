"""Run what a sweep has left to run, here (the local executor) or on a Ray cluster.

Each run is its own `grpoctl train` process, so a crash, an OOM or a diverged run takes
down only itself, and every run can be re-run by hand from the command line printed at
the top of its log (its full config sits beside the log, RUN.yaml). The sweep only
decides what to run (planning.py), supervises members (member.py: here a thread each,
on Ray a task each, see on_ray.py), and reports to a Watcher (the CLI's live table).

The local executor starts at most `parallel` members at once and, with several GPUs,
pins each to the least busy one. It never imports Ray. Ctrl-C (or SIGTERM, for sweeps
in the background) forwards one SIGINT to every trainer: each finishes its step,
checkpoints and ends `interrupted`; a second Ctrl-C stops them at once; members not
started yet are left for the next invocation.

Trainers get the registry's URL without its password (`--db` in argv is visible to every
user through `ps`, and lands in the logs and the printed plan); a password given in the
sweep's URL reaches them as $PGPASSWORD in their environment, where libpq looks for it,
as it does for ~/.pgpass.

No torch here: counting GPUs goes through $CUDA_VISIBLE_DEVICES or `nvidia-smi -L`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from grpoctl.errors import error_line
from grpoctl.registry import Registry
from grpoctl.sweep.member import Control, run_member, secret_env
from grpoctl.sweep.planning import Job, SweepResult, decide, record_plan
from grpoctl.sweep.spec import SweepPlan
from grpoctl.threads import THREADS_ENV, per_child_cap

# How long trainers get to record "interrupted" (and save what they save) after Ctrl-C.
INTERRUPT_GRACE_S = 120
POLL_S = 0.25


class Watcher:
    """What a sweep tells whoever watches it; these do nothing (the CLI shows them)."""

    def skipped(self, result: SweepResult) -> None: ...

    def started(self, job: Job) -> None: ...

    def finished(self, job: Job) -> None: ...

    def refresh(self) -> None: ...

    def note(self, text: str) -> None: ...  # something the executor did on its own (a retry)

    def interrupting(self, count: int) -> None: ...

    def close(self) -> None: ...


def gpu_ids() -> list[str]:
    """The GPUs children may be pinned to, without importing torch in the parent."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        return [] if ids in ([], ["-1"]) else ids
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)]


def run_sweep(
    plan: SweepPlan,
    registry: Registry,
    *,
    parallel: int = 1,
    retry_failed: bool = False,
    log_root: Path = Path("outputs/sweeps"),
    watcher: Watcher | None = None,
    cluster=None,
) -> SweepResult:
    """Record the sweep and its members, then run what is left to run: here, `parallel`
    at a time, or on `cluster` (an on_ray.RayCluster, connected and checked)."""
    watcher = watcher or Watcher()
    record_plan(plan, registry)
    result = decide(plan, registry, retry_failed, log_root)
    watcher.skipped(result)
    if not result.jobs:
        watcher.close()
        return result
    previous = _stop_on_sigterm()
    try:
        if cluster is not None:
            cluster.run(result, registry, watcher)
        else:
            _run_here(result, registry, parallel, watcher)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        watcher.close()
    return result


# --------------------------------------------------------------------------- the local executor


def _run_here(result: SweepResult, registry: Registry, parallel: int, watcher: Watcher) -> None:
    gpus = gpu_ids()
    pin = len(gpus) > 1  # one GPU (or none): trainers see it as it is
    lock = threading.Lock()
    controls: dict[str, Control] = {}
    env = {THREADS_ENV: str(per_child_cap(parallel))} if parallel > 1 and THREADS_ENV not in os.environ else {}

    def work(job: Job) -> None:
        with lock:
            if result.interrupted:  # Ctrl-C came while it was queued: leave it for next time
                return
            control = controls[job.run_name] = Control()
            job_env = dict(env)
            if pin:
                load = {g: sum(1 for j in result.jobs if j.outcome == "running" and j.where == g) for g in gpus}
                job.where = min(gpus, key=lambda g: load[g])
                job_env["CUDA_VISIBLE_DEVICES"] = job.where
            job.started, job.outcome = time.monotonic(), "running"
        watcher.started(job)
        try:
            job.outcome = run_member(
                job.member(registry.public_url, job_env),
                control,
                registry=registry,
                secret_env=secret_env(registry.url),
            ).status
        except Exception as exc:  # a bug or a registry gone: this member only
            job.outcome = f"error: {type(exc).__name__}: {error_line(exc)}"
        watcher.finished(job)

    pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="member")
    futures = [pool.submit(work, job) for job in result.jobs]
    try:
        while not all(f.done() for f in futures):
            watcher.refresh()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        with lock:
            result.interrupted = True
        running = list(controls.values())
        watcher.interrupting(sum(1 for j in result.jobs if j.outcome == "running"))
        _interrupt(running, futures)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _interrupt(controls: list[Control], futures) -> None:
    """One interrupt to each member (its trainer checkpoints and ends `interrupted`), then
    wait; a second Ctrl-C sends the second (stop at once); past the grace period, kill."""
    for control in controls:
        control.interrupts += 1
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while True:
        try:
            wait(futures, timeout=max(0.1, deadline - time.monotonic()))
            break
        except KeyboardInterrupt:
            for control in controls:
                control.interrupts += 1
    if not all(f.done() for f in futures):
        for control in controls:
            control.kill = True
        wait(futures)


def _stop_on_sigterm():
    """`kill SWEEP` stops the sweep as cleanly as Ctrl-C does. It matters for sweeps
    started in the background (`nohup grpoctl sweep ... &`): the shell makes them ignore
    SIGINT, so SIGTERM is the only polite way left to stop them."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)
