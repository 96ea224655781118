"""Sweeps on a cluster you can break (tests/cluster.py): PostgreSQL, a Ray head and a Ray
worker node, each in a network namespace of its own with its own hostname, joined with
token auth, the sweep driven from the head node as a user would.

- the host's network is untouched and nothing inside has a way out (no default route);
- a 2-member sweep runs one member on each node, both finish with exactly the rows of
  the same runs trained uninterrupted, no claim is left held, and the registry's
  password is in no log: the sweep's output, Ray's session logs, PostgreSQL's log;
- a driver without the cluster's token is refused in one line (exit 2);
- a node that dies mid-run (every process SIGKILLed, its link down) has its member run
  again on the head node, resumed from the shared checkpoint, with exact rows.

One cluster for the module (~11 s to start); each test gets a fresh database, and what a
test broke is mended after it (`Cluster.reset`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pg_server
import pytest
import yaml
from cluster import Cluster, default_routes, grep_files, host_network, missing, ns_pids
from cluster import unavailable as cluster_unavailable
from conftest import REPO, fast_overrides, record_service_start
from ray_cluster import recorder, seen
from run_rows import assert_same_rows, url_rows

pytestmark = pytest.mark.slow

STEPS = 5
# Checkpoints at 2, 4 and 5, all kept; evals at 0, 2, 4 and 5 (as in tests/test_ray_faults.py).
CONFIG = {"loop.n_grpo_steps": STEPS, "checkpoint.every": 2, "checkpoint.keep_last": 3, "eval.every": 2}
LRS = ("1e-3", "2e-3")
NAMES = tuple(f"lr-sweep-lr={lr}-s0" for lr in LRS)
SWEEP_TIMEOUT_S = 240
HOLD = "step-rollouts@3:STOP"
# How long after a node's death its member must be running again and the sweep over.
AFTER_DEATH_S = 150
POWER_CUT_XFAIL = (
    "until the driver retries a member whose run's claim lapsed (in progress), a member on a node "
    "that vanished waits for Ray's own task failure, which did not come within minutes"
)


@pytest.fixture(scope="module")
def straight_started(tmp_path_factory, tiny_model_dir):
    """Each member's run trained by plain `grpoctl train` (the members' reward script) on
    SQLite in the host's namespace, never interrupted: started here, while the cluster starts."""
    workdir = tmp_path_factory.mktemp("straight")
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOCTL_FAULT", "GRPOCTL_DB")}
    env["PYTHONPATH"] = str(REPO)
    procs = {}
    for lr in LRS:
        where = workdir / lr
        where.mkdir()
        args = fast_overrides(tiny_model_dir, where, **CONFIG, **{"optimizer.lr": lr}) + ["name=straight"]
        cmd = [sys.executable, str(REPO / "tests" / "digit_reward_train.py"), "train", "addition", *args]
        procs[lr] = (
            where,
            subprocess.Popen(cmd, cwd=where, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
        )
    yield procs
    for _, proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def straight(straight_started) -> dict[str, dict]:
    """{lr: rows} of the straight runs."""
    out = {}
    for lr, (where, proc) in straight_started.items():
        _, err = proc.communicate(timeout=SWEEP_TIMEOUT_S)
        assert proc.returncode == 0, err[-2000:]
        out[lr] = url_rows(str(where / "registry.db"), "straight")
    return out


@pytest.fixture(scope="module")
def gnc(straight_started, tmp_path_factory):
    reason = missing()
    if reason:
        cluster_unavailable(reason)
    workdir = tmp_path_factory.mktemp("cluster")
    cluster = Cluster(env=recorder(workdir))
    started = time.monotonic()
    cluster.start()
    record_service_start("cluster", time.monotonic() - started)
    print(f"\ncluster {cluster.id} started in {time.monotonic() - started:.1f} s: {cluster.started_at}")
    try:
        yield cluster, workdir
    finally:
        cluster.stop()


@pytest.fixture
def db(gnc):
    """A fresh, empty registry database on the cluster's server (its URL without the
    password); what the test broke is mended afterwards."""
    cluster, workdir = gnc
    for path in (workdir / "seen").glob("*"):
        path.unlink()
    url = cluster.fresh_database()
    yield url
    cluster.reset()
    cluster.drop_database(url)


def sweep_cmd(cluster: Cluster, db: str, model: Path, workdir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "grpoctl",
        "sweep",
        "lr",
        "--values",
        ",".join(LRS),
        *fast_overrides(model, workdir, **CONFIG),
        "--executor",
        "ray",
        "--ray-address",
        cluster.ray_address,
        "--db",
        db,
        *extra,
    ]


def runs_of(cluster: Cluster, db: str) -> dict[str, dict]:
    rows = cluster.query(db, "SELECT name, status, last_step, claim_token, claim_host, claim_pid FROM run")
    keys = ("status", "last_step", "claim_token", "claim_host", "claim_pid")
    return {row[0]: dict(zip(keys, row[1:], strict=True)) for row in rows}


ATTEMPT = re.compile(r"# \d{4}-\d\d-\d\dT[\d:]+ on (\S+?):? ")  # a member's note as it starts a trainer


def log_hosts(cluster: Cluster, db: str) -> dict[str, list[str]]:
    """{run: the hosts its members started trainers on, in order}, from its stored log."""
    out: dict[str, list[str]] = {}
    for name, text in cluster.query(db, "SELECT run_name, text FROM runlog ORDER BY id"):
        for line in text.splitlines():
            if match := ATTEMPT.match(line):
                out.setdefault(name, []).append(match.group(1))
    return out


def first_note_after(cluster: Cluster, db: str, name: str, host: str, moment: float) -> float | None:
    """When (time.time()) the first chunk of run `name`'s log from `host` after `moment` was stored."""
    rows = cluster.query(db, f"SELECT host, created_at FROM runlog WHERE run_name = '{name}' ORDER BY id")
    times = [datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() for h, t in rows if h == host]
    return min((t for t in times if t > moment), default=None)


@pytest.mark.timeout(60)
def test_the_host_network_is_untouched_and_nothing_has_a_way_out(gnc):
    cluster, _ = gnc
    assert host_network() == cluster.before
    owned = cluster.owned()
    assert sorted(owned) == sorted(cluster.ns(n) for n in ("br", *cluster.nodes))
    for ns in owned:
        assert default_routes(ns) == [], ns
    out = cluster.run("w1", [sys.executable, "-c", "import socket; print(socket.gethostname())"])
    assert out.stdout.strip() == cluster.hostname("w1"), out.stderr


@pytest.mark.timeout(SWEEP_TIMEOUT_S + 60)
def test_a_sweep_runs_a_member_on_each_node_with_exact_rows_and_no_leak(gnc, db, straight, tiny_model_dir, tmp_path):
    cluster, workdir = gnc
    started = time.monotonic()
    out = cluster.run("head", sweep_cmd(cluster, db, tiny_model_dir, tmp_path), cwd=tmp_path, timeout=SWEEP_TIMEOUT_S)
    print(f"\nsweep: {time.monotonic() - started:.1f} s")
    said = out.stdout + out.stderr
    assert out.returncode == 0, said

    runs = runs_of(cluster, db)
    assert sorted(runs) == sorted(NAMES)
    for run in runs.values():
        assert (run["status"], run["last_step"]) == ("finished", STEPS), run
        assert run["claim_token"] is None, run  # let go when it ended
    hosts = log_hosts(cluster, db)
    assert sorted(h for name in NAMES for h in hosts[name]) == sorted(cluster.hostname(n) for n in ("head", "w1"))
    assert len(seen(workdir)) == 2
    for lr, name in zip(LRS, NAMES, strict=True):
        assert_same_rows(cluster.rows(db, name), straight[lr])

    # The password is not in the sweep's output or the members' log files (Ray's logs: below).
    assert pg_server.PASSWORD not in said
    assert grep_files([tmp_path / "outputs"], pg_server.PASSWORD) == []


# Found with this harness: Ray's runtime env agent logs each runtime_env it creates, at INFO,
# on every node that runs a member (runtime_env_agent.log: `Creating runtime env:
# {"env_vars": {"PGPASSWORD": ...}}`), and on_ray.py hands the members the password that way.
@pytest.mark.xfail(strict=True, reason="the password is in Ray's runtime_env_agent.log (on_ray.py's runtime_env)")
@pytest.mark.timeout(SWEEP_TIMEOUT_S + 60)
def test_the_password_is_in_no_log(gnc, db, tiny_model_dir, tmp_path):
    cluster, _ = gnc
    cmd = sweep_cmd(cluster, db, tiny_model_dir, tmp_path, "loop.n_grpo_steps=1")
    cmd[cmd.index(",".join(LRS))] = LRS[0]
    out = cluster.run("head", cmd, cwd=tmp_path, timeout=SWEEP_TIMEOUT_S)
    assert out.returncode == 0, out.stdout + out.stderr
    assert pg_server.PASSWORD not in out.stdout + out.stderr
    leaks = grep_files([*cluster.ray_logs, cluster.pg_log, tmp_path / "outputs"], pg_server.PASSWORD)
    assert leaks == [], "\n".join(leaks)


@pytest.mark.timeout(120)
def test_a_driver_without_the_token_is_refused_in_one_line(gnc, db, tiny_model_dir, tmp_path):
    cluster, _ = gnc
    home = tmp_path / "home"  # no ~/.ray/auth_token there
    home.mkdir()
    env = {k: v for k, v in cluster.client_env().items() if not k.startswith("RAY_AUTH_TOKEN")}
    env |= {"HOME": str(home), "RAY_AUTH_MODE": "token"}
    out = cluster.run("head", sweep_cmd(cluster, db, tiny_model_dir, tmp_path), env=env, cwd=tmp_path, timeout=100)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "auth token" in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert cluster.ray_address in lines[0], lines


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


# The node dies in two ways: its processes SIGKILLed, then its link down (their sockets
# close first, so the driver may hear of it at once), or its link down first (a power cut:
# only missed health checks and the claim's lease tell). The driver is being changed to
# retry a member whose run's claim lapsed without waiting for Ray's own task failure
# (grpoctl/sweep/on_ray.py); until then the retry waits for Ray to give the task up.
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    "link_first",
    [
        pytest.param(False, id="killed"),
        # Seen: Ray marks the node dead ~6 s after the cut, yet the driver had not retried the
        # member 340 s later: the owner (the driver) waits on its task's gRPC channel to the
        # vanished worker, which only gRPC's client keepalive ends (Ray's default: minutes).
        # With RAY_grpc_client_keepalive_time_ms=5000 and RAY_grpc_client_keepalive_timeout_ms=5000
        # in the driver's environment alone, the retry started 10.7 s after the cut.
        pytest.param(True, id="power-cut", marks=pytest.mark.xfail(reason=POWER_CUT_XFAIL, strict=False)),
    ],
)
def test_a_dead_node_s_member_is_resumed_on_the_head_with_exact_rows(
    gnc, db, straight, tiny_model_dir, tmp_path, link_first
):
    cluster, workdir = gnc
    # The worker node again, its trainers stopping themselves once step 3's rollouts exist
    # (a checkpoint of step 2 is on the shared filesystem by then): the test acts there.
    cluster.restart_node("w1", {"GRPOCTL_FAULT": HOLD})

    watcher = cluster.watch_nodes()
    driver = cluster.popen(
        "head",
        sweep_cmd(cluster, db, tiny_model_dir, tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timings: dict[str, float] = {}
    killed = None
    try:
        deadline = time.monotonic() + 360
        victim = None
        while victim is None:
            assert driver.poll() is None, driver.communicate()[0]
            assert time.monotonic() < deadline, "no trainer on the worker node reached step 3"
            on_worker = set(ns_pids(cluster.ns("w1")))
            victim = next((pid for pid in seen(workdir) if pid in on_worker and stopped(pid)), None)
            time.sleep(0.1)
        name = yaml.safe_load(Path(seen(workdir)[victim][1].split()[0]).read_text())["name"]
        killed = cluster.kill_node("w1", link_first=link_first)

        # When the member's next trainer starts (its recorder's file: on the head), when the sweep ends.
        while driver.poll() is None and time.time() < killed + AFTER_DEATH_S:
            if "trainer resumed" not in timings:
                retried = [p for p in (workdir / "seen").glob("*.txt") if p.stat().st_mtime > killed]
                retried = [p for p in retried if f"--resume {name}" in p.read_text()]
                if retried:
                    timings["trainer resumed"] = min(p.stat().st_mtime for p in retried) - killed
            time.sleep(0.2)
        if driver.poll() is None:
            driver.kill()
            pytest.fail(
                f"the sweep had not ended {AFTER_DEATH_S} s after the node died ({timings}): "
                + driver.communicate(timeout=60)[0][-3000:]
            )
        timings["sweep ended"] = time.time() - killed
        said, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        events = cluster.node_events(watcher)
        if killed is not None:
            dead = [t for t, what, ip in events if what == "dead" and ip == cluster.ip("w1") and t > killed]
            if dead:
                timings["Ray marked the node dead"] = min(dead) - killed
        print(f"\nnode death: {', '.join(f'{k} {v:.1f} s' for k, v in sorted(timings.items(), key=lambda kv: kv[1]))}")
    assert driver.returncode == 0, said

    runs = runs_of(cluster, db)
    for run in runs.values():
        assert (run["status"], run["last_step"]) == ("finished", STEPS), run
        assert run["claim_token"] is None, run
    retry = first_note_after(cluster, db, name, cluster.hostname("head"), killed)
    if retry is not None:
        print(f"node death: the member's retry wrote its first note on the head {retry - killed:.1f} s after the kill")
    hosts = log_hosts(cluster, db)
    assert hosts[name] == [cluster.hostname("w1"), cluster.hostname("head")], hosts
    resumed = [args for args in (a for _, a in seen(workdir).values()) if f"--resume {name}" in args]
    assert len(resumed) == 1, seen(workdir)
    for lr, run_name in zip(LRS, NAMES, strict=True):
        assert_same_rows(cluster.rows(db, run_name), straight[lr])
