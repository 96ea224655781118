"""How fast `grpoctl ui` answers on a big registry: 100 runs x 200 steps x 30 metrics.

    python benchmarks/bench_ui.py [--runs 100] [--steps 200] [--repeat 5] [--db URL] [--no-browser]

Builds the registry as benchmarks/bench_compare.py does (an ablation `bench` of 20
variants x 5 seeds), serves it with `python -m grpoctl ui`, and times:

- the API: one metric across all the study's runs (`/api/studies/bench/curves`, a
  per-step metric downsampled to 200 buckets, and eval accuracy), over HTTP, the median
  of `--repeat` requests after a first one; the target is 300 ms;
- the page: headless Chromium (Debian's, as the browser tests use) opens the study view
  on a fresh server each time, and the page's `data-ready-ms` says how long after the
  navigation started the runs table and the first chart were drawn; the median of 5
  against a target of 1.5 s.

`--db` builds at a URL instead (an empty PostgreSQL database, or a new SQLite path).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compare import METRICS, build  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
API_TARGET_S = 0.3
READY_TARGET_S = 1.5
QUERIES = ("metric=train/reward&points=200", "metric=train/grad_norm&points=200", "metric=eval/accuracy")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(db: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpoctl", "ui", "--db", db, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"grpoctl ui exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    sys.exit("grpoctl ui did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def get_seconds(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        size = len(response.read())
    return time.perf_counter() - start, size


def cpu_seconds(pid: int) -> float:
    """The server's CPU seconds so far (user + system): on a shared machine the wall
    clock includes waiting for a core, this does not."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_api(db: str, repeat: int) -> bool:
    proc, base = serve(db)
    ok = True
    try:
        for query in QUERIES:
            url = f"{base}/api/studies/bench/curves?{query}"
            first, size = get_seconds(url)
            walls, cpus = [], []
            for _ in range(repeat):
                before = cpu_seconds(proc.pid)
                walls.append(get_seconds(url)[0])
                cpus.append(cpu_seconds(proc.pid) - before)
            med = statistics.median(walls)
            ok &= med <= API_TARGET_S
            verdict = "OK" if med <= API_TARGET_S else "SLOWER THAN"
            print(
                f"API curves {query:36} median {med * 1000:.0f} ms wall, {statistics.median(cpus) * 1000:.0f} ms "
                f"server CPU (first {first * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms, {size / 1024:.0f} KiB)  "
                f"{verdict} {API_TARGET_S * 1000:.0f} ms target"
            )
    finally:
        stop(proc)
    return ok


def time_page(db: str, repeat: int) -> bool:
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    times = []
    try:
        for _ in range(repeat):
            proc, base = serve(db)  # a fresh server each time
            try:
                driver.get("about:blank")
                driver.get(f"{base}/#/study/bench")
                WebDriverWait(driver, 60).until(
                    lambda d: d.execute_script("return document.body.hasAttribute('data-ready')")
                )
                times.append(int(driver.execute_script("return document.body.dataset.readyMs")) / 1000)
            finally:
                stop(proc)
    finally:
        driver.quit()
    med = statistics.median(times)
    verdict = "OK" if med <= READY_TARGET_S else "SLOWER THAN"
    shown = ", ".join(f"{t:.2f}" for t in times)
    print(
        f"page data-ready (study view, fresh server) median {med:.2f} s ({shown})  {verdict} {READY_TARGET_S} s target"
    )
    return med <= READY_TARGET_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--db", help="build it at this URL instead (an empty PostgreSQL database, or a new SQLite path)"
    )
    parser.add_argument("--no-browser", action="store_true", help="time the API only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "bench.db")
        start = time.perf_counter()
        build(db, args.runs, args.steps)
        print(
            f"built {args.runs} runs x {args.steps} steps x {len(METRICS)} metrics in {time.perf_counter() - start:.1f} s; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        ok = time_api(db, args.repeat)
        if not args.no_browser:
            ok &= time_page(db, args.repeat)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
