"""Tables that fit the terminal without cutting what people copy.

Each column has a priority. Columns marked ``whole`` (instance ids, timestamps) are never cut or
folded; the others fold inside the width left to them. When even that does not fit, columns are
dropped, lowest priority first, and the caller is told which, so it can say so. Widths are fixed
here, so the rendering library never shortens a column on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.table import Table
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
    table: Table
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
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index in kept:
        column = columns[index]
        table.add_column(
            column.header,
            justify=column.justify,
            width=widths[index],
            no_wrap=column.whole,
            overflow="ignore" if column.whole else "fold",
        )
    for position, row in enumerate(rows):
        style = styles[position] if styles else None
        table.add_row(*(Text(row[index]) for index in kept), style=style)
    return Fitted(table, [columns[index].header for index in range(len(columns)) if index not in kept])


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
