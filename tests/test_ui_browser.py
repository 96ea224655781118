"""The dashboard in a real browser: Debian's headless chromium, driven by selenium through
/usr/bin/chromedriver with SE_OFFLINE=true (selenium's manager never fetches a driver),
against `python -m grpoctl ui` serving on a free port.

Each test saves a screenshot under its tmp directory (the study view's is also written
to docs/ui-study.png for docs/commands.md, when $GRPOCTL_UI_SCREENSHOTS_TO_DOCS is set). The
page says when it is drawn (`data-ready` on <body>), and the tests wait on what the page
shows, never on a sleep: the live test holds a real trainer at a fault point
(GRPOCTL_FAULT=step-record@N:STOP) and releases it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import ui_registry
from conftest import IN_CI, REPO, fast_overrides, record_service_start
from sqlalchemy import update
from ui_server import POLL_S, Server

from grpoctl.registry import Registry, Run
from grpoctl.registry.models import utcnow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DOCS = REPO / "docs"


def _no_browser(reason: str):
    if IN_CI:
        pytest.fail(f"browser tests cannot run under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def _timed():
    """The module's seconds, for .ci/run's ledger (the `ui` line)."""
    started = time.monotonic()
    yield
    record_service_start("ui", time.monotonic() - started)


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _no_browser("selenium is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        _no_browser(
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    started = time.monotonic()
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    record_service_start("chromium", time.monotonic() - started)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    url, ids = ui_registry.shared_sqlite(tmp_path_factory)
    server = Server(url, tmp_path_factory.mktemp("ui-server"))
    yield server, ids
    server.stop()


def show(driver, url: str, timeout: float = 30) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get(url)
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.hasAttribute('data-ready')"))


def wait_for(driver, condition, timeout: float = 30, what: str = ""):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d), message=what)


def text_of(driver, css: str) -> list[str]:
    """The texts of the elements `css` selects, read in one go (a live page redraws its tables)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent.trim())", css
    )


def test_runs_table_filters_and_sorts(browser, shared, tmp_path):
    from selenium.webdriver.common.by import By

    server, ids = shared
    show(browser, server.url + "/")
    names = text_of(browser, "#runs tbody tr td:nth-child(2)")
    assert sorted(names) == sorted(ids) and browser.find_element(By.ID, "updated").text.startswith("updated ")
    browser.find_element(By.ID, "filter").send_keys("wide")
    wait_for(browser, lambda d: len(text_of(d, "#runs tbody tr")) == 6, what="the filter keeps the 6 wide runs")
    # (clicked from the page's side: a live page may redraw the table between find and click)
    browser.execute_script("[...document.querySelectorAll('#runs th')].find((th) => th.textContent === 'name').click()")
    wait_for(browser, lambda d: d.execute_script("return document.body.hasAttribute('data-ready')"))
    shown = text_of(browser, "#runs tbody tr td:nth-child(2)")
    assert shown in (sorted(shown), sorted(shown, reverse=True)) and len(shown) == 6
    browser.save_screenshot(str(tmp_path / "runs.png"))


def test_study_chart_changes_when_another_metric_is_picked(browser, shared, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, _ = shared
    show(browser, server.url + "/#/study/abl")
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-metric") == "eval/accuracy"
    assert chart.find_elements(By.TAG_NAME, "canvas")
    wait_for(browser, lambda d: d.execute_script("return document.body.hasAttribute('data-compared')"))
    assert "grad-norm explosion" in browser.find_element(By.ID, "compare").text
    before = browser.find_element(By.ID, "chart").screenshot_as_png
    Select(browser.find_element(By.ID, "metric")).select_by_value("train/reward")
    wait_for(browser, lambda d: d.find_element(By.ID, "chart").get_attribute("data-metric") == "train/reward")
    assert browser.find_element(By.ID, "chart").screenshot_as_png != before
    assert "min-max over 6 seeds" in browser.find_element(By.CSS_SELECTOR, "#chart .u-legend").text
    assert "mean reward" in browser.find_element(By.ID, "metric-description").text
    browser.save_screenshot(str(tmp_path / "study.png"))
    if os.environ.get("GRPOCTL_UI_SCREENSHOTS_TO_DOCS"):
        shutil.copy(tmp_path / "study.png", DOCS / "ui-study.png")


def test_samples_page_filters_right_and_wrong(browser, shared, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, ids = shared
    show(browser, f"{server.url}/#/run/{ids['solo-live']}")
    assert "optimizer.lr" in browser.find_element(By.ID, "config-diff").text
    wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#samples .sample")) == 4)
    Select(browser.find_element(By.ID, "sample-step")).select_by_value("3")
    Select(browser.find_element(By.ID, "sample-filter")).select_by_value("wrong")
    wait_for(browser, lambda d: text_of(d, "#samples .prompt") == ["What is 3 + 1?", "What is 3 + 3?"])
    marks = browser.execute_script(
        "return [...document.querySelectorAll('#samples .sample')].map((e) => e.dataset.correct)"
    )
    assert marks == ["no", "no"]
    assert "step 1 reward 0.2" in browser.find_element(By.ID, "log").text
    browser.save_screenshot(str(tmp_path / "samples.png"))


def test_a_run_whose_heartbeat_stops_shows_stale_without_a_reload(browser, tmp_path):
    db = str(tmp_path / "registry.db")
    with Registry(db) as registry:
        run = ui_registry.make_run(registry, "beating", 3e-5, 0, 10)
        ui_registry.log_curve(registry, run, range(3), 0.6)
    server = Server(db, tmp_path)
    try:
        show(browser, server.url + "/")
        assert text_of(browser, "#runs td[data-status]") == ["running"]
        assert browser.execute_script("return document.body.hasAttribute('data-live')")
        with Registry(db) as registry, registry._writer.begin() as conn:
            conn.execute(update(Run).where(Run.id == run.id).values(heartbeat_at=utcnow() - timedelta(hours=1)))
        wait_for(browser, lambda d: text_of(d, "#runs td[data-status]") == ["stale"], timeout=4 * POLL_S + 5)
        wait_for(browser, lambda d: not d.execute_script("return document.body.hasAttribute('data-live')"))
        browser.save_screenshot(str(tmp_path / "stale.png"))
    finally:
        server.stop()


def _stopped(proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, f"the trainer exited with {proc.returncode}"
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_live_a_step_committed_shows_within_two_polls(browser, tiny_model_dir, tmp_path):
    """A trainer held before committing step 3 (the page shows 2); released, it commits
    step 3 and holds before step 4: the page shows step 3 within two polls."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    cmd = [sys.executable, str(REPO / "tests" / "digit_reward_train.py"), "train", "addition"]
    cmd += fast_overrides(tiny_model_dir, tmp_path, **{"loop.n_grpo_steps": 5}) + ["name=live"]
    env = {k: v for k, v in os.environ.items() if k != "GRPOCTL_DB"} | {
        "PYTHONPATH": str(REPO),
        "GRPOCTL_FAULT": "step-record@3:STOP,step-record@4:STOP",
    }
    with open(tmp_path / "trainer.log", "w") as out:
        trainer = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = None
    try:
        wait_for(browser, lambda d: _stopped(trainer), timeout=240, what="the trainer reaches step-record@3")
        server = Server(str(tmp_path / "registry.db"), tmp_path)
        show(browser, server.url + "/#/run/1")
        Select(browser.find_element(By.ID, "metric")).select_by_value("train/reward")
        wait_for(browser, lambda d: d.find_element(By.ID, "chart").get_attribute("data-metric") == "train/reward")
        chart = browser.find_element(By.ID, "chart")
        assert (
            chart.get_attribute("data-last-step") == "2"
            and "step 2/5" in browser.find_element(By.ID, "run-status").text
        )
        browser.save_screenshot(str(tmp_path / "live-before.png"))
        trainer.send_signal(signal.SIGCONT)
        wait_for(browser, lambda d: _stopped(trainer), timeout=120, what="the trainer reaches step-record@4")
        committed = time.monotonic()
        wait_for(
            browser,
            lambda d: (
                d.find_element(By.ID, "chart").get_attribute("data-last-step") == "3"
                and "step 3/5" in d.find_element(By.ID, "run-status").text
            ),
            timeout=2 * POLL_S + 1.5,
            what="step 3 within two polls of its commit",
        )
        assert time.monotonic() - committed <= 2 * POLL_S + 1.5
        browser.save_screenshot(str(tmp_path / "live-after.png"))
    finally:
        trainer.kill()
        trainer.wait(timeout=30)
        if server is not None:
            server.stop()
