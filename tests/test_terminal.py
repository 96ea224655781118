"""What a user sees at a terminal 80, 120 and 200 columns wide: `compare` on the committed
lab studies, `runs list`, `runs show` and the sweep's summary fit the width, name every
row, and cut no figure (grpoctl/views/fit_table.py).

The fast cases draw in-process on a console that says it is a terminal (rich's
TTY_COMPATIBLE); the end-to-end cases type the commands into real tmux panes with
send-keys and read what the panes show with capture-pane. Under CI=true a missing tmux
fails them rather than skipping.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli import invoke
from conftest import IN_CI, REPO

WIDTHS = (80, 120, 200)
STUDIES = ("lab-off-policy", "lab-std-normalization")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A figure as compare writes one: 0.966, +0.632, [-0.004, <0.001, 713.6, 0.0089, 100/100
FIGURE = re.compile(r"[<>+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def on_terminal(width: int) -> dict:
    """The environment of an in-process command whose console is a terminal `width` wide."""
    return {"TTY_COMPATIBLE": "1", "COLUMNS": str(width), "NO_COLOR": "1", "FORCE_COLOR": None}


def screen(text: str) -> list[str]:
    return [line.rstrip() for line in ANSI.sub("", text).splitlines()]


@functools.cache
def expected(study: str, db: Path) -> dict:
    """What the table must show, read from `compare --format json` and `--format markdown`:
    each variant, each p-value as the table writes it, and every figure in the tables."""
    from grpoctl.views.compare_view import pvalue

    payload = json.loads(invoke("compare", study, "--db", str(db), "--format", "json").stdout)
    markdown = invoke("compare", study, "--db", str(db), "--format", "markdown").stdout
    cells = [c.strip() for line in markdown.splitlines() if line.startswith("|") for c in line.strip("|").split("|")]
    return {
        "variants": [r["variant"] for r in payload["rows"]],
        "p": [pvalue(r[k]) for r in payload["rows"] for k in ("p_value", "p_holm") if r[k] is not None],
        "figures": [f for c in cells if FIGURE.fullmatch(c.split(" ")[0] or "-") for f in FIGURE.findall(c)],
    }


def check_compare(lines: list[str], width: int, want: dict) -> None:
    wider = [line for line in lines if len(line) > width]
    assert not wider, f"{len(wider)} line(s) wider than {width}: {wider[:2]}"
    words = {w for line in lines for w in line.split()}
    missing = [v for v in want["variants"] if v not in words]
    assert not missing, f"variants not shown whole at {width}: {missing}"
    assert all(p in words for p in want["p"]), f"a p-value cut at {width}"
    shown = [f for line in lines for f in FIGURE.findall(line)]
    cut = [f for f in want["figures"] if f not in shown]
    assert not cut, f"figures missing or cut at {width}: {cut[:5]}"
    assert not any(re.search(r"\w…", line) for line in lines), "an ellipsis: something was cut"


# --------------------------------------------------------------------------- fast: in-process


@pytest.fixture(scope="module")
def lab(committed_registry) -> Path:
    return committed_registry("lab.db")


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_fits_each_width_with_every_variant_and_p_value_whole(lab, width):
    want = expected("lab-std-normalization", lab)
    out = invoke("compare", "lab-std-normalization", "--db", str(lab), env=on_terminal(width))
    assert out.returncode == 0, out.stderr
    lines = screen(out.stdout)
    check_compare(lines, width, want)
    # Decide first: the comparison table leads, its verdict on the variant's own line.
    assert lines[0].startswith("lab-std-normalization: against std_on")
    row = next(line for line in lines if line.startswith("std_off "))
    assert "+0.000 [-0.002, +0.002]" in row and "0.765" in row and "within noise" in row  # the paired t


def test_off_a_terminal_compare_keeps_every_column_on_one_line(lab):
    out = invoke("compare", "lab-std-normalization", "--db", str(lab), env={"COLUMNS": "80"})
    lines = screen(out.stdout)
    assert not any("continued" in line for line in lines)
    header = next(line for line in lines if line.split()[:2] == ["variant", "use_std_normalization"])
    assert header.split()[-2:] == ["status", "health"] and len(header) > 80  # every column, past 80


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_list_keeps_id_and_name_on_one_line(lab, width):
    out = invoke("runs", "list", "--db", str(lab), "--group", "lab-baseline-ablation", env=on_terminal(width))
    assert out.returncode == 0, out.stderr
    lines = screen(out.stdout)
    assert all(len(line) <= width for line in lines)
    for run_id in range(16, 22):  # lab-baseline-ablation's runs, the longest names in lab.db
        row = next(line for line in lines if line.split()[:1] == [str(run_id)])
        assert row.split()[1].startswith("lab-baseline-ablation-") and row.split()[1].endswith(("-s0", "-s1", "-s2"))
    if width == 80:
        assert lines[-1].startswith("left out at this width: group") and "--wide" in lines[-1]
    wide = screen(invoke("runs", "list", "--db", str(lab), "--limit", "1", "--wide", env=on_terminal(80)).stdout)
    assert wide[1].split() == ["id", "name", "group", "status", "step", "eval", "acc", "reward", "created", "duration"]


def test_runs_show_wraps_a_path_and_keeps_every_figure(lab):
    out = invoke("runs", "show", "43", "--db", str(lab), env=on_terminal(80))
    assert out.returncode == 0, out.stderr
    lines = screen(out.stdout)
    assert all(len(line) <= 80 for line in lines)
    checkpoints = lines[lines.index("Checkpoints") :]
    assert any(line.split()[:1] == ["100"] and line.split()[-2:] == ["0.964", "yes"] for line in checkpoints)
    path = "".join(line[6:].split("  ")[0] for line in checkpoints[3:] if line.strip())
    assert "/lab-std-normalization-std_off-s0/step-100" in path  # wrapped at its slashes and dashes, not cut
    evals = lines[lines.index("Evals") : lines.index("Checkpoints")]
    assert any(
        line.split() == ["100", "640", "0.964", "1.000", "22", "lab", "math-verify", "0.9.0", "(grpoctl-3)"]
        for line in evals
    )


def test_the_sweep_summary_fits_with_long_names(tmp_path):
    import io

    from rich.console import Console

    from grpoctl.cli.sweep_view import summary_table
    from grpoctl.registry import Registry
    from grpoctl.sweep import spec
    from grpoctl.sweep.planning import SweepResult

    plan = spec.param_sweep(
        "loss.length_normalization", "mean,constant,microbatch", name="a-rather-long-length-normalization-study"
    )
    with Registry(str(tmp_path / "registry.db")) as registry:
        table = summary_table(plan, SweepResult(), registry)
    for width in (40, 80):
        out = io.StringIO()
        Console(file=out, width=width, force_terminal=True, color_system=None).print(table, crop=False)
        lines = out.getvalue().splitlines()
        assert all(len(line) <= width for line in lines)
        text = "".join(line.split("  ")[0] for line in lines)  # the variant column, its wrapped lines joined
        for variant in plan.variants:
            assert variant.label in text.replace(" ", "")


# --------------------------------------------------------------------------- end to end: tmux


def need_tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        reason = "tmux is not installed (apt-get install tmux)"
        if IN_CI:
            pytest.fail(f"the terminal tests cannot run under CI=true: {reason}")
        pytest.skip(reason)
    return tmux


class Pane:
    """A tmux pane `width` columns wide on a private server, running a plain bash whose
    `grpoctl` is this checkout's; `run` types a command and returns what the pane shows."""

    def __init__(self, tmux: str, width: int, cwd: Path) -> None:
        self.tmux, self.width, self.socket = tmux, width, str(cwd / "tmux.sock")  # a server of its own, gone with cwd
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}  # the pane's own size
        env.update(PYTHONPATH=str(REPO), PS1="$ ", TERM="xterm-256color")
        bin_dir = cwd / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "grpoctl").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m grpoctl "$@"\n')
        (bin_dir / "grpoctl").chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        self._tmux(
            "-f", "/dev/null", "start-server", ";", "set-option", "-g", "history-limit", "50000", ";",
            "new-session", "-d", "-x", str(width), "-y", "50", "-c", str(cwd), "bash --norc --noprofile",
            env=env,
        )  # fmt: skip
        self.count = 0

    def _tmux(self, *args: str, env: dict | None = None) -> str:
        out = subprocess.run(
            [self.tmux, "-S", self.socket, *args], capture_output=True, text=True, timeout=30, env=env, check=True
        )
        return out.stdout

    def run(self, command: str, timeout: float = 120) -> list[str]:
        self.count += 1
        begin, end = f"__begin_{self.count}__", f"__end_{self.count}__"
        self._tmux("send-keys", "-t", "0", "echo " + begin, "Enter")
        self._tmux("send-keys", "-t", "0", f"{command}; echo {end}", "Enter")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # -J joins lines the terminal wrapped: a line wider than the pane shows as one
            lines = self._tmux("capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", "0").splitlines()
            if end in lines and begin in lines:
                start = len(lines) - 1 - lines[::-1].index(begin)
                return [line.rstrip() for line in lines[start + 2 : lines.index(end, start)]]  # after the typed line
            time.sleep(0.3)
        raise AssertionError(f"no end of {command!r} within {timeout} s at {self.width} columns")

    def close(self) -> None:
        subprocess.run([self.tmux, "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_in_tmux_compare_and_runs_list_fit_the_pane(committed_registry, tmp_path, width):
    tmux = need_tmux()
    db = tmp_path / "lab.db"
    shutil.copy(committed_registry("lab.db"), db)  # a copy: what a user would read
    pane = Pane(tmux, width, tmp_path)
    try:
        for study in STUDIES:
            lines = pane.run(f"grpoctl compare {study} --db lab.db")
            assert lines and lines[0].startswith(f"{study}: against"), lines[:3]
            check_compare(lines, width, expected(study, committed_registry("lab.db")))
        listed = pane.run("grpoctl runs list --db lab.db")
        assert all(len(line) <= width for line in listed)
        rows = {line.split()[0]: line.split() for line in listed[1:] if line.split()[:1] and line.split()[0].isdigit()}
        names = dict(subprocess_names(db))
        if width >= 120:  # every run's id and its whole name on one line
            assert {int(k): v[1] for k, v in rows.items()} == names
        else:  # at 80 a name may wrap at its separators, beside its id
            assert set(map(int, rows)) == set(names)
    finally:
        pane.close()


def subprocess_names(db: Path) -> list[tuple[int, str]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, name FROM run").fetchall()
