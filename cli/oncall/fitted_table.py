"""Tables that fit the terminal without cutting what people copy.

Each column has a priority. Columns marked ``whole`` (instance ids, timestamps) are never cut or
folded; the others fold (at spaces, else inside a word) in the width left to them. When even that
does not fit, columns are dropped, lowest priority first, and the caller is told which, so it can
say so. The table is laid out here as styled text, line by line: with fixed widths there is nothing
left for a table library to decide, and 1,000 rows render in a fraction of its time.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.text import Text

FOLD_MIN = 10  # narrowest a folding column gets before a column is dropped
COLUMN_GAP = 3  # padding on both sides and the space between columns


@dataclass(frozen=True)
class Column:
    header: str
    priority: int  # 0: never dropped; higher numbers are dropped first
    whole: bool = False  # never cut or folded (ids, timestamps)
    justify: Literal["left", "right"] = "left"


@dataclass(frozen=True)
class Fitted:
    table: Text  # title, header, rule and rows, each line at most the width asked for
    dropped: list[str]  # headers of the columns that did not fit


def fitted_table(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    styles: Sequence[str | None] | None = None,
) -> Fitted:
    natural = [
        max([len(column.header), *(len(row[index]) for row in rows)]) for index, column in enumerate(columns)
    ]
    kept = list(range(len(columns)))
    while len(kept) > 1 and _narrowest(kept, columns, natural) > width:
        lowest = max(
            (index for index in kept if columns[index].priority),
            key=lambda i: columns[i].priority,
            default=None,
        )
        if lowest is None:
            break
        kept.remove(lowest)
    widths = _widths(kept, columns, natural, width)
    shown = [columns[index] for index in kept]
    table = Text(no_wrap=True, overflow="ignore")
    table.append(title + "\n", style="italic")
    _append_row(table, [column.header for column in shown], shown, [widths[i] for i in kept], "bold")
    table.append("─" * (sum(widths[i] for i in kept) + COLUMN_GAP * (len(kept) - 1)) + "\n")
    for position, row in enumerate(rows):
        style = styles[position] if styles else None
        _append_row(table, [row[index] for index in kept], shown, [widths[i] for i in kept], style)
    return Fitted(table, [columns[index].header for index in range(len(columns)) if index not in kept])


def _append_row(
    table: Text, cells: Sequence[str], columns: Sequence[Column], widths: Sequence[int], style: str | None
) -> None:
    """One row, over as many lines as its tallest folded cell needs."""
    folded = [
        [cell] if column.whole or len(cell) <= width else textwrap.wrap(cell, width) or [""]
        for cell, column, width in zip(cells, columns, widths, strict=True)
    ]
    gap = " " * COLUMN_GAP
    for line in range(max(len(parts) for parts in folded)):
        texts = []
        for parts, column, width in zip(folded, columns, widths, strict=True):
            text = parts[line] if line < len(parts) else ""
            texts.append(text.rjust(width) if column.justify == "right" else text.ljust(width))
        table.append(gap.join(texts).rstrip() + "\n", style=style or "")


def _narrowest(kept: list[int], columns: Sequence[Column], natural: list[int]) -> int:
    cells = sum(natural[i] if columns[i].whole else min(natural[i], FOLD_MIN) for i in kept)
    return cells + COLUMN_GAP * (len(kept) - 1)


def _widths(kept: list[int], columns: Sequence[Column], natural: list[int], width: int) -> dict[int, int]:
    """Whole columns at their natural width; the rest share what is left, by priority."""
    widths = {i: natural[i] if columns[i].whole else min(natural[i], FOLD_MIN) for i in kept}
    spare = width - sum(widths.values()) - COLUMN_GAP * (len(kept) - 1)
    for index in sorted((i for i in kept if not columns[i].whole), key=lambda i: columns[i].priority):
        grow = max(0, min(natural[index] - widths[index], spare))
        widths[index] += grow
        spare -= grow
    return widths
