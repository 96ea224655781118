"""The dashboard's JSON API (grpoctl/ui/), through Starlette's test client, on SQLite and
PostgreSQL: what each view reads, that its figures are compare's and report's, that
curves keep every spike when downsampled, and that live polls get only later points."""

from __future__ import annotations

import math
import random
import re
from statistics import mean

import pytest
import ui_registry
from conftest import drop_pg_database, fresh_pg_database
from sqlalchemy import event, insert, update

from grpoctl import metrics
from grpoctl.analysis.compare import build_compare_table
from grpoctl.analysis.downsample import bucket_edges, downsample, ema
from grpoctl.registry import EvalResult, Metric, Registry, store
from grpoctl.rules import config_hash

starlette = pytest.importorskip("starlette", reason="the ui extra is not installed (pip install 'grpoctl[ui]')")
from starlette.testclient import TestClient  # noqa: E402

from grpoctl.ui.app import create_app  # noqa: E402

BASE = "http://127.0.0.1:8321"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def built(request, tmp_path_factory):
    """(url, {run name: id}) of tests/ui_registry.py's registry, built once per backend."""
    if request.param == "sqlite":
        return ui_registry.shared_sqlite(tmp_path_factory)
    admin = request.getfixturevalue("pg_admin_url")
    url = fresh_pg_database(admin)
    request.addfinalizer(lambda: drop_pg_database(admin, url))
    return url, ui_registry.build(url)


@pytest.fixture(scope="module")
def client(built):
    app = create_app(built[0])
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as test_client:
        yield test_client
    app.state.registry.close()


def get(client, path, status=200):
    response = client.get(path)
    assert response.status_code == status, (path, response.status_code, response.text[:500])
    return response.json()


# --------------------------------------------------------------------------- views


def test_runs_lists_every_run_with_status_progress_and_tags(client, built):
    body = get(client, "/api/runs")
    rows = {r["name"]: r for r in body["runs"]}
    assert set(rows) == set(built[1])
    live = rows["solo-live"]
    assert (live["status"], live["last_step"], live["total_steps"], live["tags"]) == ("running", 4, 12, ["watch"])
    assert rows["abl-good-s0"]["status"] == "finished" and rows["abl-good-s0"]["group"] == "abl"
    assert rows["abl-good-s0"]["reward"] == pytest.approx(0.2 + 0.5 * 11 / 11)
    assert {"name": "abl", "kind": "ablation"} in body["studies"]


def test_study_has_compares_rows_and_the_health_flags(client, built):
    body = get(client, "/api/studies/abl")
    compared = get(client, "/api/studies/abl/compare")
    with Registry(built[0], readonly=True) as registry:
        table = build_compare_table(registry, ["abl"])
    assert [v["label"] for v in body["variants"]] == [row.label for row in table.rows] == ["good", "wide", "hot"]
    assert [len(v["runs"]) for v in body["variants"]] == [2, 6, 1]
    rows = {r["variant"]: r for r in compared["compare"]["rows"]}
    assert rows["good"]["verdict"] == "baseline"
    assert rows["wide"]["final_acc"] == pytest.approx(table.rows[1].values["final_acc"].mean)
    wide = next(v for v in table.versus.rows if v.label == "wide")
    assert rows["wide"]["p_holm"] == pytest.approx(wide.p_holm)
    # the test behind the number, named as compare names it
    assert rows["wide"]["diff_test_name"] == wide.test != "" and rows["wide"]["problem_level"] == wide.problem_level
    hot = str(built[1]["abl-hot-s0"])
    assert [(f["kind"], f["step"]) for f in compared["flags"][hot]] == [("grad-norm explosion", 6)]
    assert compared["flags"][str(built[1]["abl-good-s0"])] == []
    assert metrics.GRAD_NORM in body["metrics"] and metrics.REWARD in body["metrics"]


def test_study_curves_are_seed_lines_up_to_five_seeds_else_a_labelled_band(client):
    body = get(client, f"/api/studies/abl/curves?metric={metrics.REWARD}&smoothing=0")
    variants = {v["label"]: v for v in body["variants"]}
    good, wide, hot = variants["good"], variants["wide"], variants["hot"]
    assert len(good["seeds"]) == 2 and "band" not in good
    assert "seeds" not in wide and wide["band"]["label"] == "min-max over 6 seeds"
    assert "seeds" not in hot and "band" not in hot
    # the mean over seeds, at each step, of what each seed logged (ui_registry.log_curve)
    for step in (0, 5, 11):
        t = step / 11
        want = mean(0.2 + (0.5 - 0.2) * t + 0.01 * seed for seed in range(6))
        i = wide["raw"][0].index(step)
        assert wide["raw"][1][i] == pytest.approx(want)
        assert wide["band"]["low"][1][i] == pytest.approx(0.2 + 0.3 * t)
        assert wide["band"]["high"][1][i] == pytest.approx(0.2 + 0.3 * t + 0.05)
    assert body["unit"] == metrics.describe(metrics.REWARD).unit


def test_smoothing_is_the_ema_of_the_raw_points(client, built):
    body = get(client, f"/api/runs/{built[1]['abl-hot-s0']}/curves?metric={metrics.GRAD_NORM}&smoothing=0.5")
    (variant,) = body["variants"]
    raw = list(zip(*variant["raw"], strict=True))
    assert variant["smooth"][1] == pytest.approx([v for _, v in ema(raw, 0.5)])
    assert variant["smooth"][1] != pytest.approx(variant["raw"][1])


def test_a_poll_after_a_step_gets_only_the_later_points(client, built):
    run_id = built[1]["abl-good-s0"]
    full = get(client, f"/api/runs/{run_id}/curves?metric={metrics.REWARD}")
    tail = get(client, f"/api/runs/{run_id}/curves?metric={metrics.REWARD}&after_step=8")
    (f,), (t,) = full["variants"], tail["variants"]
    assert t["raw"][0] == [9, 10, 11]
    assert t["smooth"][1] == pytest.approx(f["smooth"][1][-3:])  # smoothed over the whole series
    assert tail["last_step"] == 11


def test_eval_curves_are_never_downsampled_and_zoom_cuts_the_range(client, built):
    body = get(client, f"/api/studies/abl/curves?metric={metrics.EVAL_ACCURACY}&points=10")
    assert not body["downsampled"]
    assert all(v["raw"][0] == [0, 4, 8] for v in body["variants"])
    zoomed = get(client, f"/api/studies/abl/curves?metric={metrics.REWARD}&points=10&from=3&to=6")
    assert all(set(v["raw"][0]) <= {3, 4, 5, 6} and v["raw"][0] for v in zoomed["variants"])


def test_run_view_has_its_config_diff_evals_samples_and_log(client, built):
    run_id = built[1]["solo-live"]
    body = get(client, f"/api/runs/{run_id}")
    assert body["config_diff"]["optimizer.lr"] == 3e-5 and body["config_diff"]["seed"] == 5
    assert [e["step"] for e in body["evals"]] == [0, 4]
    assert body["sample_steps"] == [0, 1, 2, 3, 4]
    right = get(client, f"/api/runs/{run_id}/samples?step=3&filter=right")
    wrong = get(client, f"/api/runs/{run_id}/samples?step=3&filter=wrong")
    assert [s["ground_truth"] for s in right["samples"]] == ["3", "5"]
    assert [s["ground_truth"] for s in wrong["samples"]] == ["4", "6"]
    assert all(s["answer_reward"] == 0 for s in wrong["samples"])
    latest = get(client, f"/api/runs/{run_id}/samples")
    assert latest["step"] == 4 and len(latest["samples"]) == 4
    log = get(client, f"/api/runs/{run_id}/log")
    assert "".join(c["text"] for c in log["chunks"]) == "step 1 reward 0.2\nstep 2 reward 0.3\n"
    assert get(client, f"/api/runs/{run_id}/log?after_id={log['last_id']}")["chunks"] == []


def test_metric_table_names_descriptions_and_units(client):
    body = get(client, "/api/meta")
    assert body["metrics"][metrics.TOKEN_ENTROPY]["unit"] == "nats"
    assert set(body["metrics"]) == set(metrics.TABLE)
    assert all(metrics.NAME_RE.fullmatch(name) for name in metrics.TABLE)


def test_missing_runs_and_studies_are_404(client):
    assert "no run with id 999999" in get(client, "/api/runs/999999", 404)["error"]
    assert get(client, "/api/runs/99999999999999999999999", 404)["error"]
    assert "no sweep or group named 'nope'" in get(client, "/api/studies/nope", 404)["error"]


# --------------------------------------------------------------------------- downsampling


def test_downsampling_keeps_a_one_step_spike_and_each_buckets_min_and_max():
    rng = random.Random(0)
    points = [(step, rng.gauss(1.0, 0.1)) for step in range(10_000)]
    points[7_321] = (7_321, 500.0)
    edges = bucket_edges([points], 200)
    assert len(edges) == 201 and edges[0] == 0 and edges[-1] >= 10_000
    kept = downsample(points, edges)
    assert (7_321, 500.0) in kept
    assert len(kept) <= 4 * 200
    for lo, hi in zip(edges, edges[1:], strict=False):
        raw = [v for s, v in points if lo <= s < hi]
        got = [v for s, v in kept if lo <= s < hi]
        assert (min(got), max(got)) == (min(raw), max(raw))
        assert got[0] == raw[0] and got[-1] == raw[-1]


def test_the_api_downsamples_every_run_on_the_same_buckets(db_url):
    """A group of two runs of 10,000 and 5,000 steps, one spike: it survives at 200
    buckets, and both runs are cut on the same boundaries, each bucket's min and max kept."""

    def raw(run_index: int, step: int) -> float:
        return 900.0 if (run_index, step) == (0, 4_242) else 1.0 + (step % 7) / 10 + run_index

    with Registry(db_url) as registry:
        runs = [
            ui_registry.make_run(registry, f"long-{i}", 1e-5 * (i + 1), i, 10_000, group="long", variant=f"v{i}")
            for i in range(2)
        ]
        first = {0: 0, 1: 5_000}
        rows = [
            {"run_id": run.id, "step": step, "opt_step": None, "name": metrics.GRAD_NORM, "value": raw(i, step)}
            for i, run in enumerate(runs)
            for step in range(first[i], 10_000)
        ]
        with registry._writer.begin() as conn:
            conn.execute(insert(Metric), rows)
    app = create_app(db_url)
    with TestClient(app, base_url=BASE) as test_client:
        body = get(test_client, f"/api/studies/long/curves?metric={metrics.GRAD_NORM}&points=200&smoothing=0")
    app.state.registry.close()
    edges = body["edges"]
    assert body["downsampled"] and len(edges) == 201 and edges[0] == 0 and edges[-1] >= 10_000
    for i, variant in enumerate(body["variants"]):
        steps, values = variant["raw"]
        assert len(steps) <= 4 * 200
        if i == 0:
            assert values[steps.index(4_242)] == 900.0
        for lo, hi in zip(edges, edges[1:], strict=False):
            want = [raw(i, s) for s in range(max(lo, first[i]), min(hi, 10_000))]
            got = [v for s, v in zip(steps, values, strict=True) if lo <= s < hi]
            if want:
                assert (min(got), max(got)) == (min(want), max(want)), (i, lo)
            else:
                assert got == []


def test_ema_ignores_nan_and_debiases_the_start():
    assert ema([(0, 2.0), (1, 2.0)], 0.9) == [(0, pytest.approx(2.0)), (1, pytest.approx(2.0))]
    out = ema([(0, 1.0), (1, math.nan), (2, 3.0)], 0.5)
    assert math.isnan(out[1][1]) and out[0][1] == 1.0 and out[2][1] == pytest.approx(7 / 3)


# --------------------------------------------------------------------------- live polls


def _runs_by_variant(study: dict) -> dict[str, list[str]]:
    return {v["label"]: [r["name"] for r in v["runs"]] for v in study["variants"]}


def test_a_new_sweep_member_shows_on_the_next_poll(db_url):
    """A sweep records its members first and each run appears when its trainer starts; a
    member can also join a sweep that runs. The poll after either lists the new run: in
    the study, its curves, compare's table and the runs table."""
    ui_registry.build(db_url)
    good_lr, _ = ui_registry.VARIANTS["good"]
    pending, _ = ui_registry.config_of(good_lr, 2, ui_registry.STEPS)
    with Registry(db_url) as registry:
        sweep = registry.get_sweep("abl")
        registry.add_sweep_member(sweep.id, config_hash(pending), "good", 2)
    app = create_app(db_url)
    with TestClient(app, base_url=BASE) as client:
        before = get(client, "/api/studies/abl")
        assert _runs_by_variant(before) == {
            "good": ["abl-good-s0", "abl-good-s1"],
            "wide": [f"abl-wide-s{seed}" for seed in range(6)],
            "hot": ["abl-hot-s0"],
        }
        get(client, "/api/studies/abl/compare")  # as the page does: its answer is cached now
        with Registry(db_url) as registry:
            started = ui_registry.make_run(
                registry, "abl-good-s2", good_lr, 2, ui_registry.STEPS, group="abl", variant="good"
            )
            ui_registry.log_curve(registry, started, range(2), 0.7)
            joined = ui_registry.make_run(
                registry, "abl-cool-s0", 2e-5, 0, ui_registry.STEPS, group="abl", variant="cool"
            )
            registry.add_sweep_member(sweep.id, joined.config_hash, "cool", 0)
        after = get(client, "/api/studies/abl")
        assert _runs_by_variant(after) == {
            **_runs_by_variant(before),
            "good": ["abl-good-s0", "abl-good-s1", "abl-good-s2"],
            "cool": ["abl-cool-s0"],
        }
        shown = {r["name"]: r for v in after["variants"] for r in v["runs"]}
        assert (shown["abl-good-s2"]["status"], shown["abl-good-s2"]["last_step"]) == ("running", 1)
        assert (shown["abl-cool-s0"]["status"], shown["abl-cool-s0"]["last_step"]) == ("running", 0)
        curves = {v["label"]: v for v in get(client, f"/api/studies/abl/curves?metric={metrics.REWARD}")["variants"]}
        assert started.id in [seed["run_id"] for seed in curves["good"]["seeds"]] and "cool" in curves
        compared = get(client, "/api/studies/abl/compare")
        assert {row["variant"] for row in compared["compare"]["rows"]} == {"good", "wide", "hot", "cool"}
        assert str(started.id) in compared["flags"] and str(joined.id) in compared["flags"]
        listed = {r["name"]: r["status"] for r in get(client, "/api/runs")["runs"]}
        assert listed["abl-good-s2"] == listed["abl-cool-s0"] == "running"
    app.state.registry.close()


def test_two_dashboards_in_one_process_answer_from_their_own_registries(tmp_path):
    """The study's metric names and compare's answer are cached for the life of the
    process. Two registries whose runs have the same ids (built alike, then one changed)
    must each get their own figures: the cache must not cross from one to the other."""
    first, second = str(tmp_path / "first.db"), str(tmp_path / "second.db")
    ids = ui_registry.build(first)
    ui_registry.build(second)
    good = [ids["abl-good-s0"], ids["abl-good-s1"]]
    with Registry(second) as registry, registry._writer.begin() as conn:
        conn.execute(update(EvalResult).where(EvalResult.run_id.in_(good)).values(accuracy=0.99))
        conn.execute(
            insert(Metric), [{"run_id": i, "step": 0, "opt_step": None, "name": metrics.KL, "value": 0.1} for i in good]
        )
    for url, recorded_kl in ((first, False), (second, True)):
        app = create_app(url)
        with TestClient(app, base_url=BASE) as client:
            study = get(client, "/api/studies/abl")
            compared = get(client, "/api/studies/abl/compare")
        app.state.registry.close()
        with Registry(url, readonly=True) as registry:
            table = build_compare_table(registry, ["abl"])
        rows = {r["variant"]: r for r in compared["compare"]["rows"]}
        assert rows["good"]["final_acc"] == pytest.approx(table.rows[0].values["final_acc"].mean), url
        assert (metrics.KL in study["metrics"]) == recorded_kl, url
    assert rows["good"]["final_acc"] == pytest.approx(0.99)  # the second registry's own figure


# What the page asks for in each view, first when it draws it and then at each poll
# while a run is live (static/app.js: runsView, studyView, runView).
def _page_requests(run_id: int) -> dict[str, list[str]]:
    curve = f"metric={metrics.REWARD}&smoothing=0.6&points=200"
    headline = f"metric={metrics.EVAL_ACCURACY}&smoothing=0&points=200"
    return {
        "runs": ["/api/meta", "/api/runs"],
        "runs poll": ["/api/runs"],
        "study": ["/api/studies/big", f"/api/studies/big/curves?{headline}", "/api/studies/big/compare"],
        "study poll": ["/api/studies/big", f"/api/studies/big/curves?{curve}&after_step=3"],
        "run": [
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/curves?{curve}",
            f"/api/runs/{run_id}/samples?step=4&filter=all",
            f"/api/runs/{run_id}/log?after_id=0",
        ],
        "run poll": [
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/curves?{curve}&after_step=3",
            f"/api/runs/{run_id}/log?after_id=1",
        ],
    }


# The most queries one request of the page may cost, and one poll of any view, whatever
# the number of runs. Measured on SQLite (PostgreSQL: 2 fewer a request, as the schema
# revision is checked again only on SQLite): a study's compare with its cache cold 16,
# a run's view 12; a poll of the study view 18, of a run's view 20.
MAX_QUERIES_PER_REQUEST = 20
MAX_QUERIES_PER_POLL = 24
QUERY_RE = re.compile(r"\s*(SELECT|WITH)\b", re.IGNORECASE)
WRITE_RE = re.compile(r"\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|REPLACE)\b", re.IGNORECASE)


def _record_statements(engine) -> list[str]:
    """Every statement the engine's connections send from now on, as its driver sends it.

    At the driver, not as SQLAlchemy's `before_cursor_execute` event: the biggest reads
    (registry/summaries.py's fetch_rows) go straight to the DBAPI cursor, past the event.
    """
    sent: list[str] = []

    def record(dbapi_connection, _record) -> None:
        if engine.dialect.name == "sqlite":
            dbapi_connection.set_trace_callback(sent.append)
            return
        factory = dbapi_connection.cursor_factory

        class Recording(factory):
            def execute(self, query, params=None, **options):
                sent.append(str(query))
                return super().execute(query, params, **options)

        dbapi_connection.cursor_factory = Recording

    event.listen(engine, "connect", record)
    return sent


def _grow_sweep(url: str, members: range) -> None:
    """The runs `members` of the sweep `big`: variants of 5 seeds, 5 steps logged each,
    the even seeds finished and the odd ones still running (so the views poll)."""
    with Registry(url) as registry:
        sweep = registry.get_or_create_sweep("big", "sweep", {})
        for i in members:
            variant, seed = divmod(i, 5)
            run = ui_registry.make_run(
                registry, f"big-v{variant}-s{seed}", 1e-5 * (variant + 1), seed, 12, group="big", variant=f"v{variant}"
            )
            registry.add_sweep_member(sweep.id, run.config_hash, f"v{variant}", seed)
            ui_registry.log_curve(registry, run, range(5), 0.6)
            registry.append_log(run.name, "step 4\n")
            if seed % 2 == 0:
                registry.set_status(run.id, "finished")


def test_a_poll_costs_the_same_queries_for_10_runs_as_for_100(db_url, monkeypatch):
    """Each request the page makes, and so each poll, costs as many queries when its
    sweep has 100 runs as when it had 10 (no query per run), within a stated bound; the
    first time (compare's cache cold) and again (warm). Nothing is written."""
    # create_run asks git for the commit: a subprocess per run was most of this test's time
    monkeypatch.setattr(store, "_git_commit", lambda: None)
    _grow_sweep(db_url, range(10))
    app = create_app(db_url)
    engine = app.state.registry.engine
    sent = _record_statements(engine)
    with Registry(db_url, readonly=True) as registry:
        run_id = registry.get_run("big-v0-s1").id  # running: the run view polls
    requests = _page_requests(run_id)

    def queries_per_request(client) -> dict[tuple[int, str], int]:
        engine.dispose()  # each measure starts on new connections (set up alike)
        out = {}
        for attempt in (0, 1):
            for path in dict.fromkeys(p for paths in requests.values() for p in paths):
                sent.clear()
                get(client, path)
                assert not [s for s in sent if WRITE_RE.match(s)], path
                out[attempt, path] = sum(1 for s in sent if QUERY_RE.match(s))
        return out

    with TestClient(app, base_url=BASE) as client:
        ten = queries_per_request(client)
        _grow_sweep(db_url, range(10, 100))
        assert len(get(client, "/api/runs")["runs"]) == 100
        hundred = queries_per_request(client)
    app.state.registry.close()
    # the recorder hears every read (/api/meta reads nothing but, on SQLite, the schema revision)
    assert all(n for (_, path), n in hundred.items() if path != "/api/meta"), hundred
    assert hundred == ten, {key: (ten[key], n) for key, n in hundred.items() if ten[key] != n}
    assert max(hundred.values()) <= MAX_QUERIES_PER_REQUEST, hundred
    for view, paths in requests.items():
        # (a study's poll asks compare again only when a run's status changed: its own
        # cost is bounded with every request's above)
        if view.endswith("poll"):
            assert sum(hundred[1, path] for path in paths) <= MAX_QUERIES_PER_POLL, (view, hundred)
