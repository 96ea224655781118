"""The listing layout of `runs list` (grpoctl/cli/grid.py): alignment, folding, styles."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from grpoctl.cli.grid import Column, Grid, _fold


def render(grid: Grid, width: int, color: bool = False) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=color, color_system="standard" if color else None).print(grid)
    return out.getvalue().splitlines()


def grid() -> Grid:
    g = Grid(
        [Column("id", right=True), Column("name", fold=True, min_width=6), Column("acc", right=True)], title="2 runs"
    )
    g.add_row("7", "lr-sweep-lr=0.001-s0", "0.5")
    g.add_row("12", "short", ("0.25", "red"))
    return g


def test_a_wide_terminal_shows_every_cell_whole_and_aligned():
    lines = render(grid(), 80)
    assert lines[0] == "2 runs"
    assert lines[1].split() == ["id", "name", "acc"]
    assert set(lines[2]) == {"─"} and len(lines[2]) == len(" 7  lr-sweep-lr=0.001-s0   0.5")
    assert lines[3] == " 7  lr-sweep-lr=0.001-s0   0.5"
    assert lines[4] == "12  " + "short".ljust(20) + "  0.25"  # figures right-aligned, names left


def test_a_narrow_terminal_folds_names_and_keeps_figures_whole():
    lines = render(grid(), 20)  # 2 + 2 + 4 + 2 columns of id, gaps and figures: 10 for names
    assert all(len(line.rstrip()) <= 20 for line in lines)
    assert lines[3] == " 7  lr-sweep-l   0.5"
    assert lines[4].strip() == "r=0.001-s0"  # the name's end, on the next line
    assert lines[5] == "12  short       0.25"


def test_folding_stops_at_the_minimum_width():
    g = grid()
    assert g.widths(5) == [2, 6, 4]  # too narrow for anything: names at their minimum, figures whole


def test_a_cell_style_reaches_the_terminal():
    colored = "\n".join(render(grid(), 80, color=True))
    assert "\x1b[31m0.25\x1b[0m" in colored


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="2 cells in a grid of 3 columns"):
        grid().add_row("1", "x")


@pytest.mark.parametrize(
    "text, width, lines",
    [
        ("12-03 19:42", 5, ["12-03", "19:42"]),
        ("12-03 19:42", 11, ["12-03 19:42"]),
        ("abcdefgh", 3, ["abc", "def", "gh"]),
        ("ab cdefgh", 4, ["ab", "cdef", "gh"]),
    ],
)
def test_fold_breaks_between_words_first(text, width, lines):
    assert _fold(text, width) == lines
