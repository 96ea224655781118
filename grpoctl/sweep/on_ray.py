"""The Ray executor: each sweep member is a Ray task, wherever the cluster has room.

    grpoctl sweep lr --values 1e-6..1e-4 --config experiments/h100.yaml --executor ray

Ray schedules; grpoctl builds no scheduler. A member's task reserves one GPU (none on a
cluster without GPUs) and `cpus_per_run` CPUs, gets its run's full config (paths
absolute) and runs the node's own `grpoctl train` as a child process (member.py); Ray
sets CUDA_VISIBLE_DEVICES, which the child inherits. A task whose trainer was killed or
preempted raises MemberLost, and a task whose worker or node died is lost to Ray; both
are run again, up to `max_retries` times, and each new attempt claims the run before it
resumes it (member.py), so no step is ever written twice.

Before anything is submitted, the cluster is checked, in one line each:
- on more than one machine, the registry must be one every machine reaches: not SQLite
  (a file on one disk) and not a PostgreSQL server on localhost (or a Unix socket);
- every node must run the driver's grpoctl and Ray versions (a probe task per node),
  and be able to open the registry.

The password travels as an object in Ray's object store ($PGPASSWORD for the member's
own registry connection and its trainer), never in a task's arguments, which Ray stores
and shows, nor in a runtime_env, which Ray's runtime-env agent writes into its log on
every node. Ctrl-C cancels the tasks: a queued one never
starts, a running one gets KeyboardInterrupt, which its member forwards to the trainer
as the first Ctrl-C (finish the step, checkpoint, end `interrupted`); a second Ctrl-C
is the second signal (stop at once). Cancelled tasks are not retried.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import time
from contextlib import contextmanager

import ray
from ray.exceptions import RayError, RayTaskError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import InterfaceError, OperationalError

import grpoctl
from grpoctl.errors import UserError, error_line
from grpoctl.registry import Registry
from grpoctl.registry.claims import aware
from grpoctl.registry.engine import public_url, sqlite_path
from grpoctl.registry.models import utcnow
from grpoctl.rules import claim_wait_s
from grpoctl.sweep.member import MemberLost, MemberSpec, RegistryOutOfReach, run_member, secret_env
from grpoctl.sweep.planning import Job, SweepResult
from grpoctl.threads import THREADS_ENV

POLL_S = 0.5
LAPSE_CHECK_S = 2.0  # how often the driver looks for members whose claim lapsed
NODE_ID_LABEL = "ray.io/node-id"  # every Ray node carries it: `!in(...)` keeps tasks off nodes
PROBE_TIMEOUT_S = 120
INTERRUPT_GRACE_S = 120
DEFAULT_MAX_RETRIES = 3
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


class RayCluster:
    """A connection to a Ray cluster that has passed the checks above, ready to run members."""

    def __init__(
        self,
        url: URL,
        address: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        cpus_per_run: int | None = None,
    ) -> None:
        self.url, self.max_retries, self.cpus_per_run = url, max_retries, cpus_per_run
        self._started = connect(address)
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            problem = registry_problem(url, {n["NodeManagerAddress"] for n in nodes})
            if problem:
                raise UserError(problem)
            self.secret = ray.put(secret_env(url))
            # Nodes that cannot reach the registry are left out (named), not a reason to stop.
            self.left_out = check_nodes(nodes, public_url(url), self.secret)
            self.avoid = {node_id for node_id, _ in self.left_out}
            self.gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        except BaseException:
            self.close()
            raise

    def run(self, result: SweepResult, registry: Registry, watcher) -> None:
        for _, why in self.left_out:
            watcher.note(why)
        refs = {self._submit(job, registry): job for job in result.jobs}
        _watch(refs, registry, result, watcher, self)

    def _submit(self, job: Job, registry: Registry):
        """Start one attempt of `job`'s member, on any node but those left out."""
        cpus = self.cpus_per_run or max(1, int(job.config["runtime"]["threads"] or 1))
        spec = job.member(registry.public_url, {THREADS_ENV: str(cpus)}, wait_for_claim=True)
        task = _member_task.options(
            name=f"grpoctl train {job.run_name}",
            num_gpus=self.gpus,
            num_cpus=cpus,
            max_retries=self.max_retries,
            retry_exceptions=[MemberLost],
            label_selector={NODE_ID_LABEL: f"!in({','.join(sorted(self.avoid))})"} if self.avoid else None,
        )
        return task.remote(spec, self.secret)

    def retry_lapsed(self, pending: dict, registry: Registry, watcher) -> None:
        """Start again, elsewhere, each member whose run's claim has lapsed: its trainer has
        renewed nothing for a whole lease, so its node is dead or cut off from the registry.
        Ray would notice a dead node's task only much later (its own timeouts), and never
        one whose node is alive but partitioned. The old task is cancelled (a partitioned
        trainer that outlives it can write nothing: its claim is gone) and its node avoided."""
        try:
            runs = registry.runs_named(job.run_name for job in pending.values())
        except (OperationalError, InterfaceError):
            return  # the driver cannot see the registry either: nothing to judge by
        now = utcnow()
        for ref, job in list(pending.items()):
            run = runs.get(job.run_name)
            if run is None or run.status != "running" or run.claim_expires_at is None:
                continue
            if aware(run.claim_expires_at) > now or (now - job.retried_at).total_seconds() < claim_wait_s():
                continue  # held, or our latest attempt is young enough to be waiting for the claim itself
            job.retries += 1
            if job.retries > self.max_retries:
                continue  # left to Ray: it reports the task when its node is declared dead
            self.avoid |= {n["NodeID"] for n in ray.nodes() if n.get("NodeManagerHostname") == run.claim_host}
            ray.cancel(ref, force=True)
            del pending[ref]
            why = f"its claim on {run.claim_host} lapsed (the node is dead or cut off from the registry)"
            pending[self._again(job, f"{why}; trying again elsewhere", registry, watcher)] = job

    def retry_out_of_reach(self, job: Job, cause: RegistryOutOfReach, registry: Registry, watcher):
        """A new attempt of `job`, whose task ended for want of the registry (`cause`). When
        the driver reaches the registry, only that node was cut off from it: the new attempt
        keeps off it (unless that would leave no node at all)."""
        job.retries += 1
        try:
            registry.runs_named([job.run_name])  # does the driver reach it?
            alive = {n["NodeID"]: n.get("NodeManagerHostname") for n in ray.nodes() if n.get("Alive")}
            sick = {node for node, host in alive.items() if host == cause.host}
            if set(alive) - self.avoid - sick:
                self.avoid |= sick
        except (OperationalError, InterfaceError):
            pass  # the registry itself is away: any node will do, once it is back
        return self._again(job, f"{cause}; trying again", registry, watcher)

    def _again(self, job: Job, why: str, registry: Registry, watcher):
        """Say why `job` runs again (its retry already counted) and submit its new attempt."""
        watcher.note(f"{job.run_name}: {why} ({job.retries} of {self.max_retries})")
        job.retried_at = utcnow()
        return self._submit(job, registry)

    def close(self) -> None:
        if self._started and ray.is_initialized():
            ray.shutdown()
        self._started = False


@ray.remote
def _member_task(spec: MemberSpec, secret: dict[str, str]) -> str:
    """One attempt of a member; `secret` ($PGPASSWORD, resolved from the object store)."""
    registry = _registry_once_it_answers(spec.db, secret)
    try:
        outcome = run_member(spec, registry=registry, secret_env=secret)
    except (OperationalError, InterfaceError) as exc:
        raise RegistryOutOfReach(socket.gethostname(), error_line(exc)) from None
    finally:
        registry.close()
    if outcome.lost:
        raise MemberLost(f"run {spec.run_name} ended {outcome.status} by nobody's request (killed or preempted)")
    return outcome.status


# --------------------------------------------------------------------------- connecting and checking


def connect(address: str | None) -> bool:
    """Join the cluster at `address` (None: $RAY_ADDRESS, else a local one is started).
    Returns whether this call connected, so that it also disconnects."""
    if ray.is_initialized():  # a caller (a notebook, a test) already did
        return False
    # Ray's C++ core writes its retries to file descriptor 2 (a line a second while it is
    # refused, for ~20 s): keep them aside, to say in one line why it failed.
    with tempfile.TemporaryFile() as aside:
        try:
            with _stderr_into(aside):
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ray.exceptions.AuthenticationError, ConnectionError, RuntimeError, ValueError) as exc:
            aside.seek(0)
            where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
            raise UserError(f"cannot connect to the Ray cluster at {where}: {_why_not(exc, aside.read())}") from None
    return True


def _why_not(exc: Exception, said: bytes) -> str:
    """One line for a failed ray.init: `exc`, and what Ray's core wrote to stderr meanwhile."""
    if isinstance(exc, ray.exceptions.AuthenticationError):
        # Raised before any connection (RAY_AUTH_MODE=token, no token here): Ray's own
        # message is a paragraph under a traceback.
        message = str(getattr(exc, "message", exc))
        if "no authentication token was found" in message:
            return (
                "RAY_AUTH_MODE=token, but this machine has no auth token: give it the cluster's "
                "(~/.ray/auth_token, $RAY_AUTH_TOKEN_PATH or $RAY_AUTH_TOKEN; see docs/registry.md, Scale out)"
            )
        return message.split(". ")[0].strip().rstrip(".")
    if b"InvalidAuthToken" in said:
        if os.environ.get("RAY_AUTH_MODE") == "token":
            return (
                "the cluster refused this machine's auth token: give it the cluster's "
                "(~/.ray/auth_token or $RAY_AUTH_TOKEN; see docs/registry.md, Scale out)"
            )
        return (
            "the cluster wants its auth token: set RAY_AUTH_MODE=token and give this machine the "
            "cluster's token (~/.ray/auth_token or $RAY_AUTH_TOKEN; see docs/registry.md, Scale out)"
        )
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def _stderr_into(file):
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def registry_problem(url: URL, hosts: set[str]) -> str | None:
    """Why the registry at `url` cannot serve a cluster spread over `hosts`, or None."""
    if len(hosts) <= 1:
        return None
    spread = f"the Ray cluster spans {len(hosts)} machines"
    if sqlite_path(url) is not None or url.get_backend_name() == "sqlite":
        return (
            f"{spread}, and a SQLite registry lives on one machine's disk: use a PostgreSQL registry "
            "every machine reaches (--db postgresql+psycopg://USER@HOST/DB; see docs/registry.md, Scale out)"
        )
    if (url.host or "localhost").lower() in LOCAL_HOSTS or url.host.startswith("/"):
        return (
            f"{spread}, and the registry's PostgreSQL server is at {url.host or 'a local socket'}, "
            "which every machine reads as itself: give the server's network address in --db"
        )
    return None


def driver_versions() -> dict[str, str]:
    return {"grpoctl": grpoctl.__version__, "ray": ray.__version__}


def _registry_once_it_answers(db: str, secret: dict[str, str]) -> Registry:
    """The registry, waiting for it as a member waits for a claim (rules.claim_wait_s):
    an attempt started during an outage waits it out, rather than spend its retries."""
    deadline = time.monotonic() + claim_wait_s()
    while True:
        try:
            return Registry(_with_password(db, secret))
        except (UserError, OperationalError, InterfaceError) as exc:
            if time.monotonic() >= deadline:
                raise RegistryOutOfReach(socket.gethostname(), error_line(exc)) from None
        time.sleep(1.0)


def _with_password(db: str, secret: dict[str, str]) -> str:
    """The registry URL `db` with the password in `secret`, if any (for this process only)."""
    password = secret.get("PGPASSWORD")
    return make_url(db).set(password=password).render_as_string(hide_password=False) if password else db


@ray.remote(num_cpus=0)
def _probe(db: str, secret: dict[str, str]) -> dict:
    """What a node runs, and whether it reaches the registry."""
    try:
        Registry.check(_with_password(db, secret), write=True)
        reaches = None
    except UserError as exc:
        reaches = str(exc)
    return {"host": socket.gethostname(), "python": sys.executable, "registry": reaches, **driver_versions()}


def check_nodes(nodes: list[dict], db: str, secret) -> list[tuple[str, str]]:
    """Raise a one-line UserError unless every node runs our versions and one reaches the
    registry; returns (node id, why) for each node that does not reach it, to leave out."""
    refs = {}
    for node in nodes:
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        refs[node["NodeManagerAddress"]] = _probe.options(scheduling_strategy=strategy).remote(db, secret)
    probes = {}
    for address, ref in refs.items():
        try:
            probes[address] = ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except RayError as exc:
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
            raise UserError(
                f"node {address} cannot run grpoctl ({why}): install the driver's grpoctl {grpoctl.__version__} on it"
            ) from None
    problem = version_problem(driver_versions(), probes)
    if problem:
        raise UserError(problem)
    ids = {node["NodeManagerAddress"]: node["NodeID"] for node in nodes}
    sick = [
        (ids[address], f"node {address} ({probe['host']}) cannot open the registry: {probe['registry']}")
        for address, probe in sorted(probes.items())
        if probe["registry"]
    ]
    if len(sick) == len(probes):
        raise UserError(sick[0][1])
    return [(node_id, f"{why}: left out of this sweep") for node_id, why in sick]


def version_problem(driver: dict[str, str], probes: dict[str, dict]) -> str | None:
    """The first node whose grpoctl or Ray differs from the driver's, in one line; or None."""
    for address, probe in sorted(probes.items()):
        for package in ("grpoctl", "ray"):
            if probe[package] != driver[package]:
                return (
                    f"node {address} ({probe['host']}) runs {package} {probe[package]}, the driver "
                    f"{driver[package]}: every node needs the same grpoctl and Ray"
                )
    return None


# --------------------------------------------------------------------------- watching


def _watch(refs: dict, registry: Registry, result: SweepResult, watcher, cluster: RayCluster) -> None:
    pending = dict(refs)
    looked = time.monotonic()
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
            for ref in ready:
                job = pending.pop(ref)
                again = _finish(job, ref, registry, watcher, cluster)
                if again is not None:
                    pending[again] = job
            if time.monotonic() - looked >= LAPSE_CHECK_S:
                looked = time.monotonic()
                cluster.retry_lapsed(pending, registry, watcher)
            try:
                watcher.refresh()
            except (OperationalError, InterfaceError):  # the registry is away: the members wait it out
                pass
    except KeyboardInterrupt:
        result.interrupted = True
        watcher.interrupting(len(pending))
        _interrupt(pending, registry, watcher)


def _interrupt(pending: dict, registry: Registry, watcher) -> None:
    """Cancel every task (each running member forwards it as one Ctrl-C); a second Ctrl-C
    cancels again (the second signal); past the grace period, kill their workers."""
    for ref in pending:
        ray.cancel(ref)
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while pending and time.monotonic() < deadline:
        try:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
            for ref in ready:
                _finish(pending.pop(ref), ref, registry, watcher)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)
    for ref in list(pending):
        ray.cancel(ref, force=True)
        _finish(pending.pop(ref), ref, registry, watcher)


def _finish(job: Job, ref, registry: Registry, watcher, cluster: RayCluster | None = None):
    """Record how `job`'s task ended, or, if it ended for want of the registry with retries
    left on `cluster` (none while interrupting), start it again: then the new attempt's
    ref (else None)."""
    try:
        job.outcome = ray.get(ref, timeout=30)
    except TaskCancelledError:
        job.outcome = _status_of(job, registry, otherwise="not started")
    except RayTaskError as exc:
        if cluster and isinstance(exc.cause, RegistryOutOfReach) and job.retries < cluster.max_retries:
            return cluster.retry_out_of_reach(job, exc.cause, registry, watcher)
        if isinstance(exc.cause, MemberLost):
            job.outcome = _status_of(job, registry, otherwise="lost") + " (out of retries)"
        else:
            job.outcome = f"error: {error_line(exc.cause or exc)}"
    except RayError as exc:  # its worker or node died, more often than max_retries allows
        job.outcome = _status_of(job, registry, otherwise="lost") + f" ({type(exc).__name__}, out of retries)"
    watcher.finished(job)
    return None


def _status_of(job: Job, registry: Registry, otherwise: str) -> str:
    try:
        run = registry.runs_named([job.run_name]).get(job.run_name)
    except (OperationalError, InterfaceError):
        return otherwise + " (the registry is unreachable)"
    return run.status if run is not None else otherwise
