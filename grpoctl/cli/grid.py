"""A listing of many rows, laid out once: what `runs list` prints.

rich's Table measures every cell through its whole renderable protocol, which for a
registry of a few hundred runs costs more than the command's queries (about 70 ms for
100 runs of 9 columns, most of `runs list` beyond its imports). A listing needs less:
cells that are plain strings, a style per cell, right or left alignment, and, when the
terminal is too narrow, some columns that fold their text onto more lines while the
figures keep their width. Grid is that, as a rich renderable, so it still goes through
the command's Console (its width, colour system and NO_COLOR).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.style import Style

GAP = 2  # spaces between columns


@dataclass
class Column:
    header: str
    right: bool = False  # figures align right
    fold: bool = False  # may wrap onto more lines in a narrow terminal
    min_width: int = 6  # a folding column is never narrower than this


@dataclass
class Grid:
    """`title`, then a header line and a rule under it, then one line (or, folded, more) per row.

    Each cell is a string or a (string, style) pair."""

    columns: list[Column]
    title: str = ""
    rows: list[list[str | tuple[str, str]]] = field(default_factory=list)

    def add_row(self, *cells: str | tuple[str, str]) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a grid of {len(self.columns)} columns")
        self.rows.append(list(cells))

    def widths(self, max_width: int) -> list[int]:
        """Each column's width: its widest cell, then folding columns narrowed (widest
        first, never under their min_width) until the line fits `max_width`."""
        widths = [cell_len(c.header) for c in self.columns]
        for row in self.rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell_len(_text(cell)))
        excess = sum(widths) + GAP * (len(widths) - 1) - max_width
        while excess > 0:
            folding = [i for i, c in enumerate(self.columns) if c.fold and widths[i] > c.min_width]
            if not folding:
                break  # figures are never cut: the terminal wraps what is left
            widest = max(folding, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        widths = self.widths(options.max_width)
        bold, newline = Style(bold=True), Segment.line()
        if self.title:
            yield Segment(self.title)
            yield newline
        yield from self._line([(c.header, "") for c in self.columns], widths, bold)
        yield Segment("─" * (sum(widths) + GAP * (len(widths) - 1)))
        yield newline
        for row in self.rows:
            yield from self._line([(c, "") if isinstance(c, str) else c for c in row], widths)

    def _line(self, cells: list[tuple[str, str]], widths: list[int], base: Style | None = None) -> Iterator[Segment]:
        """One row: as many lines as its most folded cell needs."""
        pieces = [_fold(text, width) for (text, _), width in zip(cells, widths, strict=True)]
        for line in range(max(len(p) for p in pieces)):
            for i, ((_, style), width, column) in enumerate(zip(cells, widths, self.columns, strict=True)):
                text = pieces[i][line] if line < len(pieces[i]) else ""
                pad = " " * (width - cell_len(text))
                if i:
                    yield Segment(" " * GAP)
                if column.right:
                    yield Segment(pad)
                yield Segment(text, (base or Style.null()) + (Style.parse(style) if style else Style.null()))
                if not column.right and i < len(cells) - 1:
                    yield Segment(pad)
            yield Segment.line()


def _text(cell: str | tuple[str, str]) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _fold(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken between words where it can be and
    inside a word only when the word alone is wider."""
    if cell_len(text) <= width or width < 1:
        return [text]
    lines, line = [], ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = ""
        for char in word:
            if cell_len(line + char) > width:
                lines.append(line)
                line = ""
            line += char
    return [*lines, line] if line else lines
