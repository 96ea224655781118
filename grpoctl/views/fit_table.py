"""Tables that fit the terminal: the one layout of `compare`, `runs list`, `runs show` and
the sweep's tables.

Given more columns than the terminal has room for, rich's Table crops the lines, cuts
figures to `0…` and can squeeze a column to nothing. A FitTable gives way by priority
instead, and never cuts a figure or drops the column that names a row:

1. every column whole, on one line per row, when that fits;
2. headers over several lines, between their words;
3. prose columns (notes, verdicts) wrapped between words, to a readable width;
4. the secondary columns moved to a further table under the same key columns (or, with
   `left_out`, named in a line that says how to see them);
5. names wrapped at their own separators (`lab-sft-init-` / `sft_800-s1`) and prose to
   its longest word, only as far as the key and the deciding columns need;
6. when even those do not fit: one record per row, its name, then `header: value` lines.

Off a terminal (piped, redirected, `--wide`) every column stays on one line, whatever its
width: print a FitTable with `crop=False`, so a console of the default 80 columns does not
cut what a file or `grep` should get whole.

rich's Table also measures every cell through its whole renderable protocol, which for a
registry of a few hundred runs costs more than `runs list`'s queries; cells here are plain
strings, each with an optional style, so a listing of hundreds of rows stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

GAP = 2  # spaces between columns
PROSE = 28  # a prose column wraps to this width before anything harder gives way

Wrap = Literal["never", "name", "words"]
Cell = str | tuple[str, str]  # text, or (text, style)

# Where a name may break: after one of its own separators (a run name, a path, a finding id).
_NAME_BREAK = re.compile(r"(?<=[-_/=,: ])(?=.)")  # not after ".": 0.001 stays whole


@dataclass
class Column:
    header: str
    right: bool = False  # figures align right
    wrap: Wrap = "never"  # "name": at its separators; "words": between words; figures never
    key: bool = False  # names the row: repeated in every part, never left out
    secondary: bool = False  # may move to a further table when the terminal is narrow


@dataclass
class Part:
    columns: list[int]  # indices into the table's columns, in their order
    widths: list[int]


@dataclass
class FitTable:
    """`title`, a header (bold, under a rule) and a line (or, wrapped, more) per row,
    then `caption`, in as many parts as the terminal's width asks for.

    `fit`: None fits a terminal and keeps every column whole elsewhere; False keeps them
    whole (`--wide`); True fits the console's width wherever it is (tests).
    `left_out`: draw only the first part and say which columns were left out, and this
    (e.g. "--wide shows them"), instead of drawing further parts."""

    columns: list[Column]
    title: str = ""
    caption: str = ""
    fit: bool | None = None
    left_out: str | None = None
    rows: list[list[Cell]] = field(default_factory=list)
    row_styles: list[str] = field(default_factory=list)

    def add_row(self, *cells: Cell, style: str = "") -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append(list(cells))
        self.row_styles.append(style)

    # ------------------------------------------------------------------ layout

    def layout(self, width: int | None) -> list[Part] | None:
        """The parts to draw at `width` columns (None: no limit); None: records instead."""
        every = list(range(len(self.columns)))
        if width is None:
            return [Part(every, [self._natural(i) for i in every])]
        whole = self._fit(every, width, hardest=2)
        if whole is not None:
            return [Part(every, whole)]
        keys = [i for i in every if self.columns[i].key]
        first = [i for i in every if not self.columns[i].secondary or self.columns[i].key]
        rest = [i for i in every if self.columns[i].secondary and not self.columns[i].key]
        if self._fit(first, width, hardest=2) is None:
            if self._fit(first, width, hardest=3) is None:
                return None
            first_widths = self._fit(first, width, hardest=3)
            assert first_widths is not None
            parts = [Part(first, first_widths)]
        else:
            first = self._pack(first, rest, width)
            rest = [i for i in rest if i not in first]
            widths = self._fit(first, width, hardest=2)
            assert widths is not None
            parts = [Part(first, widths)]
        while rest:
            part = self._pack(keys, rest, width)
            if len(part) == len(keys):  # not even one more column beside the keys, unless they wrap hard
                widths = self._fit(sorted(keys + rest[:1]), width, hardest=3)
                if widths is None:
                    return None
                part = sorted(keys + rest[:1])
            else:
                widths = self._fit(part, width, hardest=2)
            assert widths is not None
            parts.append(Part(part, widths))
            rest = [i for i in rest if i not in part]
        return parts

    def _pack(self, chosen: list[int], candidates: list[int], width: int) -> list[int]:
        """`chosen` and, in order, each candidate that still fits beside them."""
        chosen = list(chosen)
        for i in candidates:
            if self._fit(sorted(chosen + [i]), width, hardest=2) is not None:
                chosen = sorted(chosen + [i])
        return chosen

    def _fit(self, columns: list[int], width: int, hardest: int) -> list[int] | None:
        """The columns' widths at the easiest level (0 natural ... `hardest`) whose total
        fits `width`, with what is left over handed back (keys first); None if none fits."""
        room = width - GAP * (len(columns) - 1)
        natural = [self._natural(i) for i in columns]
        for level in range(min(hardest, 2) + 1):
            widths = [self._width(i, level) for i in columns]
            if sum(widths) <= room:
                spare = room - sum(widths)
                order = sorted(range(len(columns)), key=lambda k: not self.columns[columns[k]].key)
                for k in order:
                    grow = min(spare, natural[k] - widths[k])
                    if grow > 0:
                        widths[k] += grow
                        spare -= grow
                return widths
        if hardest < 3:
            return None
        # Level 3: the widest wrapping column gives way a cell at a time, down to its
        # longest piece, so a name that fits whole stays whole.
        tight = [self._width(i, 3) for i in columns]
        excess = sum(widths) - room
        while excess > 0:
            shrinkable = [k for k in range(len(columns)) if widths[k] > tight[k]]
            if not shrinkable:
                return None
            widest = max(shrinkable, key=lambda k: widths[k])
            widths[widest] -= 1
            excess -= 1
        return widths

    def _natural(self, i: int) -> int:
        return max(cell_len(self.columns[i].header), self._widest(i, lambda line: [line]))

    def _width(self, i: int, level: int) -> int:
        """Column i's width at a level: 0 whole; 1 header over several lines; 2 prose at
        PROSE; 3 names at their separators and prose at its longest word."""
        column = self.columns[i]
        if level == 0:
            return self._natural(i)
        header = max(cell_len(w) for w in column.header.split(" ")) if column.header else 0
        whole = self._widest(i, lambda line: [line])
        if column.wrap == "never" or level == 1 or (column.wrap == "name" and level == 2):
            return max(header, whole)
        tight = max(header, self._widest(i, lambda line: _pieces(line, column.wrap)))
        return tight if level == 3 else max(tight, min(whole, PROSE))

    def _widest(self, i: int, split: Callable[[str], list[str]]) -> int:
        widest = 0
        for row in self.rows:
            for line in _text(row[i]).split("\n"):
                for piece in split(line):
                    widest = max(widest, cell_len(piece.rstrip()))
        return widest

    # ------------------------------------------------------------------ drawing

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType | Segment]:
        fit = console.is_terminal if self.fit is None else self.fit
        width = options.max_width if fit else None
        parts = self.layout(width)
        if self.title:
            yield Text(self.title)
        if parts is None:
            yield from self._records(options.max_width)
        else:
            drawn = parts[:1] if self.left_out is not None else parts
            for n, part in enumerate(drawn):
                if n:
                    yield Text(f"\n{self.title}, continued" if self.title else "\ncontinued")
                yield from self._part(part)
            left = [self.columns[i].header for part in parts[1:] for i in part.columns if not self.columns[i].key]
            if left and self.left_out is not None:
                yield Text(f"left out at this width: {', '.join(left)} ({self.left_out})", style="dim")
        if self.caption:
            yield Text(self.caption, style="dim")

    def _part(self, part: Part) -> Iterator[Segment]:
        columns = [self.columns[i] for i in part.columns]
        header = [_wrap(c.header, w, "words") for c, w in zip(columns, part.widths, strict=True)]
        yield from self._lines(header, columns, part.widths, [Style(bold=True)] * len(columns))
        yield Segment("─" * (sum(part.widths) + GAP * (len(part.widths) - 1)))
        yield Segment.line()
        cells = [
            [_wrap(_text(row[i]), w, c.wrap) for i, c, w in zip(part.columns, columns, part.widths, strict=True)]
            for row in self.rows
        ]
        spaced = any(len(lines) > 1 for row in cells for lines in row)  # rows of several lines: a gap between
        for r, (row, lines) in enumerate(zip(self.rows, cells, strict=True)):
            if spaced and r:
                yield Segment.line()
            base = Style.parse(self.row_styles[r]) if self.row_styles[r] else Style.null()
            styles = [
                base + (Style.parse(row[i][1]) if isinstance(row[i], tuple) else Style.null()) for i in part.columns
            ]
            yield from self._lines(lines, columns, part.widths, styles)

    def _lines(
        self, cells: list[list[str]], columns: list[Column], widths: list[int], styles: Sequence[Style]
    ) -> Iterator[Segment]:
        """One row: as many lines as its most wrapped cell needs."""
        for n in range(max(len(lines) for lines in cells)):
            line: list[Segment] = []
            for k, (lines, column, width, style) in enumerate(zip(cells, columns, widths, styles, strict=True)):
                text = lines[n] if n < len(lines) else ""
                pad = Segment(" " * max(width - cell_len(text), 0))
                if k:
                    line.append(Segment(" " * GAP))
                line += [pad, Segment(text, style)] if column.right else [Segment(text, style), pad]
            while line and not line[-1].text.strip():  # no trailing blanks
                line.pop()
            yield from line
            yield Segment.line()

    def _records(self, width: int) -> Iterator[Text]:
        """One block per row: its key cells on a line, then each other column as `header: value`."""
        keys = [i for i, c in enumerate(self.columns) if c.key]
        for r, row in enumerate(self.rows):
            name = "  ".join(_text(row[i]) for i in keys)
            yield Text("\n".join(_wrap(name, width, "name")), style=Style.parse("bold " + self.row_styles[r]))
            for i, column in enumerate(self.columns):
                if column.key or not _text(row[i]):
                    continue
                label = f"  {column.header}: " if column.header else "  "
                room = max(width - cell_len(label), 1)
                lines = _wrap(_text(row[i]), room, "words" if column.wrap == "never" else column.wrap)
                yield Text(label + ("\n" + " " * cell_len(label)).join(lines))


def _text(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _pieces(line: str, wrap: Wrap) -> list[str]:
    """The pieces a line may break between: words, or a name's parts after each separator."""
    if wrap == "words":
        return [w for w in line.split(" ") if w]
    if wrap == "name":
        return _NAME_BREAK.split(line)
    return [line]


def _wrap(text: str, width: int, wrap: Wrap) -> list[str]:
    """`text` in lines of at most `width` cells, broken between its pieces, and inside a
    piece only when that piece alone is wider (a layout that fits never needs it)."""
    out: list[str] = []
    for paragraph in text.split("\n"):
        if wrap == "never" or cell_len(paragraph) <= width or width < 1:
            out.append(paragraph)
            continue
        line = ""
        joiner = " " if wrap == "words" else ""
        for piece in _pieces(paragraph, wrap):
            candidate = f"{line}{joiner}{piece}" if line else piece
            if cell_len(candidate.rstrip()) <= width:
                line = candidate
                continue
            if line:
                out.append(line.rstrip())
            line = ""
            while cell_len(piece.rstrip()) > width:  # one piece wider than the column
                out.append(piece[:width])
                piece = piece[width:]
            line = piece
        out.append(line.rstrip())
    return out
