"""A cluster you can break (issue 25): PostgreSQL and a multi-node Ray cluster on this one
machine, each node in a Linux network namespace of its own, for tests that kill nodes,
cut them off the database or restart it.

    192.0.2.0/24 (documentation range), on a bridge in a namespace of its own:
      NS-pg    192.0.2.10   PostgreSQL (password auth, scram), as the postgres user
      NS-head  192.0.2.11   Ray head (GCS on :6379), 1 fake GPU; where drivers run
      NS-w1    192.0.2.12   Ray worker node, 1 fake GPU
      NS-w2    192.0.2.13   another worker node (optional)

NS is the run's id, `gnc<pid of the test process>`: every namespace, hostname and data
directory (/tmp/NS) carries it, so leftovers of a run that died (a pytest-timeout, a
kill -9) are recognised and removed by the next start, or by hand:

    python tests/cluster.py --cleanup

The host's namespace gains nothing: no interface, address or route (the bridge and both
ends of every veth pair live in the test namespaces), and no namespace has a default route,
so nothing inside can reach beyond the cluster. The host cannot reach the cluster either
(this machine's own eth0 may even be on 192.0.2.0/24: its traffic to these addresses goes
out there, not here): whatever talks to the cluster runs on a node (`Cluster.run`,
`Cluster.popen`, `Cluster.rows`). The filesystem is shared: every node sees /tmp, the
repository, the tests' tmp paths (the "shared checkpoint root" of a real cluster).

Every node process also gets a hostname of its own (a UTS namespace: NS-head, NS-w1...),
because grpoctl takes "same hostname" for "same machine" (a claim whose pid is gone there
can be taken at once): with one hostname for all, a dead node's claim would look local.

Ray nodes join with token auth (RAY_AUTH_MODE=token, the token in /tmp/NS/auth_token,
$RAY_AUTH_TOKEN_PATH), each with --node-ip-address, its own --temp-dir (/tmp/NS/ray-NODE,
so its session logs can be searched), no dashboard, no usage stats. The GCS checks nodes'
health every second and gives a node up after 3 failed checks of 1 s (HEALTH_CHECK), so
a dead node is marked dead within ~5 s, not Ray's default ~30 s.

A test puts a fault point on one node's trainers with `set_fault` (a file named after the
node's hostname, which the members' train command reads: tests/ray_cluster.py, RECORDER),
so that no node restarts for it; `reset` clears it.

Under CI=true a missing capability (ip netns, PostgreSQL, Ray, root) fails; otherwise
the tests skip, saying why.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pg_server
import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
PREFIX = "gnc"
SUBNET = "192.0.2"  # the documentation range (RFC 5737): never any other address
ADDRESSES = {"pg": 10, "head": 11, "w1": 12, "w2": 13}
RAY_PORT = 6379
BRIDGE = "br0"
# The GCS's health checks of each raylet (names verified in Ray 2.60's gcs_server): a
# check a second, each allowed 1 s, the node dead after 3 failures in a row.
HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
# The registry's claim timings the members run with (grpoctl/rules.py): a lapsed claim
# (dead node) can be taken over 10 s after its last renewal.
CLAIM_TIMINGS = {"GRPOCTL_LEASE_S": "10", "GRPOCTL_HEARTBEAT_S": "3"}
# Environment of this process that must not leak into a node (a node gets its own).
NOT_INHERITED = ("GRPOCTL_DB", "GRPOCTL_FAULT", "GRPOCTL_TEST_PG_URL", "PGPASSWORD", "RAY_ADDRESS")
NOT_INHERITED_PREFIXES = ("RAY_AUTH", "RAYTEST_")


def sh(*cmd: str, check: bool = True, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
    return out


def unavailable(reason: str):
    """A missing capability: a skip, or a failure under CI=true."""
    if IN_CI:
        pytest.fail(f"the cluster tests cannot run under CI=true: {reason}")
    pytest.skip(reason)


def missing() -> str | None:
    """Why this machine cannot run a cluster, or None."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "network namespaces need Linux and root"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "iproute2 (ip) or util-linux (unshare) is not installed"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = sh("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    sh("ip", "netns", "del", probe, check=False)
    if pg_server.find_bindir() is None:
        return "PostgreSQL is not installed (no initdb)"
    for module, extra in (("ray", "grpoctl[ray]"), ("psycopg", "grpoctl[postgres]")):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install '{extra}')"
    return None


def last_json(text: str):
    """The last line of `text` that is JSON (a Ray driver may print its own lines after ours)."""
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise ValueError(f"no JSON in {text[-2000:]!r}")


# --------------------------------------------------------------------------- the host's network


def host_network() -> dict:
    """The host namespace's addresses, links and routes, as `ip -j` prints them (address
    lifetimes, which count down, and link statistics left out)."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.endswith("_life_time") and k != "stats64"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {
        what: strip(json.loads(sh("ip", "-j", *args).stdout or "[]"))
        for what, args in (("addr", ["addr"]), ("route", ["route"]), ("route6", ["-6", "route"]))
    }


def namespaces() -> list[str]:
    return [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line.strip()]


def default_routes(ns: str) -> list[str]:
    """The default routes of namespace `ns` (IPv4 and IPv6): there must be none."""
    found = []
    for family in ("-4", "-6"):
        found += [line for line in sh("ip", "-n", ns, family, "route", "show", "default").stdout.splitlines() if line]
    return found


# --------------------------------------------------------------------------- cleanup


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ns_pids(ns: str) -> list[int]:
    out = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in out.stdout.split()]


def kill_namespace_processes(ns: str, timeout: float = 10) -> None:
    """SIGKILL every process in namespace `ns` (by pid, never by name), until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in ns_pids(ns) if p != os.getpid()]
        if not pids:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} of namespace {ns} outlived SIGKILL")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove_run(run_id: str) -> None:
    """Stop and remove everything of run `run_id`: its PostgreSQL server (so that it lets
    go of its shared memory), every process in its namespaces, the namespaces, /tmp/RUN_ID."""
    root = Path("/tmp") / run_id
    if (root / "pg" / "data" / "postmaster.pid").exists():
        try:
            pg_server.stop(root / "pg")
        except Exception:  # killed below all the same
            pass
    ours = [ns for ns in namespaces() if ns.startswith(run_id + "-")]
    for ns in ours:
        kill_namespace_processes(ns)
    for ns in ours:
        sh("ip", "netns", "del", ns, check=False)
    shutil.rmtree(root, ignore_errors=True)


def leftovers() -> set[str]:
    """Run ids of earlier runs whose process no longer exists."""
    found = {m.group(1) for ns in namespaces() if (m := re.match(rf"({PREFIX}(\d+))-", ns))}
    found |= {p.name for p in Path("/tmp").glob(f"{PREFIX}*") if re.fullmatch(rf"{PREFIX}\d+", p.name)}
    return {run for run in found if not _alive(int(run[len(PREFIX) :]))}


def clean_leftovers() -> list[str]:
    gone = sorted(leftovers())
    for run in gone:
        remove_run(run)
    return gone


# --------------------------------------------------------------------------- the cluster


class Cluster:
    """One test run's cluster. `start()` builds it; `stop()` removes every trace.

    `env`: what the Ray nodes (and so the members and trainers they start) get beside
    their own settings, e.g. `ray_cluster.recorder(workdir)`; `workers`: 1 or 2."""

    def __init__(self, env: dict[str, str] | None = None, workers: int = 1, cpus: int = 2) -> None:
        self.id = f"{PREFIX}{os.getpid()}"
        self.root = Path("/tmp") / self.id
        self.env = dict(env or {})
        self.workers = [f"w{i}" for i in range(1, workers + 1)]
        self.cpus = cpus
        self.nodes = ["pg", "head", *self.workers]
        self.token_file = self.root / "auth_token"
        self.pg_root = self.root / "pg"
        self.faults = self.root / "faults"  # NODE's hostname: the $GRPOCTL_FAULT of its trainers
        self.pg_port = 0
        self.before: dict | None = None
        self.started_at: dict[str, float] = {}
        self.node_env: dict[str, dict[str, str]] = {}
        self.broken: dict[str, str] = {}  # node: what a fault helper did to it, until `reset`
        self._stopped = False

    # names and addresses
    def ns(self, node: str) -> str:
        return f"{self.id}-{node}"

    def hostname(self, node: str) -> str:
        return f"{self.id}-{node}"

    def ip(self, node: str) -> str:
        return f"{SUBNET}.{ADDRESSES[node]}"

    @property
    def ray_address(self) -> str:
        return f"{self.ip('head')}:{RAY_PORT}"

    def db_url(self, database: str = "postgres") -> str:
        """A registry URL without the password (it travels as $PGPASSWORD: `client_env`)."""
        return f"postgresql+psycopg://{pg_server.USER}@{self.ip('pg')}:{self.pg_port}/{database}"

    @property
    def ray_logs(self) -> list[Path]:
        return [self.root / f"ray-{node}" for node in ("head", *self.workers)]

    @property
    def pg_log(self) -> Path:
        return self.pg_root / "server.log"

    # ------------------------------------------------------------------ running things on a node

    def on(self, node: str, cmd: list[str]) -> list[str]:
        """`cmd` as run on `node`: in its network namespace, with its own hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self.ns(node),
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostname(node),
            *cmd,
        ]

    def base_env(self) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if k not in NOT_INHERITED and not k.startswith(NOT_INHERITED_PREFIXES)
        }
        env.update(
            PYTHONPATH=str(REPO),
            HF_HUB_OFFLINE="1",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_file),
        )
        return env

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment of a client of the cluster (a sweep's driver, a reader): the
        Ray token and the registry's password."""
        return self.base_env() | {"PGPASSWORD": pg_server.PASSWORD, **CLAIM_TIMINGS} | extra

    def run(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120, **kwargs):
        return subprocess.run(
            self.on(node, cmd),
            env=self.client_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def popen(self, node: str, cmd: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start `cmd` on `node`; the process is `cmd` itself (every wrapper execs)."""
        return subprocess.Popen(self.on(node, cmd), env=self.client_env() if env is None else env, **kwargs)

    def python(self, node: str, code: str, *args: str, timeout: float = 60):
        """Run Python `code` on `node` (with the client environment); returns the JSON it prints."""
        out = self.run(node, [sys.executable, "-c", code, *args], timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"python on {node} exited {out.returncode}: {out.stderr.strip()[-2000:]}")
        return last_json(out.stdout)

    # ------------------------------------------------------------------ the registry, from a node

    def sql(self, *statements: str, database: str = "postgres") -> None:
        """Run statements on the server (autocommit: CREATE/DROP DATABASE), from the head node."""
        code = (
            "import json, sys, psycopg\n"
            "with psycopg.connect(host=sys.argv[1], port=int(sys.argv[2]), user=sys.argv[3],"
            " dbname=sys.argv[4], autocommit=True, connect_timeout=10) as c:\n"
            "    [c.execute(s) for s in sys.argv[5:]]\n"
            "print('{}')\n"
        )
        self.python("head", code, self.ip("pg"), str(self.pg_port), pg_server.USER, database, *statements)

    def fresh_database(self) -> str:
        """A new, empty database; returns its registry URL (without the password)."""
        name = f"t_{secrets.token_hex(6)}"
        self.sql(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.db_url(name)

    def drop_database(self, url: str) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def query(self, url: str, sql: str, node: str = "head") -> list[list]:
        """The rows of one SELECT on the registry at `url`, read on `node` (datetimes as text)."""
        code = (
            "import json, sys\n"
            "from sqlalchemy import create_engine, text\n"
            "from grpoctl.registry.engine import resolve_url\n"
            "engine = create_engine(resolve_url(sys.argv[1]))\n"
            "with engine.connect() as conn:\n"
            "    print(json.dumps([list(r) for r in conn.execute(text(sys.argv[2]))], default=str))\n"
        )
        out = self.run(node, [sys.executable, "-c", code, url, sql], timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"query on {node} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout)

    def rows(self, url: str, name: str, node: str = "head") -> dict[str, list[tuple]]:
        """run_rows.url_rows of run `name` in the registry at `url`, read on `node`."""
        out = self.run(node, [sys.executable, str(REPO / "tests" / "run_rows.py"), url, name], timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"reading rows on {node} failed: {out.stderr.strip()[-2000:]}")
        import run_rows

        return run_rows.from_json(out.stdout)

    # ------------------------------------------------------------------ starting

    def start(self) -> Cluster:
        atexit.register(self.stop)
        clean_leftovers()
        self.before = host_network()
        self.root.mkdir(mode=0o755)
        self.token_file.write_text(secrets.token_hex(32))
        self.token_file.chmod(0o600)
        self.faults.mkdir()
        try:
            self._network()
            self._postgres()
            self.start_ray("head")
            for node in self.workers:
                self.start_ray(node)
            self.wait_for_nodes(1 + len(self.workers))
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def _network(self) -> None:
        bridge = self.ns("br")
        sh("ip", "netns", "add", bridge)
        sh("ip", "-n", bridge, "link", "set", "lo", "up")
        sh("ip", "-n", bridge, "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "-n", bridge, "link", "set", BRIDGE, "up")
        for node in self.nodes:
            ns = self.ns(node)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # Both ends made inside the namespaces: the host's never holds either, even briefly.
            sh("ip", "-n", bridge, "link", "add", f"to-{node}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", bridge, "link", "set", f"to-{node}", "master", BRIDGE, "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(node)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        if shutil.which("ping"):  # reachable from the head (a bridge takes a moment on new ports)
            for node in self.nodes:
                if node != "head":
                    sh("ip", "netns", "exec", self.ns("head"), "ping", "-q", "-c", "1", "-W", "5", self.ip(node))

    def _postgres(self) -> None:
        started = time.monotonic()
        url = pg_server.start(self.pg_root, listen=self.ip("pg"), launcher=self.on("pg", []))
        self.pg_port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.started_at["postgresql"] = time.monotonic() - started

    def ray_env(self, node: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = self.base_env() | CLAIM_TIMINGS | self.env | {"RAYTEST_FAULTS": str(self.faults)} | (extra or {})
        if node == "head":
            env |= HEALTH_CHECK
        return env

    def start_ray(self, node: str, extra_env: dict[str, str] | None = None) -> None:
        """Start (or start again) `node`'s Ray node; `extra_env` (say, GRPOCTL_FAULT) for it only."""
        cmd = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            f"--node-ip-address={self.ip(node)}",
            f"--num-cpus={self.cpus}",
            "--num-gpus=1",
            f"--temp-dir={self.root / f'ray-{node}'}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
        ]
        if node == "head":
            cmd += ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"]
        else:
            cmd += [f"--address={self.ray_address}"]
        started = time.monotonic()
        self.node_env[node] = self.ray_env(node, extra_env)
        if extra_env:
            self.broken[node] = "started with " + " ".join(f"{k}={v}" for k, v in extra_env.items())
        out = self.run(node, cmd, env=self.node_env[node], timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"ray start on {node} failed: {(out.stderr or out.stdout).strip()[-3000:]}")
        self.started_at[f"ray-{node}"] = time.monotonic() - started

    def alive_nodes(self) -> list[str]:
        """Node IPs of the Ray nodes the GCS holds alive (asked from the head)."""
        code = (
            "import json, logging, sys, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)\n"
            "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))\n"
        )
        return self.python("head", code, self.ray_address, timeout=30)

    def watch_nodes(self) -> subprocess.Popen:
        """A driver on the head that prints `TIME alive|dead IP` (time.time()) whenever a Ray
        node joins or is marked dead, polling every 0.2 s; `node_events` reads what it said."""
        code = (
            "import logging, sys, time, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)\n"
            "known = {}\n"
            "while True:\n"
            "    for n in ray.nodes():\n"
            "        if known.get(n['NodeID']) != n['Alive']:\n"
            "            known[n['NodeID']] = n['Alive']\n"
            "            what = 'alive' if n['Alive'] else 'dead'\n"
            "            print(f\"{time.time():.3f} {what} {n['NodeManagerAddress']}\", flush=True)\n"
            "    time.sleep(0.2)\n"
        )
        return self.popen(
            "head",
            [sys.executable, "-c", code, self.ray_address],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    @staticmethod
    def node_events(watcher: subprocess.Popen) -> list[tuple[float, str, str]]:
        """Stop `watcher`; the (time, alive|dead, IP) events it saw."""
        watcher.kill()
        out, _ = watcher.communicate(timeout=30)
        events = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in ("alive", "dead"):
                events.append((float(parts[0]), parts[1], parts[2]))
        return events

    def wait_for_nodes(self, count: int, timeout: float = 120, exact: bool = False) -> list[str]:
        """Until `count` Ray nodes are alive (`exact`: exactly `count`, no dead one still
        counted as alive); returns their addresses."""
        deadline = time.monotonic() + timeout
        alive: list[str] = []
        while True:
            try:
                alive = self.alive_nodes()
            except subprocess.TimeoutExpired as exc:  # a driver that did not connect in time: ask again
                said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
                print(f"asking the cluster's nodes timed out ({exc.timeout} s): {(said or '')[-500:]}")
                alive = []
            else:
                if len(alive) == count or (len(alive) > count and not exact):
                    return alive
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray nodes alive: {alive}, not {count}")
            time.sleep(0.5)

    # ------------------------------------------------------------------ faults

    def kill_node(self, node: str, link_first: bool = False) -> float:
        """The node dies: SIGKILL to every process in its namespace, then its link goes
        down. Killed processes' sockets close (the kernel sends FIN/RST), so peers may learn
        of it at once; `link_first`: the link goes down first (a power cut: nothing is
        said, peers only notice by timeouts and missed health checks). Returns time.time()
        of the moment of death."""
        killed = time.time()
        self.broken[node] = "killed"
        if link_first:
            sh("ip", "-n", self.ns(node), "link", "set", "eth0", "down")
        kill_namespace_processes(self.ns(node))
        if not link_first:
            sh("ip", "-n", self.ns(node), "link", "set", "eth0", "down")
        return killed

    def revive_node(self, node: str, extra_env: dict[str, str] | None = None) -> None:
        """A killed node boots again: its link up, its Ray node started (and joined) anew."""
        sh("ip", "-n", self.ns(node), "link", "set", "eth0", "up")
        self.broken.pop(node, None)
        if node != "pg":
            self.start_ray(node, extra_env)

    def restart_node(self, node: str, extra_env: dict[str, str] | None = None) -> None:
        """Start `node`'s Ray node again (with `extra_env`, say GRPOCTL_FAULT): killed,
        marked dead by the GCS (else a task could still be sent its way), started, joined."""
        if self.broken.get(node) != "killed":
            self.kill_node(node, link_first=True)
        self.wait_for_nodes(len(self.workers), exact=True)
        self.revive_node(node, extra_env)
        self.wait_for_nodes(1 + len(self.workers), exact=True)

    def set_fault(self, node: str, spec: str) -> None:
        """Trainers started on `node` from now on stop or die at the fault point `spec`
        ($GRPOCTL_FAULT, grpoctl/train/faults.py), until `reset`: read by the members'
        train command (tests/ray_cluster.py, RECORDER), so the node runs on undisturbed."""
        (self.faults / self.hostname(node)).write_text(spec)
        self.broken.setdefault(node, "fault")

    def cut_from_pg(self, node: str, kind: str = "blackhole") -> None:
        """`node` can no longer reach PostgreSQL (a route of `kind`: blackhole, prohibit or
        unreachable, in the node's own namespace); everything else still works."""
        sh("ip", "-n", self.ns(node), "route", "add", kind, f"{self.ip('pg')}/32")
        self.broken[node] = f"cut:{kind}"

    def heal(self, node: str) -> None:
        """`node` reaches PostgreSQL again."""
        kind = self.broken.pop(node).split(":", 1)[1]
        sh("ip", "-n", self.ns(node), "route", "del", kind, f"{self.ip('pg')}/32")

    def reset(self, nodes_too: bool = True) -> None:
        """Undo what the fault helpers did (between tests): routes healed, PostgreSQL
        running, fault points cleared, and with `nodes_too`, killed nodes or nodes started
        with extra settings started plainly (without: they wait for the next reset, so a
        module whose last test kills a node does not start it again for nothing)."""
        if (self.pg_root / "stopped").exists():
            self.start_pg()
        for path in self.faults.iterdir():
            path.unlink()
        for node, what in list(self.broken.items()):
            if what == "fault":
                del self.broken[node]
            elif what.startswith("cut:"):
                self.heal(node)
            elif not nodes_too:
                continue
            elif node == "pg":
                self.revive_node(node)
            else:
                self.restart_node(node)

    def restart_pg(self) -> None:
        """PostgreSQL restarts (fast shutdown: every connection is dropped)."""
        pg_server.restart(self.pg_root)

    def stop_pg(self) -> None:
        """An outage begins: PostgreSQL stops (fast) until `start_pg`."""
        pg_server.pause(self.pg_root)
        (self.pg_root / "stopped").touch()

    def start_pg(self) -> None:
        pg_server.resume(self.pg_root)  # in the pg namespace, with the options of its first start
        (self.pg_root / "stopped").unlink(missing_ok=True)

    # ------------------------------------------------------------------ stopping

    def stop(self, check: bool = True) -> None:
        """Remove everything; with `check`, assert the host's network is as it was."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        problems = [f"namespace {ns} has a default route: {r}" for ns in self.owned() for r in default_routes(ns)]
        remove_run(self.id)
        if self.before is not None:
            after = host_network()
            if after != self.before:
                problems.append(f"the host's network changed: before {self.before}, after {after}")
        if check and problems:
            raise AssertionError("; ".join(problems))

    def owned(self) -> list[str]:
        return [ns for ns in namespaces() if ns.startswith(self.id + "-")]


def grep_files(roots: list[Path], needle: str) -> list[str]:
    """`PATH: LINE` of every line under `roots` (files, or directories searched whole)
    that holds `needle`, the needle itself shown as ***."""
    found = []
    data = needle.encode()
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for path in paths:
            try:
                content = path.read_bytes()
            except OSError:
                continue
            for line in content.splitlines():
                if data in line:
                    found.append(f"{path}: {line.replace(data, b'***').decode(errors='replace')[:600]}")
    return found


if __name__ == "__main__":
    if sys.argv[1:] != ["--cleanup"]:
        raise SystemExit(f"usage: {sys.argv[0]} --cleanup   (remove what dead test runs left behind)")
    for run in clean_leftovers():
        print(f"removed {run}")
