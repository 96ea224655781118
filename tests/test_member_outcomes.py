"""What a sweep reports of its members (issue 25): a failed member's error by its meaningful
line (errors.error_line), never the link or statement a library appends (a member failed on
a database outage was shown as "error: (Background on this error at: https://sqlalche.me/e/21/e3q8)"),
and an exit code that counts every member that did not end by its run's own rules."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.exc import OperationalError

from grpoctl.errors import error_line
from grpoctl.sweep.planning import Job, SweepResult
from grpoctl.sweep.spec import Variant


def test_sqlalchemy_s_link_and_statement_are_not_the_line():
    # What SQLAlchemy raises when the server goes away mid-commit, as str() renders it.
    exc = OperationalError(
        "UPDATE run SET claim_expires_at=%(x)s WHERE run.id = %(id)s",
        {"x": 1, "id": 2},
        Exception("consuming input failed: server closed the connection unexpectedly"),
    )
    assert str(exc).splitlines()[-1].startswith("(Background on this error at:")
    assert error_line(exc) == "(builtins.Exception) consuming input failed: server closed the connection unexpectedly"


def test_the_last_meaningful_line_of_a_trainer_s_output():
    text = "Traceback (most recent call last):\n  ...\nRuntimeError: the trainer exited with code 2\n\n"
    assert error_line(text) == "RuntimeError: the trainer exited with code 2"


def test_an_error_without_words_is_named_by_its_type():
    assert error_line(KeyError()) == "KeyError" and error_line("") == "(no message)"


def test_a_sweep_counts_every_member_that_did_not_end_by_its_own_rules():
    outcomes = [
        "finished",
        "diverged",
        "failed",
        "interrupted",
        "error: boom",
        "did not start: x",
        "lost (out of retries)",
    ]
    jobs = [
        Job(Variant(f"v{i}", i, [], f"h{i}", f"r{i}"), "new", f"r{i}", {}, Path(f"/tmp/r{i}.log"), outcome=o)
        for i, o in enumerate(outcomes)
    ]
    assert [j.outcome for j in SweepResult(jobs=jobs).not_ended()] == outcomes[2:]


def test_a_member_over_whose_row_says_running_is_shown_by_what_became_of_it(tmp_path):
    """A trainer cut off from the database leaves its row `running`: the summary shows the
    member's outcome, not a status nobody is writing any more."""
    from rich.console import Console

    from grpoctl.cli.sweep_view import summary_table
    from grpoctl.registry import Registry
    from grpoctl.sweep import spec

    plan = spec.param_sweep("lr", "3e-4,1e-3", overrides=["loop.n_grpo_steps=6"])
    registry = Registry(str(tmp_path / "registry.db"))
    jobs = []
    for variant, outcome in zip(plan.variants, ("error: server closed the connection", "finished"), strict=True):
        run = registry.create_run(
            name=variant.run_name, config={}, config_diff={}, config_hash=variant.config_hash, seed=0, total_steps=6
        )
        registry.set_status(run.id, "running" if outcome.startswith("error") else "finished")
        jobs.append(Job(variant, "new", variant.run_name, {}, tmp_path / "r.log", outcome=outcome))
    text = Console(width=200, record=True, file=open(os.devnull, "w"))
    text.print(summary_table(plan, SweepResult(jobs=jobs), registry))
    rows = {line.split()[2]: line for line in text.export_text().splitlines() if "lr-sweep-" in line}
    assert "error: server closed the connection" in rows[plan.variants[0].run_name]
    assert "running" not in rows[plan.variants[0].run_name] and "finished" in rows[plan.variants[1].run_name]


def test_a_member_resumed_on_another_node_is_announced_there(tmp_path):
    """`start RUN (resume) on HOST` names the machine that holds the run's claim (the one
    training it), not the one that created the run."""
    from rich.console import Console
    from sqlalchemy import update

    from grpoctl.cli.sweep_view import SweepView
    from grpoctl.registry import Registry, Run
    from grpoctl.sweep import spec

    plan = spec.param_sweep("lr", "3e-4", overrides=["loop.n_grpo_steps=6"])
    (variant,) = plan.variants
    registry = Registry(str(tmp_path / "registry.db"))
    run = registry.create_run(
        name=variant.run_name, config={}, config_diff={}, config_hash=variant.config_hash, seed=0, total_steps=6
    )
    with registry.engine.begin() as conn:  # as a retry on node w2 took the run over
        conn.execute(update(Run).where(Run.id == run.id).values(host="w1", claim_host="w2"))
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    view = SweepView(plan, registry, console)
    # A Ray member is announced from the registry (it started on a node, not here).
    view.finished(Job(variant, "resume", variant.run_name, {}, tmp_path / "r.log", outcome="finished"))
    said = console.export_text()
    assert f"start {variant.run_name} (resume) on w2;" in said and "w1" not in said
