"""`grpoctl ui` in a subprocess, serving on a free port, its output in a log file: for
the tests that need the real server (a browser drives it; what it logs is checked)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

# The page's poll interval in these tests: short, so that a live test waits little.
POLL_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`grpoctl ui --db DB` in a subprocess, until stop(); its stdout and stderr go to
    `log_path` (WORKDIR/ui-server.log)."""

    def __init__(self, db: str, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "ui-server.log"
        self.log = open(self.log_path, "w")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "grpoctl", "ui", "--db", db, "--port", str(self.port), "--poll", str(POLL_S)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("grpoctl ui did not start listening")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
