"""What a Ray sweep checks before it submits anything, and what it hands its tasks, on a
real one-node Ray cluster (127.0.0.1, no GPUs) with the fake trainer of
tests/test_sweep_launcher.py (a few registry rows in a fraction of a second).

What is checked: a cluster spread over several machines refuses, in one line and before
the registry is created, a SQLite registry and a PostgreSQL server on localhost; a node
whose grpoctl or Ray differs from the driver's is refused in one line (the real probe
task reports the node's versions); on a cluster without GPUs a member reserves none; the
registry's password travels as an object in Ray's object store, never in a task's
arguments (which Ray stores) or runtime_env (which Ray logs) or a trainer's argv; the
local executor never imports Ray.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from conftest import drop_pg_database, fresh_pg_database
from ray_cluster import REPO, local_cluster, need_ray
from sqlalchemy.engine import make_url
from test_sweep_launcher import FAKE_TRAINER

ray = need_ray()

from grpoctl.cli import main  # noqa: E402
from grpoctl.errors import UserError  # noqa: E402
from grpoctl.registry import Registry  # noqa: E402
from grpoctl.registry.engine import resolve_url  # noqa: E402
from grpoctl.sweep import on_ray  # noqa: E402

TIMEOUT_S = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A CPU-only cluster whose members train with the fake trainer; yields its calls file."""
    workdir = tmp_path_factory.mktemp("ray-setup")
    script = workdir / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    calls = workdir / "calls.txt"
    calls.touch()
    env = {"GRPOCTL_TRAIN_CMD": f"{sys.executable} {script}", "FAKE_CALLS": str(calls), "PYTHONPATH": str(REPO)}
    with local_cluster(env, num_cpus=2, num_gpus=0):
        yield calls


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`grpoctl ARGS` in this process (so that it joins the test's cluster); (exit code, out, err)."""
    monkeypatch.setattr(sys, "argv", ["grpoctl", *args])
    monkeypatch.setenv("COLUMNS", "200")
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_several_machines_refuse_a_registry_only_one_of_them_reaches():
    two = {"10.0.0.1", "10.0.0.2"}
    for db in (
        "registry.db",
        "sqlite:////shared/registry.db",
        "postgresql+psycopg://me@localhost/grpo",
        "postgresql+psycopg://me@127.0.0.1:5432/grpo",
        "postgresql+psycopg://me@/grpo?host=/run/postgresql",
    ):
        problem = on_ray.registry_problem(resolve_url(db), two)
        assert problem is not None and "\n" not in problem and "2 machines" in problem, db
    assert "SQLite" in on_ray.registry_problem(resolve_url("registry.db"), two)
    assert "127.0.0.1" in on_ray.registry_problem(resolve_url("postgresql+psycopg://me@127.0.0.1/grpo"), two)
    # A server every machine reaches; or a cluster that is one machine.
    assert on_ray.registry_problem(resolve_url("postgresql+psycopg://me@db.example.org/grpo"), two) is None
    assert on_ray.registry_problem(resolve_url("registry.db"), {"10.0.0.1"}) is None


def test_the_sweep_refuses_a_sqlite_registry_on_several_machines_in_one_line(cluster, monkeypatch, capsys, tmp_path):
    real_nodes = ray.nodes
    # The one real node, and the same node seen as a second machine (this test runs on one).
    monkeypatch.setattr(
        on_ray.ray, "nodes", lambda: real_nodes() + [{**real_nodes()[0], "NodeManagerAddress": "10.0.0.2"}]
    )
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "sweep",
        "lr",
        "--values",
        "1e-3,2e-3",
        "--executor",
        "ray",
        "--db",
        str(tmp_path / "registry.db"),
    )
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: the Ray cluster spans 2 machines"), err
    assert "SQLite" in err and not (tmp_path / "registry.db").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("package", ["grpoctl", "ray"])
def test_a_node_with_other_versions_than_the_driver_is_refused(cluster, monkeypatch, tmp_path, package):
    import grpoctl

    module = grpoctl if package == "grpoctl" else ray
    real = module.__version__
    # The driver claims another version; the probe task reports the node's own.
    monkeypatch.setattr(module, "__version__", "0.0.1")
    with pytest.raises(UserError) as refused:
        on_ray.RayCluster(resolve_url(str(tmp_path / "registry.db")))
    message = str(refused.value)
    assert "\n" not in message and f"runs {package} {real}, the driver 0.0.1" in message, message
    assert not (tmp_path / "registry.db").exists()


def test_members_reserve_no_gpu_on_a_cpu_cluster_and_get_the_password_only_by_reference(
    cluster, pg_admin_url, monkeypatch, capsys, tmp_path
):
    db = fresh_pg_database(pg_admin_url)
    password = make_url(db).password
    assert password
    submitted = []
    real_task = on_ray._member_task

    class Recording:  # the real task, with what each submission carried noted down
        def options(self, **options):
            task = real_task.options(**options)

            class Submit:
                def remote(self, spec, secret):
                    submitted.append((pickle.dumps(spec), options, secret))
                    return task.remote(spec, secret)

            return Submit()

    monkeypatch.setattr(on_ray, "_member_task", Recording())
    monkeypatch.chdir(tmp_path)
    try:
        code, out, err = run_cli(
            monkeypatch,
            capsys,
            "sweep",
            "lr",
            "--values",
            "1e-3,2e-3",
            "loop.n_grpo_steps=2",
            "--executor",
            "ray",
            "--db",
            db,
        )
        assert code == 0, out + err
        with Registry(db) as registry:
            assert [(r.status, r.last_step) for r in registry.runs_in_group("lr-sweep")] == [("finished", 2)] * 2
        assert len(submitted) == 2
        for spec, options, secret in submitted:
            assert password.encode() not in spec  # Ray stores task arguments (and shows them)
            assert options["num_gpus"] == 0 and options["num_cpus"] >= 1
            assert "runtime_env" not in options  # Ray's runtime-env agent logs every runtime_env
            assert isinstance(secret, ray.ObjectRef) and ray.get(secret) == {"PGPASSWORD": password}
        trainer_argv = cluster.read_text()
        assert trainer_argv.count("--db") == 2 and password not in trainer_argv
        assert password not in out + err
    finally:
        drop_pg_database(pg_admin_url, db)


def test_the_local_executor_never_imports_ray(tmp_path):
    """A whole local sweep (the fake trainer), then: is Ray in the sweep's sys.modules?"""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    (tmp_path / "calls.txt").touch()
    env = dict(
        os.environ,
        GRPOCTL_TRAIN_CMD=f"{sys.executable} {script}",
        FAKE_CALLS=str(tmp_path / "calls.txt"),
        PYTHONPATH=str(REPO),
    )
    env.pop("GRPOCTL_DB", None)
    probe = (
        "import sys, atexit\n"
        "atexit.register(lambda: print('RAY IMPORTED', any(m == 'ray' or m.startswith('ray.') "
        "for m in sys.modules), file=sys.stderr))\n"
        "sys.argv = ['grpoctl', 'sweep', 'lr', '--values', '1e-3,2e-3', 'loop.n_grpo_steps=2', '--parallel', '2']\n"
        "from grpoctl.cli import main\n"
        "main()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "calls.txt").read_text().count("--db") == 2  # both members really ran
    assert "RAY IMPORTED False" in out.stderr, out.stderr


def test_sweep_help_shows_the_executor_and_the_cluster_to_join(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grpoctl", "sweep", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"),
    )
    assert out.returncode == 0, out.stderr
    for shown in (
        "--executor",
        "local (processes on this machine) or ray",
        "--ray-address",
        "(default: $RAY_ADDRESS, else a new local one)",
        "--max-retries",
        "--cpus-per-run",
    ):
        assert shown in out.stdout, shown


# Joining a cluster with token auth (issue 25's token case): Ray raises before it connects
# when this machine has no token, so ray.init's own error stands in for a token cluster here;
# each case is one line naming what to do (reproduced by hand against a token head: 53 lines
# of traceback before).
AUTH_CASES = [
    (
        {"RAY_AUTH_MODE": "token"},
        ray.exceptions.AuthenticationError(
            "Token authentication is enabled but no authentication token was found. Ensure that the token..."
        ),
        "RAY_AUTH_MODE=token, but this machine has no auth token: give it the cluster's",
    ),
    (
        {"RAY_AUTH_MODE": "token"},
        ray.exceptions.AuthenticationError("Something else about tokens. More words."),
        "Something else about tokens",
    ),
]


@pytest.mark.parametrize(("env", "raised", "said"), AUTH_CASES)
def test_a_token_problem_is_one_line(monkeypatch, env, raised, said):
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    def refuse(**_):
        raise raised

    monkeypatch.setattr(on_ray.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(on_ray.ray, "init", refuse)
    with pytest.raises(UserError) as refused:
        on_ray.connect("127.0.0.1:6379")
    message = str(refused.value)
    assert message.startswith("cannot connect to the Ray cluster at 127.0.0.1:6379: ") and said in message
    assert "\n" not in message and "Traceback" not in message
