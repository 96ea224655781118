"""A fork server for the end-to-end tests' trainer processes: `grpoctl train` without
paying the interpreter's imports each time.

A fresh `python tests/digit_reward_train.py train ...` spends about 10 s of CPU
importing torch, transformers, sympy and SQLAlchemy before its first step, and its
tiny run then trains in 2 s; the fault tests start two or three trainers each. This
server imports all of that once (`PRELOAD`: importing only, it never builds a model,
seeds or computes), then forks a child per request. The child takes the request's
working directory, environment, argv and output files, resets what a fresh
interpreter would have fresh (signal dispositions, the `random` module's seed), and
runs the script or module as `__main__` through `runpy`, as `python SCRIPT` or
`python -m MODULE` would; its exit (an exit code, an uncaught exception's traceback
and code 1, or death by a signal) is reported as `subprocess` reports it. So the code
under test is the same: only the imports are shared, and they are import-time state
that a fresh process would build identically.

`spawn()` returns a `Popen`-like handle (pid, poll, wait, send_signal, kill,
communicate) whose pid is the trainer itself: signals, /proc/PID/stat (a fault point's
SIGSTOP) and kill -9 reach it as they reach a child of the test. A request whose
environment differs from the server's beyond `PER_RUN_ENV` runs as a real subprocess
instead (an import-time setting could differ), and so does every request with
GRPOCTL_TEST_NO_ZYGOTE=1, which runs the same tests on fresh interpreters.

    python tests/trainer_zygote.py SOCKET STATUS_DIR    # the server (tests start it)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the trainer imports before its first step (grpoctl.cli.main imports every
# command module): imported once by the server, shared by every child.
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.qwen2.modeling_qwen2",
    "safetensors",
    "grpoctl.cli",
    "grpoctl.cli.train",
    "grpoctl.cli.runs",
    "grpoctl.cli.sweep",
    "grpoctl.cli.compare",
    "grpoctl.cli.report",
    "grpoctl.cli.db",
    "grpoctl.registry",
    "grpoctl.rewards",
    "grpoctl.train.setup",
    "grpoctl.train.trainer",
    "grpoctl.evals.headline",
    "grpoctl.rollout.hf",
)
# Environment variables a request may set or unset per run: read by the trainer at run
# time, never at import. Any other difference from the server's environment means a
# fresh interpreter.
# (PYTEST_CURRENT_TEST: pytest names the running test there, so it differs for each.)
PER_RUN_ENV = {
    "GRPOCTL_FAULT",
    "GRPOCTL_DB",
    "GRPOCTL_TEST_CRASH",
    "GRPOCTL_TEST_GRADER_ERRORS",
    "PYTEST_CURRENT_TEST",
}
NO_ZYGOTE_ENV = "GRPOCTL_TEST_NO_ZYGOTE"


# --------------------------------------------------------------------------- the server


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 - the lazy attributes resolve modules

    # The commands' modules (the CLI imports each lazily, when its command is named).
    from grpoctl.cli import COMMANDS

    for module, _ in COMMANDS.values():
        importlib.import_module(module)


def _run_child(request: dict) -> None:
    """In the forked child: become `python ARGV...` in the request's directory and environment.

    Returns only by raising what the script raised (SystemExit included), so that the
    interpreter's own top level reports it and exits, running atexit handlers as usual.
    """
    import random
    import runpy

    # as a fresh interpreter has them (the server sets none, but says so here)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], None), (2, request["stderr"], None)):
        flags = mode if mode is not None else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        target = os.open(path, flags, 0o644)
        os.dup2(target, fd)
        os.close(target)
    random.seed()  # a fresh interpreter's `random` is seeded from the OS, not shared with its siblings
    argv = request["argv"]
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).resolve().parent)
        runpy.run_path(argv[0], run_name="__main__")


def _exit_code(info) -> int:
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def serve(sock_path: str, status_dir: str) -> None:
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)
    listener.settimeout(0.02)
    print("ready", flush=True)
    children: set[int] = set()
    parent = os.getppid()
    while os.getppid() == parent:  # the tests' process gone: so is the server
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            conn = None
        if conn is not None:
            conn.settimeout(None)
            with conn.makefile("r") as lines:
                request = json.loads(lines.readline())
            if request == "stop":
                conn.close()
                return
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _run_child(request)
                sys.exit(0)  # the script returned: exit as `python SCRIPT` does
            children.add(pid)
            for stale in (f"{pid}", f"{pid}.cpu"):  # an earlier child's, should its pid come round again
                (Path(status_dir) / stale).unlink(missing_ok=True)
            conn.sendall(f"{pid}\n".encode())
            conn.close()
        while children:  # report each exit before reaping it, so a pid never vanishes unreported
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                break
            tmp = Path(status_dir) / f".{info.si_pid}.tmp"
            tmp.write_text(str(_exit_code(info)))
            tmp.rename(Path(status_dir) / str(info.si_pid))
            _, _, usage = os.wait4(info.si_pid, 0)
            children.discard(info.si_pid)
            # the child's CPU seconds, for whoever measures the tests
            (Path(status_dir) / f"{info.si_pid}.cpu").write_text(f"{usage.ru_utime + usage.ru_stime:.3f}")


# --------------------------------------------------------------------------- the tests' side


class ForkedProcess:
    """The subset of `subprocess.Popen` the tests use, for a child of the server."""

    def __init__(self, pid: int, status_dir: Path, stdout: Path | None, stderr: Path | None, text: bool):
        self.pid, self.returncode = pid, None
        self._status, self._stdout, self._stderr, self._text = status_dir / str(pid), stdout, stderr, text

    def poll(self) -> int | None:
        if self.returncode is None and self._status.exists():
            self.returncode = int(self._status.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _read(self, path: Path | None):
        if path is None:
            return None
        data = path.read_bytes()
        return data.decode(errors="replace") if self._text else data

    def communicate(self, timeout: float | None = None):
        self.wait(timeout)
        return self._read(self._stdout), self._read(self._stderr)


class Zygote:
    """A server started with one environment, stopped when the tests' process exits."""

    def __init__(self, env: dict):
        self._dir = Path(tempfile.mkdtemp(prefix="grpoctl-zygote-"))
        self._sock, self._status = str(self._dir / "sock"), self._dir / "status"
        self._status.mkdir()
        self.env = {k: v for k, v in env.items() if k not in PER_RUN_ENV}
        self._proc = subprocess.Popen(
            [sys.executable, __file__, self._sock, str(self._status)],
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self._dir,
        )
        line = self._proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the trainer fork server did not start (exit {self._proc.wait()})")

    def fits(self, env: dict) -> bool:
        keys = (set(env) | set(self.env)) - PER_RUN_ENV
        return self._proc.poll() is None and all(env.get(k) == self.env.get(k) for k in keys)

    def _request(self, payload) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self._sock)
            conn.sendall((json.dumps(payload) + "\n").encode())
            with conn.makefile("r") as lines:
                return lines.readline()

    def spawn(self, argv: list[str], cwd: Path, env: dict, stdout: Path, stderr: Path, text: bool) -> ForkedProcess:
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "stdout": str(stdout or os.devnull),
            "stderr": str(stderr or os.devnull),
        }
        return ForkedProcess(int(self._request(request)), self._status, stdout, stderr, text)

    def stop(self) -> None:
        if self._proc.poll() is None:
            try:
                self._request("stop")
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)


# One server per environment (less PER_RUN_ENV) asked for, started on first use; a few
# at most (each holds the imports, ~0.5 GB), beyond which requests run fresh.
_servers: dict[frozenset, Zygote] = {}
MAX_SERVERS = 3


def _server(env: dict) -> Zygote | None:
    key = frozenset((k, v) for k, v in env.items() if k not in PER_RUN_ENV)
    if key not in _servers:
        if len(_servers) >= MAX_SERVERS:
            return None
        import atexit

        _servers[key] = Zygote(env)
        atexit.register(_servers[key].stop)
    return _servers[key]


def _output(target, default: Path) -> Path | None:
    """The file the child writes, for stdout= or stderr=; None when nothing is read back."""
    if target == subprocess.PIPE:
        return default
    if target in (None, subprocess.DEVNULL):
        return None
    return Path(target.name)


def spawn(cmd: list[str], cwd: Path, env: dict, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text: bool = True):
    """Start `cmd` (`[sys.executable, SCRIPT, ...]` or `[sys.executable, "-m", MODULE, ...]`) like
    `subprocess.Popen(cmd, cwd=, env=, stdout=, stderr=, text=)`, as a child of the fork server
    when it fits. stdout/stderr: PIPE (read back by communicate()), DEVNULL, or an open file."""
    assert cmd[0] == sys.executable, cmd
    if os.environ.get(NO_ZYGOTE_ENV) != "1":
        server = _server(env)
        if server is not None and server.fits(env):
            cwd = Path(cwd)
            fd, out_name = tempfile.mkstemp(prefix=".zygote-out-", dir=server._dir)
            os.close(fd)
            fd, err_name = tempfile.mkstemp(prefix=".zygote-err-", dir=server._dir)
            os.close(fd)
            out, err = _output(stdout, Path(out_name)), _output(stderr, Path(err_name))
            return server.spawn(cmd[1:], cwd, env, out, err, text)
        print(f"trainer_zygote: a fresh interpreter for {cmd[1:3]} (no server fits its environment)", file=sys.stderr)
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text)


def run(cmd: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, cwd=, env=, capture_output=True, text=True, timeout=)`, through spawn()."""
    proc = spawn(cmd, cwd, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
