"""One sweep member, supervised on the machine that runs it: claim, train, watch, record.

Both executors run this. The local one calls `run_member` in a thread of the sweep's own
process; the Ray one calls it inside a Ray task on whichever node the cluster picked. So
what a member does is the same everywhere:

1. Look the run up by name. A run that exists is claimed first (the registry's one-writer
   claim), waiting while a previous trainer may still write it: a trainer orphaned by a
   dead worker gets SIGTERM (exec_trainer.py), checkpoints, ends `interrupted` and so releases
   the claim; one that cannot (a dead machine) loses it when its lease expires. Holding
   the claim fences any old trainer out, from that moment on. Then the run is resumed
   from its last checkpoint (`--resume RUN`); one with no checkpoint yet is deleted and
   started afresh. A run that does not exist is started from the member's config file.
2. Start `grpoctl train` (the node's own: $GRPOCTL_TRAIN_CMD, else this Python's
   `-m grpoctl train`) in a session of its own, its output kept in the log file on this
   machine and in the registry (`grpoctl runs logs RUN`, from anywhere).
3. Forward interrupts: the first makes the trainer finish its step, checkpoint and end
   `interrupted`; a second stops it at once. On Ray an interrupt is `ray.cancel`, which
   raises KeyboardInterrupt here.
4. Say how it ended. A trainer that died without recording its end is recorded here
   (only if the run's claim is still its own). A member whose trainer was killed or
   preempted without anyone asking is `lost`: the Ray executor raises MemberLost for it,
   so Ray runs the member again, up to its max_retries.

The registry's password is never in a MemberSpec (it is a Ray task's argument, stored by
Ray): the trainer finds it in its environment ($PGPASSWORD, set through the Ray task's
runtime_env) or in ~/.pgpass.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from sqlalchemy.exc import InterfaceError, OperationalError

from grpoctl.errors import TEMPFAIL_EXIT, UserError, error_line
from grpoctl.registry import Registry
from grpoctl.rules import claim_wait_s

POLL_S = 0.2
LOG_FLUSH_S = 1.0


class MemberLost(Exception):
    """The member's trainer ended without a result nobody asked for (killed, preempted)."""


class RegistryOutOfReach(Exception):
    """The registry could not be reached from the machine running this member (its trainer
    stopped for want of it, exit 75, or the member could not open it): worth another
    attempt, elsewhere if the registry is up and only this machine is cut off from it."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(host, why)  # both in args, so that it pickles (Ray sends it to the driver)
        self.host, self.why = host, why

    def __str__(self) -> str:
        return f"the registry was unreachable from {self.host}: {self.why}"


@dataclass
class MemberSpec:
    """Everything a member needs, wherever it runs (picklable; no password)."""

    run_name: str
    config_hash: str
    config: dict  # the run's full config, paths absolute
    config_file: str  # where to write it for the trainer
    log: str  # the log file on the machine that runs the member
    db: str  # the registry's URL without its password
    action: str  # what the plan expected: "new", "retry" or "resume"
    cwd: str  # the trainer's working directory, where it exists
    env: dict[str, str] = field(default_factory=dict)  # for the trainer (threads, devices)
    # Wait (up to rules.claim_wait_s(): the lease and a heartbeat) for a trainer that still holds the run: on Ray, a retry's
    # predecessor may be finishing its last step; here, a holder is someone else's run.
    wait_for_claim: bool = False


@dataclass
class Control:
    """What the supervisor asks of a running member: each interrupt is one SIGINT to the
    trainer (at most two: finish the step and checkpoint, then stop at once); `kill`
    ends it with SIGKILL."""

    interrupts: int = 0
    kill: bool = False


@dataclass
class Outcome:
    status: str  # the run's status, or why it did not start
    lost: bool = False  # ended by something nobody asked for: worth another attempt


def train_command() -> list[str]:
    """The command that trains one run; $GRPOCTL_TRAIN_CMD replaces it (tests use a fake)."""
    custom = os.environ.get("GRPOCTL_TRAIN_CMD")
    if custom:
        return shlex.split(custom)
    return [sys.executable, "-m", "grpoctl", "train"]


def secret_env(url) -> dict[str, str]:
    """$PGPASSWORD for trainers: the registry URL's password, else the sweep's own
    $PGPASSWORD (without either, each machine's environment or ~/.pgpass must hold it)."""
    password = url.password or os.environ.get("PGPASSWORD")
    return {"PGPASSWORD": str(password)} if password else {}


def run_member(
    spec: MemberSpec,
    control: Control | None = None,
    registry: Registry | None = None,
    secret_env: dict[str, str] | None = None,
) -> Outcome:
    """Run one member to its end (see the module docstring). `registry`: an open one to
    use (the local executor's); `secret_env`: extra environment for the trainer only."""
    control = control or Control()
    own = registry is None
    registry = registry or Registry(spec.db)
    log = MemberLog(registry, spec.run_name, Path(spec.log))
    try:
        start = _attempt(spec, registry, log)
        if isinstance(start, Outcome):
            return start
        return _supervise(spec, registry, log, start, control, secret_env or {})
    except BaseException:
        # Cancelled or broken before a trainer took the run over: let go of our claim, so
        # that the next attempt need not wait for its lease (we are alive, it would wait).
        _let_go(spec, registry)
        raise
    finally:
        log.close()
        if own:
            registry.close()


def _let_go(spec: MemberSpec, registry: Registry) -> None:
    try:
        run = registry.runs_named([spec.run_name]).get(spec.run_name)
        if run is not None:
            registry.end_abandoned(run.id, [os.getpid()], "interrupted", "its sweep member was cancelled")
    except Exception:  # the registry is what failed: the lease will expire
        pass


# --------------------------------------------------------------------------- what to start


def _attempt(spec: MemberSpec, registry: Registry, log: MemberLog) -> list[str] | Outcome:
    """The trainer's arguments for this attempt, or the outcome if there is nothing to run."""
    deadline = time.monotonic() + (claim_wait_s() if spec.wait_for_claim else 0)
    waiting = False
    while True:
        try:
            run = registry.runs_named([spec.run_name]).get(spec.run_name)
            if run is None:
                return [_write_config(spec, log), "--db", spec.db]
            if run.config_hash != spec.config_hash:
                return Outcome(f"did not start: run name '{spec.run_name}' is taken by another config")
            if _ended(run.status, spec):
                return Outcome(run.status)  # an earlier attempt got there (a result, not an accident)
            registry.claim_run(run.id)
            break
        except (UserError, OperationalError, InterfaceError) as refusal:  # held, or the registry is away
            held = isinstance(refusal, UserError)
            if not held and not spec.wait_for_claim:
                raise
            if time.monotonic() >= deadline:
                if spec.wait_for_claim:
                    kept = "the previous trainer kept the run" if held else "the registry stayed unreachable"
                    raise MemberLost(f"{kept}: {error_line(refusal)}") from None
                return Outcome(f"running elsewhere ({refusal})")
            if not waiting:
                what = "the previous trainer to let go" if held else "the registry"
                log.note(f"waiting for {what}: {error_line(refusal)}")
                waiting = True
        time.sleep(1.0)
    run = registry.runs_named([spec.run_name])[spec.run_name]
    if _ended(run.status, spec):  # it ended while we waited
        registry.end_abandoned(run.id, [os.getpid()], run.status, run.error or "")
        return Outcome(run.status)
    if registry.checkpoints(run.id):
        return ["--resume", spec.run_name, "--db", spec.db]
    # Killed before its first checkpoint: nothing to resume from, so start it again.
    log.note(f"run {spec.run_name} has no checkpoint to resume from: starting it afresh")
    for path in registry.delete_run(run.id):
        shutil.rmtree(path, ignore_errors=True)
    return [_write_config(spec, log), "--db", spec.db]


def _ended(status: str, spec: MemberSpec) -> bool:
    """Whether the run is over for this member. A failed run it was planned to resume
    (`--retry-failed`, a failed run with a checkpoint: planning.py) is not: it resumes."""
    if status == "failed" and spec.action == "resume":
        return False
    return status in ("finished", "failed", "diverged")


def _write_config(spec: MemberSpec, log: MemberLog) -> str:
    path = Path(spec.config_file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(spec.config, sort_keys=False))
    except OSError as exc:  # the driver's directory does not exist here and cannot be made
        import tempfile

        fd, fallback = tempfile.mkstemp(prefix=f"{spec.run_name}-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(yaml.safe_dump(spec.config, sort_keys=False))
        log.note(f"cannot write {path} ({exc}); the config is in {fallback}")
        return fallback
    return str(path)


# --------------------------------------------------------------------------- running it


def _supervise(
    spec: MemberSpec,
    registry: Registry,
    log: MemberLog,
    args: list[str],
    control: Control,
    secret_env: dict[str, str],
) -> Outcome:
    command = train_command() + args
    env = dict(os.environ, PYTHONUNBUFFERED="1", **spec.env, **secret_env)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    devices = env.get("CUDA_VISIBLE_DEVICES")
    stamp = datetime.now().isoformat(timespec="seconds")
    log.note(
        f"{stamp} on {socket.gethostname()}"
        + (f" (CUDA_VISIBLE_DEVICES={devices})" if devices is not None else "")
        + f": {shlex.join(command)}"
    )
    cwd = spec.cwd if os.path.isdir(spec.cwd) else None
    # A session of its own: a Ctrl-C at the sweep's terminal reaches only the sweep, which
    # forwards exactly one SIGINT (a second would make the trainer stop at once).
    # Its output goes to the log file, not a pipe: a trainer orphaned by a dead worker
    # must still be able to write while it checkpoints (into a pipe nobody reads, it could not).
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpoctl.sweep.exec_trainer", str(os.getpid()), "--", *command],
        stdout=log.file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    sent = 0
    try:
        while proc.poll() is None:
            try:
                if control.kill:
                    _signal(proc, signal.SIGKILL)
                while sent < min(control.interrupts, 2):
                    _signal(proc, signal.SIGINT)
                    sent += 1
                log.flush(due_only=True)
                time.sleep(POLL_S)
            except KeyboardInterrupt:  # ray.cancel: an interrupt, forwarded on the next turn
                control.interrupts += 1
    finally:
        if proc.poll() is None:  # only if this loop itself broke: never leave a trainer unwatched
            _signal(proc, signal.SIGKILL)
            proc.wait()
    log.flush()
    return _ending(spec, registry, proc, asked=sent > 0 or control.kill)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ending(spec: MemberSpec, registry: Registry, proc: subprocess.Popen, asked: bool) -> Outcome:
    code = proc.returncode
    if code == TEMPFAIL_EXIT:
        # It lost the registry for longer than it may retry (its log says so) and stopped
        # where it was, or could not reach it at its start (registry/open.py,
        # RegistryNotAnswering); it could record nothing. Its claim, if any, lapses, and
        # another attempt (the sweep's) resumes or starts the run.
        raise RegistryOutOfReach(socket.gethostname(), f"trainer stopped (`grpoctl runs logs {spec.run_name}`)")
    run = registry.runs_named([spec.run_name]).get(spec.run_name)
    if run is None or run.config_hash != spec.config_hash:
        return Outcome(f"did not start (exit {code}; `grpoctl runs logs {spec.run_name}`)")
    died = code < 0 or code == 130  # killed by a signal (or stopped by a second Ctrl-C)
    status = "interrupted" if died else "failed"
    ended = registry.end_abandoned(
        run.id,
        [proc.pid, os.getpid()],
        status,
        f"trainer exited with code {code} without recording its end (`grpoctl runs logs {spec.run_name}`)",
    )
    if ended:
        return Outcome(status, lost=died and not asked)
    run = registry.runs_named([spec.run_name])[spec.run_name]
    if run.status == "running":
        return Outcome(f"running elsewhere (pid {run.claim_pid} on {run.claim_host})")
    if code == 2:  # refused by its checks (say, a checkpoint whose files are gone): see its log
        return Outcome(
            f"did not {'resume' if spec.action == 'resume' else 'start'} (`grpoctl runs logs {spec.run_name}`)"
        )
    # Interrupted with nobody here asking and no `runs stop`: preempted (SIGTERM from outside).
    preempted = run.status == "interrupted" and not asked and run.stop_requested_at is None
    return Outcome(run.status, lost=preempted)


# --------------------------------------------------------------------------- the log


class MemberLog:
    """The member's log: a file on this machine that the trainer writes into (and the
    member its notes), and whatever this attempt added to it, copied into the registry
    every LOG_FLUSH_S so that `grpoctl runs logs RUN` reads it from anywhere. A registry
    that cannot be written for a while gets the lines at the next flush."""

    def __init__(self, registry: Registry, run_name: str, path: Path) -> None:
        self.registry, self.run_name = registry, run_name
        self.host = socket.gethostname()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "ab")
        except OSError:  # the driver's directory cannot be made here: a file of our own
            import tempfile

            self.file = tempfile.NamedTemporaryFile(prefix=f"{run_name}-", suffix=".log", delete=False)
        self._reader = open(self.file.name, "rb")
        self._reader.seek(0, os.SEEK_END)  # earlier attempts' lines are stored already
        self._unsent = b""
        self._flushed = 0.0

    def note(self, text: str) -> None:
        self.file.write(f"# {text}\n".encode())
        self.file.flush()
        self.flush()

    def flush(self, due_only: bool = False, final: bool = False) -> None:
        if due_only and time.monotonic() - self._flushed < LOG_FLUSH_S:
            return
        self._flushed = time.monotonic()
        self._unsent += self._reader.read()
        # Whole lines only (a character's bytes may be split where the trainer is writing),
        # unless this is the last flush.
        end = len(self._unsent) if final else self._unsent.rfind(b"\n") + 1
        if end <= 0:
            return
        try:
            self.registry.append_log(
                self.run_name, self._unsent[:end].decode("utf-8", errors="replace"), host=self.host
            )
            self._unsent = self._unsent[end:]
        except Exception:  # a busy or unreachable registry must not end the member
            pass

    def close(self) -> None:
        self.flush(final=True)
        self.file.close()
        self._reader.close()
