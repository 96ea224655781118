"""Grading with a hard time bound, in or out of the main thread.

The grading time limits (equivalence.py, in CPU time) only fire in a main thread,
and no signal can interrupt a long computation inside C code. So a `Grader` with
workers > 0 grades in a pool of worker processes: each pair gets `timeout_s` of
the worker's CPU time, after which its worker is killed and replaced and the
answer counts as wrong. CPU time, not wall time, so that a pair is not killed for
waiting for a core on a busy machine (the verdict would depend on the load);
`wall_timeout_s` (by default WALL_TIMEOUT_FACTOR times longer) still kills a
worker that hangs without computing. The parent reads a busy worker's CPU time
only once its pair has run `timeout_s` of wall time: it cannot have used more.
With workers=0 it grades in-process, bounded by equivalence.py's limits; called
off the main thread it then falls back to a private one-worker pool.

Only the answers that need math-verify travel to a worker: identical strings,
equal numbers and hostile inputs are settled in the caller (equivalence.prepare).
Workers are started with "spawn", not fork: the trainer holds torch threads and
CUDA state that must not be forked.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from grpoctl.rewards import stats
from grpoctl.rewards.cputime import cpu_seconds
from grpoctl.rewards.equivalence import Verdict, math_verify_equal, prepare

START_TIMEOUT_S = 60.0  # a fresh worker imports sympy and math-verify
# CPU seconds a worker may spend on one pair: above what equivalence.py's own limits
# allow a pair (parse the truth, parse the prediction, compare), so that the kill is
# only the backstop for what they cannot stop (C code that no signal interrupts).
TIMEOUT_S = 8.0
# The wall-clock backstop, as a multiple of the CPU-time limit: a worker that hangs
# without computing is killed after this much wall time.
WALL_TIMEOUT_FACTOR = 8.0


def _serve(conn: multiprocessing.connection.Connection, check: Callable) -> None:
    """A worker's life: say ready, then grade pairs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # Warm up sympy and the LaTeX parser (or a check's own warm_up: a reward plugin's
    # import) before saying ready, so that the first real pair is not charged for
    # loading them against its timeout.
    warm_up = getattr(check, "warm_up", None)
    if warm_up is not None:
        warm_up()
    else:
        math_verify_equal("x + 1", "1 + x")
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone: so are we
        if job is None:
            return
        try:
            verdict = Verdict(*check(*job))
        except Exception:
            verdict = Verdict(False, error=True)
        conn.send(tuple(verdict))


class _Worker:
    def __init__(self, context, check: Callable):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_conn, check), daemon=True, name="grpoctl-grader")
        self.process.start()
        child_conn.close()  # only the child holds its end, so its exit shows as EOF here
        self.ready = False

    def stop(self, kill: bool = False) -> None:
        if not kill and self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=2.0)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class Grader:
    """Decides whether predicted answers equal their ground truths, in bounded time.

    grade(pred, truth) -> bool and grade_many(pairs) -> list[bool] never raise on
    any input. A timeout counts as wrong and is counted in `timeouts`; so does an
    error (the grading raised, its worker died, or the truth is not math), in
    `errors`. Both are also counted in the module-wide `grading_stats()`. Use as
    a context manager, or call close().

    check is the comparison run on the normalized answers (math-verify by
    default); it must be a picklable module-level function returning
    (equal, timed_out[, error]). Tests pass one that hangs and one that raises.
    """

    def __init__(
        self,
        workers: int = 0,
        timeout_s: float = TIMEOUT_S,
        check: Callable = math_verify_equal,
        wall_timeout_s: float | None = None,
    ):
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        wall_timeout_s = WALL_TIMEOUT_FACTOR * timeout_s if wall_timeout_s is None else wall_timeout_s
        if wall_timeout_s < timeout_s:
            raise ValueError(f"wall_timeout_s must be >= timeout_s, got {wall_timeout_s} < {timeout_s}")
        self.workers = workers
        self.timeout_s = timeout_s  # CPU seconds per pair in a worker
        self.wall_timeout_s = wall_timeout_s
        self.check = check
        self.timeouts = 0
        self.errors = 0
        self.restarts = 0
        self._lock = threading.Lock()
        self._context = multiprocessing.get_context("spawn")
        self._pool: list[_Worker] = [_Worker(self._context, check) for _ in range(workers)]
        self._fallback: Grader | None = None
        self._closed = False

    # -- public API -----------------------------------------------------------

    def grade(self, pred: str, truth: str) -> bool:
        return self.grade_many([(pred, truth)])[0]

    def grade_many(self, pairs: Iterable[tuple[str, str]]) -> list[bool]:
        verdicts: list[bool] = []
        # One job per (prediction part, truth part) left for math-verify; an
        # answer is right when all of its jobs are (see equivalence.prepare).
        jobs: list[tuple[int, str, str]] = []
        owner: list[int] = []  # jobs[j] belongs to verdicts[owner[j]]
        for index, (pred, truth) in enumerate(pairs):
            stats.count("calls")
            try:
                prepared = prepare(str(pred), str(truth))
            except Exception:
                # A bug in the cheap checks must not stop training: score 0, count it.
                self._count(Verdict(False, error=True))
                verdicts.append(False)
                continue
            if prepared.verdict is None:
                for part, target in prepared.pending:
                    jobs.append((len(jobs), part, target))
                    owner.append(index)
                verdicts.append(True)
            else:
                stats.count(prepared.how)
                verdicts.append(prepared.verdict)
        if jobs:
            for job, equal in self._check_all(jobs).items():
                verdicts[owner[job]] = verdicts[owner[job]] and equal
        return verdicts

    def call_many(self, jobs: Iterable[tuple]) -> list[Any]:
        """`check(*job)` for each job in the worker pool, bounded in time like a pair, without
        the cheap checks that answers go through first; each job's value (the first of what
        check returns), or None when it timed out or failed (counted as for a pair).
        The reward plugins' calls (rewards/plugins.py)."""
        if self.workers < 1:
            raise ValueError("call_many runs in worker processes: make the Grader with workers >= 1")
        pending = [(index, *job) for index, job in enumerate(jobs)]
        if not pending:
            return []
        if self._closed:
            raise RuntimeError("this Grader is closed")
        with self._lock:
            results = self._run_in_pool(pending)
            failed = set(self._failed)
        return [None if index in failed else results[index] for index in range(len(pending))]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for worker in self._pool:
                worker.stop()
            self._pool = []
            if self._fallback is not None:
                self._fallback.close()
                self._fallback = None

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- where the parsing happens ---------------------------------------------

    def _check_all(self, pending: list[tuple]) -> dict[int, Any]:
        if self._closed:
            raise RuntimeError("this Grader is closed")
        if self.workers > 0:
            with self._lock:
                return self._run_in_pool(pending)
        if threading.current_thread() is threading.main_thread():
            results = {}
            for index, *args in pending:
                try:
                    verdict = Verdict(*self.check(*args))
                except Exception:
                    verdict = Verdict(False, error=True)
                self._count(verdict)
                results[index] = verdict.equal
            return results
        with self._lock:
            if self._fallback is None:
                self._fallback = Grader(
                    workers=1, timeout_s=self.timeout_s, check=self.check, wall_timeout_s=self.wall_timeout_s
                )
        before = self._fallback.timeouts, self._fallback.errors
        results = self._fallback._check_all(pending)
        self.timeouts += self._fallback.timeouts - before[0]
        self.errors += self._fallback.errors - before[1]
        return results

    def _count(self, verdict: Verdict) -> None:
        """Count a grading cut short by a timeout or an error (it scores 0 either way)."""
        if verdict.timed_out:
            self.timeouts += 1
            stats.count("timeouts")
        if verdict.error:
            self.errors += 1
            stats.count("errors")

    def _replace(self, worker: _Worker) -> _Worker:
        worker.stop(kill=True)
        fresh = _Worker(self._context, self.check)
        self._pool[self._pool.index(worker)] = fresh
        self.restarts += 1
        return fresh

    def _run_in_pool(self, pending: list[tuple]) -> dict[int, Any]:
        """Hand pairs to idle workers; collect answers; kill whoever overruns."""
        # worker -> (index of the pair it grades or None while starting, deadline to
        # look at it again); and for a pair, (CPU seconds the worker had used, wall
        # time) when it got the pair.
        busy: dict[_Worker, tuple[int | None, float]] = {}
        self._started: dict[_Worker, tuple[float, float]] = {}
        self._failed: set[int] = set()  # the jobs that timed out or failed (call_many's None)
        try:
            return self._dispatch(deque(pending), busy)
        finally:
            # Leaving early (Ctrl-C, a worker that would not start): a worker
            # still on a pair would later answer the next caller with this
            # caller's verdict, so it goes.
            for worker, (index, _) in busy.items():
                if index is not None and worker in self._pool:
                    self._replace(worker)

    def _dispatch(self, queue: deque, busy: dict) -> dict[int, Any]:
        results: dict[int, Any] = {}
        for worker in self._pool:
            if not worker.ready:
                busy[worker] = (None, time.monotonic() + START_TIMEOUT_S)
        idle = [w for w in self._pool if w.ready]

        while queue or any(job is not None for job, _ in busy.values()):
            while queue and idle:
                worker = idle.pop()
                job = queue.popleft()  # (index, pred, truth), or (index, *a plugin call's arguments)
                index = job[0]
                try:
                    worker.conn.send(tuple(job[1:]))
                except OSError:
                    # It died while idle: put the pair back, start a new worker.
                    queue.appendleft(job)
                    self._after_failure(worker, None, results, busy)
                    continue
                now = time.monotonic()
                busy[worker] = (index, now + self.timeout_s)
                self._started[worker] = (cpu_seconds(worker.process.pid) or 0.0, now)
            if not busy:
                break
            wait_s = max(0.0, min(deadline for _, deadline in busy.values()) - time.monotonic())
            readable = multiprocessing.connection.wait([w.conn for w in busy], timeout=wait_s)
            for worker in [w for w in list(busy) if w.conn in readable]:
                index, _ = busy.pop(worker)
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    if index is None:
                        raise RuntimeError("a grading worker exited while starting") from None
                    # The worker died (out of memory, say): its pair is wrong.
                    self._count(Verdict(False, error=True))
                    self._after_failure(worker, index, results, busy)
                    continue
                if index is None:
                    worker.ready = True
                else:
                    verdict = Verdict(*message)
                    self._count(verdict)
                    results[index] = verdict.equal
                    if verdict.timed_out or verdict.error:
                        self._failed.add(index)
                idle.append(worker)
            now = time.monotonic()
            for worker in [w for w, (_, deadline) in busy.items() if deadline <= now]:
                index, _ = busy[worker]
                if index is None:
                    raise RuntimeError(f"a grading worker did not start within {START_TIMEOUT_S:.0f} s")
                left = self._time_left(worker, now)
                if left > 0:
                    busy[worker] = (index, now + left)  # it waited for a core: not its fault
                    continue
                busy.pop(worker)
                self._count(Verdict(False, timed_out=True))
                self._after_failure(worker, index, results, busy)
        return results

    def _time_left(self, worker: _Worker, now: float) -> float:
        """Wall seconds before a busy worker could have used up its pair's CPU time
        (CPU time cannot run faster than the clock), capped by the wall-clock
        backstop; 0 when it is to be killed."""
        cpu_at_start, wall_at_start = self._started[worker]
        used = cpu_seconds(worker.process.pid)
        if used is None:
            return 0.0
        cpu_left = self.timeout_s - (used - cpu_at_start)
        wall_left = self.wall_timeout_s - (now - wall_at_start)
        left = min(cpu_left, wall_left)
        return left if left > 0.01 else 0.0

    def _after_failure(self, worker: _Worker, index: int | None, results: dict, busy: dict) -> None:
        """The pair a worker was on counts as wrong; a fresh worker starts in its place."""
        if index is not None:
            results[index] = False
            self._failed.add(index)
        busy[self._replace(worker)] = (None, time.monotonic() + START_TIMEOUT_S)
