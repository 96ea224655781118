"""How fast the CLI starts: `--help`, `--version`, `runs list` and `compare` over 100 runs.

    python benchmarks/bench_cli.py [--repeat 7] [--runs 100] [--steps 200] [--postgres] [--before DIR]

Each figure is the median wall time of `--repeat` whole `python -m grpoctl ...`
processes (interpreter start and imports included, as a user at a terminal feels
it), with `python -c 'import sqlmodel'` beside them: the floor of any command that
opens the registry. The registry is benchmarks/bench_compare.py's (100 runs x 200
steps x 30 metrics, bulk-inserted), on SQLite, and on PostgreSQL too with
`--postgres` (a throwaway server from tests/pg_server.py; needs initdb and psycopg).

`--before DIR` also times the grpoctl in DIR (a `git archive` of the parent commit,
say) and prints its figures beside this checkout's: the two are run in turn, one
process each, so that both see the same load on a shared machine. The registry is
built by this checkout.

Targets: `--help` and `--version` 0.3 s, `runs list` 0.5 s on SQLite, `compare` 1 s on
both (without `--baseline`: with it, compare also imports scipy.stats, shown beside and
not held). On PostgreSQL the floor is `import sqlmodel, psycopg` (psycopg alone adds
about 50 ms) and `runs list` is shown beside it, not held. The server is kept off the
core the commands are pinned to, as a server on another machine would be.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from bench_compare import BASELINE, build  # noqa: E402

TARGETS = {"--help": 0.3, "--version": 0.3, "runs list": 0.5, "compare": 1.0}
SQLMODEL = "import sqlmodel"


Figures = tuple[float, float, float]  # median wall, min wall, median CPU seconds


def median_seconds(command: list[str], repeat: int, envs: list[dict[str, str]]) -> list[Figures]:
    """Figures of `command` run `repeat` times under each of `envs`, taking turns; exits if
    it fails. On a shared machine the wall clock includes waiting for a core, CPU time
    (user + system) does not."""
    walls: list[list[float]] = [[] for _ in envs]
    cpus: list[list[float]] = [[] for _ in envs]
    for _ in range(repeat):
        for i, env in enumerate(envs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            # Run from a neutral directory: `python -m` and `-c` put the working directory
            # first on sys.path, ahead of PYTHONPATH, so the repository root would shadow --before.
            out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
            walls[i].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[i].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if out.returncode != 0:
                sys.exit(f"{' '.join(command[2:])} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return [(statistics.median(w), min(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


def report(label: str, figures: list[Figures], target: float | None) -> bool:
    """One line: this checkout's figures (held to `target`), then --before's if given."""
    med, low, cpu = figures[0]
    verdict = "" if target is None else f"  {'OK' if med <= target else 'OVER'} (target {target:.1f} s)"
    before = ""
    if len(figures) > 1:
        b_med, _, b_cpu = figures[1]
        before = f"  | before: {b_med:.3f} s wall, {b_cpu:.3f} s CPU"
    print(f"  {label:36} median {med:.3f} s wall (min {low:.3f}), {cpu:.3f} s CPU{verdict}{before}")
    return target is None or med <= target


def bench_registry(
    db: str,
    label: str,
    repeat: int,
    envs: list[dict[str, str]],
    floor: list[Figures],
    floor_label: str,
    hold_list: bool,
) -> bool:
    grpoctl = [sys.executable, "-m", "grpoctl"]
    print(f"{label}:")
    report(f"{floor_label} (floor)", floor, None)
    listed = median_seconds([*grpoctl, "runs", "list", "--db", db], repeat, envs)
    ok = report("runs list", listed, TARGETS["runs list"] if hold_list else None)
    compare = median_seconds([*grpoctl, "compare", "bench", "--db", db], repeat, envs)
    ok &= report("compare bench", compare, TARGETS["compare"])
    baseline = median_seconds([*grpoctl, "compare", "bench", "--db", db, "--baseline", BASELINE], repeat, envs)
    report("compare bench --baseline", baseline, None)
    return ok


def postgres_database(root: Path) -> str:
    """A fresh PostgreSQL server under `root` with an empty database `bench`; its URL."""
    import pg_server
    import psycopg

    root.parent.chmod(0o755)  # the server runs as the postgres user, who must reach its directory
    # The server stands for one on another machine: keep it off the core the commands are
    # pinned to (it would otherwise inherit that pin and take turns with them).
    pinned = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - pinned
    if others:
        os.sched_setaffinity(0, others)
    try:
        admin = pg_server.start(root)
    finally:
        os.sched_setaffinity(0, pinned)
    with psycopg.connect(admin.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    return admin.rsplit("/", 1)[0] + "/bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--postgres", action="store_true", help="also on a throwaway PostgreSQL server")
    parser.add_argument("--before", help="also time the grpoctl in this directory, in turn with this checkout's")
    args = parser.parse_args()
    if args.repeat < 5:
        parser.error("--repeat must be at least 5: a median of fewer whole processes is noise")

    codes = [HERE.parent] + ([Path(args.before).resolve()] if args.before else [])
    envs = [dict(os.environ, PYTHONPATH=str(code)) for code in codes]
    print(f"grpoctl from {' and, before, '.join(map(str, codes))}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    grpoctl = [sys.executable, "-m", "grpoctl"]
    floor = median_seconds([sys.executable, "-c", SQLMODEL], args.repeat, envs[:1]) * len(envs)
    print("no registry:")
    report(f"{SQLMODEL} (floor)", floor, None)
    ok = report("--help", median_seconds([*grpoctl, "--help"], args.repeat, envs), TARGETS["--help"])
    ok &= report("--version", median_seconds([*grpoctl, "--version"], args.repeat, envs), TARGETS["--version"])

    with tempfile.TemporaryDirectory() as tmp:
        sqlite = Path(tmp) / "bench.db"
        build(sqlite, args.runs, args.steps)
        what = f"{args.runs} runs x {args.steps} steps"
        ok &= bench_registry(str(sqlite), f"SQLite, {what}", args.repeat, envs, floor, SQLMODEL, hold_list=True)
        if args.postgres:
            root = Path(tmp) / "pg"
            try:
                url = postgres_database(root)
                build(url, args.runs, args.steps)
                pg_floor = median_seconds([sys.executable, "-c", f"{SQLMODEL}, psycopg"], args.repeat, envs[:1])
                ok &= bench_registry(
                    url,
                    f"PostgreSQL, {what}",
                    args.repeat,
                    envs,
                    pg_floor * len(envs),
                    f"{SQLMODEL}, psycopg",
                    hold_list=False,
                )
            finally:
                import pg_server

                pg_server.stop(root)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
