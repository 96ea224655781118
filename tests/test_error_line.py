"""errors.error_line: the line of an error a sweep shows for a failed member, never the link
or statement a library appends (issue 25: a member failed on a database outage was shown as
"error: (Background on this error at: https://sqlalche.me/e/21/e3q8)")."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from grpoctl.errors import error_line


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
