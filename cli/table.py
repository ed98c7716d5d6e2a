"""The one table every on-call view prints: nothing people copy is ever cut or folded.

Every cell is shown whole or not at all: ids, names, timestamps and amounts are never cut with an
ellipsis and never folded over lines. When a table is wider than the terminal:

1. columns are kept in priority order (``priority`` 0 first, then 1, 2, …; left to right among
   equals) while they fit; a column that does not fit is left out, and a narrower one after it may
   still be shown. Priority-0 columns are always shown, however wide;
2. a ``detail`` column (free text: a reason, a change, a park record) is placed after all the
   others, and where it does not fit it is not left out: its value goes on a line of its own under
   the row (``    why: …``), wrapped at spaces (and after the commas of a JSON record) only, so a
   timestamp or ARN inside it stays whole;
3. the table is followed by a line naming what was left out: ``hidden at this width: type, GPUs;
   --wide or --output json has all`` (wrapped at spaces, its last line never one word alone).

``--wide`` (``cli.options.wide_option``) shows every column, however wide the lines get. The table is laid
out here as styled text line by line: with every width fixed there is nothing left for a table
library to decide, and 1,000 rows render in a fraction of its time.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from cli.options import wide_requested
from guardrails.plurals import counted

GAP = "  "  # between columns
DETAIL_INDENT = "    "  # a detail moved under its row


@dataclass(frozen=True)
class Column:
    header: str
    priority: int = 0  # 0: always shown; higher numbers are left out first
    justify: Literal["left", "right"] = "left"
    detail: bool = False  # free text: moves under its row rather than being left out


@dataclass
class Table:
    title: str
    columns: Sequence[Column]
    rows: list[tuple[list[str | Text], str | None]] = field(default_factory=list)

    def add_row(self, *cells: str | Text, style: str | None = None) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(
                f"{counted(len(cells), 'cell')} for {counted(len(self.columns), 'column')} in table {self.title!r}"
            )
        self.rows.append((list(cells), style))


@dataclass(frozen=True)
class Rendered:
    text: Text  # title, header, rule and rows
    hidden: list[str]  # headers of the columns left out
    beneath: list[str]  # headers of the detail columns shown under their rows


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _natural_widths(table: Table) -> list[int]:
    """Each column's width with nothing cut: its widest cell, or its header."""
    return [
        max([cell_len(column.header), *(cell_len(_plain(cells[index])) for cells, _ in table.rows)])
        for index, column in enumerate(table.columns)
    ]


def layout(table: Table, width: int | None) -> tuple[list[int], list[int], list[int]]:
    """Which columns are shown in line, which under their rows, which left out (indexes); ``width``
    None is ``--wide``: everything in line."""
    natural = _natural_widths(table)
    indexes = range(len(table.columns))
    if width is None:
        return list(indexes), [], []
    shown: list[int] = []
    beneath: list[int] = []
    hidden: list[int] = []
    used = -len(GAP)
    # Whole columns first, in priority order; a detail goes in line only where room is left after them.
    for index in sorted(indexes, key=lambda i: (table.columns[i].detail, table.columns[i].priority, i)):
        column = table.columns[index]
        fits = used + len(GAP) + natural[index] <= width
        if fits or (column.priority == 0 and not column.detail):
            shown.append(index)
            used += len(GAP) + natural[index]
        elif column.detail:
            beneath.append(index)
        else:
            hidden.append(index)
    return sorted(shown), sorted(beneath), sorted(hidden)


def render(table: Table, width: int | None) -> Rendered:
    shown, beneath, hidden = layout(table, width)
    natural = _natural_widths(table)
    widths = {index: natural[index] for index in shown}
    text = Text(no_wrap=True, overflow="ignore")
    title = (
        [table.title]
        if width is None
        else textwrap.wrap(
            table.title, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
    )  # an account and a region in the title can pass 80 columns: wrapped at spaces, never cut
    text.append("\n".join(title) + "\n", style="italic")
    _append_line(text, [table.columns[i].header for i in shown], [table.columns[i] for i in shown],
                 [widths[i] for i in shown], "bold")  # fmt: skip
    text.append("─" * (sum(widths.values()) + len(GAP) * (len(shown) - 1)) + "\n")
    for cells, style in table.rows:
        _append_line(text, [cells[i] for i in shown], [table.columns[i] for i in shown],
                     [widths[i] for i in shown], style)  # fmt: skip
        for index in beneath:
            value = _plain(cells[index])
            if value and value != "-":
                label = f"{DETAIL_INDENT}{table.columns[index].header}: "
                room = max(width or 0, 20)
                lines = textwrap.wrap(
                    label + _breakable(value, room - len(DETAIL_INDENT) - 2),
                    room,
                    subsequent_indent=DETAIL_INDENT + "  ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                text.append("\n".join(lines) + "\n", style=style or "")
    return Rendered(
        text, [table.columns[i].header for i in hidden], [table.columns[i].header for i in beneath]
    )


def _breakable(value: str, room: int) -> str:
    """``value`` with a space after each comma of a word longer than ``room`` (a JSON record), so it
    wraps between its members rather than running past the line; no member is split."""
    return " ".join(word.replace(",", ", ") if len(word) > room else word for word in value.split(" "))


def _append_line(
    text: Text,
    cells: Sequence[str | Text],
    columns: Sequence[Column],
    widths: Sequence[int],
    style: str | None,
) -> None:
    line = Text(style=style or "")
    for position, (cell, column, width) in enumerate(zip(cells, columns, widths, strict=True)):
        if position:
            line.append(GAP)
        pad = " " * (width - cell_len(_plain(cell)))
        last = position == len(cells) - 1
        if column.justify == "right":
            line.append(pad)
            line.append(cell)
        else:
            line.append(cell)
            if not last:
                line.append(pad)
    line.rstrip()
    text.append(line)
    text.append("\n")


def print_table(console: Console, table: Table, *, wide: bool | None = None) -> Rendered:
    """Print ``table`` for ``console``'s width (all of it with ``--wide``), then what it left out."""
    rendered = render(table, None if (wide_requested() if wide is None else wide) else console.width)
    console.print(rendered.text, soft_wrap=True)
    if rendered.hidden:
        note = f"hidden at this width: {', '.join(rendered.hidden)}; --wide or --output json has all"
        console.print(Text("\n".join(wrap_note(note, console.width)), style="dim"), soft_wrap=True)
    return rendered


def wrap_note(note: str, width: int, indent: str = "  ") -> list[str]:
    """``note`` wrapped at spaces within ``width``, every line indented, and its last line never one word
    alone (an orphan such as "all"): the word before it comes down to join it, where the two fit."""
    lines = textwrap.wrap(
        note,
        max(width, len(indent) + 1),
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    if len(lines) >= 2 and len(lines[-1].split()) == 1:
        before = lines[-2].split()
        joined = f"{indent}{before[-1]} {lines[-1].strip()}"
        if len(before) >= 2 and cell_len(joined) <= width:
            lines[-2:] = [indent + " ".join(before[:-1]), joined]
    return lines
