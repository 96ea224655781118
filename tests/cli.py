"""`grpoctl ARGS` run inside the test process, as `llm` and `sqlite-utils` test their CLIs.

A subprocess costs most of a second in imports; in-process, a command costs what it does.
`invoke` returns what `subprocess.run(..., capture_output=True, text=True)` would (exit
code, stdout, stderr), through the same `grpoctl.cli.main` the console script calls, so
a test reads the same either way. The environment, working directory, argv and stdin are
set for the call and put back after it.

Keep a subprocess where the process itself is what is tested: signals, imports at start
(`--help` imports no torch), a trainer killed mid-step, two processes racing.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    args: tuple[str, ...] = ()


def invoke(*args: str, cwd: Path | str | None = None, input: str | None = None, env: dict | None = None) -> Result:
    """Run `grpoctl *args` in this process; env entries set to None are removed for the call."""
    from grpoctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_argv, saved_stdin = sys.argv, sys.stdin
    # A subprocess's warnings reach stderr through logging's last-resort handler; here
    # pytest's own handlers would take them, so the grpoctl logger writes to our stderr.
    logger = logging.getLogger("grpoctl")
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    saved_propagate = logger.propagate
    try:
        os.environ.setdefault("COLUMNS", "200")
        for key, value in (env or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = str(value)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["grpoctl", *args]
        sys.stdin = io.StringIO(input or "")
        logger.addHandler(handler)
        logger.propagate = False
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # a bug: a subprocess would print the traceback and exit 1
                traceback.print_exc(file=err)
                code = 1
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved_propagate
        sys.argv, sys.stdin = saved_argv, saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Result(code, out.getvalue(), err.getvalue(), args)
