"""A throwaway PostgreSQL server for the tests and benchmarks: initdb in a temporary
directory, listening on 127.0.0.1 only, password auth (scram) for TCP, stopped at the end.
(tests/cluster.py starts one inside a network namespace, listening on that namespace's
address instead: `listen` and `launcher`.)

    python tests/pg_server.py start DIR     # prints the admin URL; the server runs on
    python tests/pg_server.py stop DIR

`initdb` refuses to run as root, so as root everything runs as the `postgres` user
(Debian's postgresql-15 package creates it); as anyone else, as that user.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

USER = "grpoctl"
PASSWORD = "pw-4e1c9b-secret"  # a value distinctive enough to grep for in leak tests


def find_bindir() -> Path | None:
    """The directory of initdb/pg_ctl, newest PostgreSQL first; None when not installed."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(cmd: list[str], launcher: Sequence[str] = (), **kwargs) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run([*launcher, *cmd], capture_output=True, text=True, **kwargs)


def start(root: Path, bindir: Path | None = None, listen: str = "127.0.0.1", launcher: Sequence[str] = ()) -> str:
    """Start a fresh server under `root`; returns its admin URL (database `postgres`).

    `listen`: the one address it listens on; other than 127.0.0.1, clients of the subnets
    it is on (pg_hba's `samenet`) may log in with the password too. `launcher`: a command
    prefix that the server is started through (say, `ip netns exec NS`)."""
    bindir = bindir or find_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb)")
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        server = pwd.getpwnam("postgres")
        os.chmod(root, 0o755)
        os.chown(root, server.pw_uid, server.pw_gid)
        os.chown(pwfile, server.pw_uid, server.pw_gid)
    out = _as_server_user(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--pwfile",
            str(pwfile),
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
        timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"initdb failed: {out.stderr.strip()}")
    if listen != "127.0.0.1":
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all samenet scram-sha-256\n")
    port = _free_port()
    options = (
        f"-c listen_addresses={listen} -c port={port} -c unix_socket_directories={root} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
    )
    (root / "options").write_text(options)
    (root / "port").write_text(str(port))
    (root / "host").write_text(listen)
    (root / "launcher").write_text(json.dumps(list(launcher)))
    resume(root, bindir)
    return admin_url(root)


def _launcher(root: Path) -> list[str]:
    return json.loads((root / "launcher").read_text())


def resume(root: Path, bindir: Path | None = None) -> None:
    """Start the server under `root` again, as `start` configured it (after `pause`)."""
    bindir = bindir or find_bindir()
    assert bindir is not None
    out = _as_server_user(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(root / "data"),
            "-l",
            str(root / "server.log"),
            "-o",
            (root / "options").read_text(),
            "-w",
            "-t",
            "60",
            "start",
        ],
        _launcher(root),
        timeout=90,
    )
    if out.returncode != 0:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {out.stderr.strip()} {log[-500:]}")


def pause(root: Path) -> None:
    """Stop the server as an administrator would (-m fast: sessions are ended, transactions
    in flight rolled back), to `resume` it later: an outage."""
    _pg_ctl(root, "-m", "fast", "-w", "stop")


def restart(root: Path) -> None:
    """`pg_ctl restart -m fast`: every session ended, the server back when it returns."""
    # -l: the restarted server must not write to (and hold open) our capture pipe.
    _pg_ctl(root, "-l", str(root / "server.log"), "-m", "fast", "-w", "-t", "60", "restart")


def _pg_ctl(root: Path, *args: str) -> None:
    bindir = find_bindir()
    assert bindir is not None
    out = _as_server_user([str(bindir / "pg_ctl"), "-D", str(root / "data"), *args], _launcher(root), timeout=90)
    if out.returncode != 0:
        raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {out.stderr.strip()}")


def admin_url(root: Path) -> str:
    port = (root / "port").read_text().strip()
    host = (root / "host").read_text().strip() if (root / "host").exists() else "127.0.0.1"
    return f"postgresql+psycopg://{USER}:{PASSWORD}@{host}:{port}/postgres"


def stop(root: Path, bindir: Path | None = None) -> None:
    bindir = bindir or find_bindir()
    if bindir is None or not (root / "data").exists():
        return
    _as_server_user([str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "stop"], timeout=60)


def wait_gone(root: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (root / "data" / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    action, where = sys.argv[1], Path(sys.argv[2])
    if action == "start":
        print(start(where))
    elif action == "stop":
        stop(where)
        wait_gone(where)
    else:
        raise SystemExit(f"usage: {sys.argv[0]} start|stop DIR")
