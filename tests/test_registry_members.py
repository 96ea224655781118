"""The registry's side of supervising sweep members (registry/members.py), on SQLite and
PostgreSQL: ending a run whose trainer died only while its claim is still that trainer's,
handing a claim from a supervisor to the trainer it starts, stop requests, stored logs,
and text a model generated with NUL in it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from grpoctl.errors import UserError
from grpoctl.registry import Registry


def new_run(registry: Registry, name: str = "r"):
    return registry.create_run(name=name, config={}, config_diff={}, config_hash="h", seed=0, total_steps=3)


def test_a_dead_trainer_is_ended_only_while_the_claim_is_its_own(db_url):
    registry = Registry(db_url)
    run = new_run(registry)  # claimed by this process, as a trainer claims its run
    assert not registry.end_abandoned(run.id, [os.getpid() + 1], "interrupted", "gone")  # not that pid's
    assert registry.get_run(run.id).status == "running"
    assert registry.end_abandoned(run.id, [os.getpid()], "interrupted", "trainer exited with code -9")
    ended = registry.get_run(run.id)
    assert (ended.status, ended.error, ended.claim_token) == ("interrupted", "trainer exited with code -9", None)
    assert registry.claimable(ended)

    other = Registry(db_url)  # someone takes the run over: the old holder's pid no longer matters
    other.claim_run(run.id)
    taken = registry.get_run(run.id)
    assert not registry.end_abandoned(run.id, [taken.claim_pid + 1], "failed", "x")
    assert registry.get_run(run.id).claim_token == taken.claim_token


@pytest.mark.slow
def test_a_supervisor_s_claim_is_handed_to_its_child_only(db_url, tmp_path):
    registry = Registry(db_url)
    run = new_run(registry)
    registry.set_status(run.id, "interrupted")
    registry.claim_run(run.id)  # the supervisor takes the run before starting its trainer
    claim = (
        "from grpoctl.registry import Registry; import sys; r = Registry(sys.argv[1]); "
        "r.claim_run(int(sys.argv[2])); print(r.get_run(int(sys.argv[2])).claim_pid)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # A grandchild (its parent is the shell) is not the supervisor's trainer: refused.
    grandchild = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "$0" "$1" "$2" & wait $!', claim, db_url, str(run.id)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert grandchild.returncode != 0 and "is being written by pid" in grandchild.stderr
    child = subprocess.run(
        [sys.executable, "-c", claim, db_url, str(run.id)], capture_output=True, text=True, timeout=120, env=env
    )
    assert child.returncode == 0, child.stderr
    assert int(child.stdout) != os.getpid()  # the child holds it now


def test_stop_requests_are_cleared_by_the_next_claim(db_url):
    registry = Registry(db_url)
    run = new_run(registry)
    assert not registry.stop_requested(run.id)
    registry.request_stop(run.id)
    assert registry.stop_requested(run.id)
    registry.set_status(run.id, "interrupted")
    registry.claim_run(run.id)  # a resume
    assert not registry.stop_requested(run.id)


def test_logs_keep_their_order_and_hosts_and_go_with_their_run(db_url):
    registry = Registry(db_url)
    registry.append_log("early", "# refused by its checks\n", host="node-a")
    run = new_run(registry, "r1")
    for i in range(3):
        registry.append_log("r1", f"step {i}\n", host="node-b")
    registry.append_log("r1", "")  # nothing to store
    chunks = registry.log_chunks("r1")
    assert [t for _, _, t in chunks] == ["step 0\n", "step 1\n", "step 2\n"] and {h for _, h, _ in chunks} == {"node-b"}
    assert [t for _, _, t in registry.log_chunks("r1", after_id=chunks[0][0])] == ["step 1\n", "step 2\n"]
    assert registry.log_chunks("early")[0][1:] == ("node-a", "# refused by its checks\n")
    registry.delete_run(run.id)
    assert registry.log_chunks("r1") == [] and len(registry.log_chunks("early")) == 1


def test_text_with_nul_is_stored_on_every_backend(db_url):
    """A random model generated a NUL byte, which PostgreSQL text refused (the run failed)."""
    registry = Registry(db_url)
    run = new_run(registry)
    registry.log_step(
        run.id,
        1,
        {"train/reward": 0.5},
        samples=[
            dict(prompt="1+1", response="2\x00junk", ground_truth="2", reward=1.0, format_reward=1.0, answer_reward=1.0)
        ],
    )
    registry.append_log("r", "printed \x00 this\n")
    assert registry.samples(run.id)[0].response == "2\ufffdjunk"
    assert registry.log_chunks("r")[0][2] == "printed \ufffd this\n"


def test_names_taken_and_runs_by_name(db_url):
    registry = Registry(db_url)
    for name in ("a-lr=1e-3", "a-lr=1e-3-r2", "a_lr=1e-3", "b"):
        new_run(registry, name)
    assert registry.names_taken(["a-lr=1e-3"]) == {"a-lr=1e-3", "a-lr=1e-3-r2"}
    assert registry.names_taken(["a%"]) == set()  # a prefix, not a pattern
    assert set(registry.runs_named(["b", "missing"])) == {"b"} and registry.runs_named([]) == {}
    with pytest.raises(UserError):
        registry.get_run("missing")
