"""The one table layout of compare, runs and sweep (grpoctl/views/fit_table.py): on a
terminal it fits the width by priority, never cutting a figure or losing the key column;
off a terminal every column stays on one line."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console

from grpoctl.views.fit_table import Column, FitTable, _wrap


def render(table: FitTable, width: int, terminal: bool = True, color: bool = False) -> list[str]:
    out = io.StringIO()
    console = Console(
        file=out, width=width, force_terminal=terminal, color_system="standard" if color else None, highlight=False
    )
    console.print(table, crop=False)
    return out.getvalue().splitlines()


def listing() -> FitTable:
    table = FitTable(
        [
            Column("id", right=True, key=True),
            Column("name", wrap="name", key=True),
            Column("group", wrap="name", secondary=True),
            Column("acc", right=True),
        ],
        title="2 runs",
    )
    table.add_row("7", "lr-sweep-lr=0.001-s0", "lr-sweep", "0.5")
    table.add_row("12", "short", "", ("0.25", "red"))
    return table


def test_a_wide_terminal_shows_every_cell_whole_and_aligned():
    lines = render(listing(), 80)
    assert lines[0] == "2 runs"
    assert lines[1].split() == ["id", "name", "group", "acc"]
    assert set(lines[2]) == {"─"} and len(lines[2]) == len(" 7  lr-sweep-lr=0.001-s0  lr-sweep   0.5")
    assert lines[3] == " 7  lr-sweep-lr=0.001-s0  lr-sweep   0.5"
    assert lines[4] == "12  " + "short".ljust(20) + "  " + " " * 8 + "  0.25"  # figures right, names left


def test_secondary_columns_move_to_a_continued_part_under_the_keys():
    lines = render(listing(), 34)  # the keys and acc fit whole; group does not beside them
    assert all(len(line) <= 34 for line in lines)
    assert lines[3] == " 7  lr-sweep-lr=0.001-s0   0.5" and "group" not in lines[1]
    assert "2 runs, continued" in lines
    continued = lines[lines.index("2 runs, continued") :]
    assert continued[1].split() == ["id", "name", "group"] and " 7  lr-sweep-lr=0.001-s0  lr-sweep" in continued


def test_left_out_columns_are_named_instead_when_asked():
    table = listing()
    table.left_out = "--wide shows them"
    lines = render(table, 34)
    assert " ".join(lines[-2:]).split() == "left out at this width: group (--wide shows them)".split()
    assert not any("continued" in line for line in lines)


def test_a_name_wraps_at_its_own_separators_and_figures_stay_whole():
    lines = render(listing(), 20)  # 2 + 2 + 2 + 4 for id, gaps and acc: 10 for names (group moves on)
    assert all(len(line) <= 20 for line in lines)
    assert lines[3:8] == [" 7  lr-sweep-    0.5", "    lr=0.001-", "    s0", "", "12  short       0.25"]


def test_off_a_terminal_every_column_stays_on_one_line():
    lines = render(listing(), 20, terminal=False)
    assert lines[3] == " 7  lr-sweep-lr=0.001-s0  lr-sweep   0.5"
    assert not any("continued" in line for line in lines)


def test_too_narrow_for_the_keys_beside_a_figure_gives_one_record_per_row():
    table = FitTable([Column("variant", key=True), Column("Δ (95% CI)", right=True), Column("p", right=True)])
    table.add_row("std_off", "+0.000 [-0.004, +0.004]", "0.890")
    lines = render(table, 24)
    assert lines == ["std_off", "  Δ (95% CI): +0.000", "              [-0.004,", "              +0.004]", "  p: 0.890"]


def test_headers_wrap_between_words_before_anything_else_gives_way():
    table = FitTable([Column("variant", key=True), Column("seeds needed", right=True)])
    table.add_row("a", "12")
    lines = render(table, 16)
    assert lines == ["variant    seeds", "          needed", "─" * 16, "a             12"]


def test_prose_wraps_between_words_and_rows_of_several_lines_are_spaced():
    table = FitTable([Column("finding", key=True), Column("verdict", wrap="words")])
    table.add_row("f1", "inconclusive: not resolved at these seeds")
    table.add_row("f2", "better")
    lines = render(table, 24)
    assert lines[2:] == [
        "f1       inconclusive:",
        "         not resolved at",
        "         these seeds",
        "",
        "f2       better",
    ]


def test_a_cell_and_a_row_style_reach_the_terminal():
    table = listing()
    table.rows[0][0] = ("7", "green")
    table.row_styles[0] = "bold"
    colored = "\n".join(render(table, 80, color=True))
    assert "\x1b[31m0.25\x1b[0m" in colored
    assert "\x1b[1;32m" in colored  # bold row, green cell


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="2 cells in a table of 4 columns"):
        listing().add_row("1", "x")


@pytest.mark.parametrize(
    "text, width, wrap, lines",
    [
        ("12-03 19:42", 5, "words", ["12-03", "19:42"]),
        ("12-03 19:42", 11, "words", ["12-03 19:42"]),
        ("ab cdefgh", 4, "words", ["ab", "cdef", "gh"]),
        ("lab-sft-init-sft_800-s1", 13, "name", ["lab-sft-init-", "sft_800-s1"]),
        ("/a/bb/ccc", 5, "name", ["/a/", "bb/", "ccc"]),
        ("0.123456", 3, "never", ["0.123456"]),
    ],
)
def test_wrap_breaks_between_pieces(text, width, wrap, lines):
    assert _wrap(text, width, wrap) == lines


def test_at_any_width_no_line_is_wider_and_no_figure_is_cut():
    rng = random.Random(0)
    columns = [Column("variant", wrap="name", key=True)]
    columns += [Column(f"figure {i}", right=True, secondary=i > 1) for i in range(6)]
    columns += [Column("note", wrap="words", secondary=True)]
    table = FitTable(columns, title="t")
    figures = []
    for r in range(5):
        cells = [f"{rng.random():+.3f} [{rng.random():+.3f}, {rng.random():+.3f}]" for _ in range(6)]
        figures += cells
        table.add_row(f"variant-{r}-with_a-long_name", *cells, "a note in a few words " * r)
    for width in range(40, 220, 7):
        lines = render(table, width)
        assert all(len(line) <= width for line in lines), width
        text = "\n".join(lines)
        assert all(f in text for f in figures), width
        assert all(line.startswith("variant") for line in lines if line.split()[:1] == ["variant"]), width
