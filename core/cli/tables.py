"""How every command prints a table: no word in a cell is ever shortened.

rich fits a table to the console by cutting cells to "kube…" or "0.6…", and a console
that is not a terminal (a pipe, a log file, ``make run`` into a file) is 80 columns
wide. A figure cut short is a wrong figure, so:

- each column is at least as wide as the longest word in any of its cells (prose may
  still wrap between words; headings fold rather than end in "…");
- written to a file or a pipe, the console is widened to the table's natural width,
  so nothing wraps at all;
- in a terminal too narrow for even that, rich crops the table at its right edge:
  the columns shown are whole.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

WIDEST_PIPED = 10_000
"""The width a table is measured at when nothing limits it (a file or a pipe)."""


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console`` with every word of every cell whole."""
    for column in table.columns:
        longest = max((_longest_word(cell) for cell in column.cells), default=0)
        column.min_width = max(column.min_width or 0, longest)
        column.overflow = "fold"  # a heading longer than its column folds, never "…"
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(WIDEST_PIPED))
    width = console.width
    console.width = max(width, natural.maximum)
    try:
        console.print(table)
    finally:
        console.width = width


def _longest_word(cell: RenderableType) -> int:
    if isinstance(cell, str):
        text = Text.from_markup(cell).plain
    elif isinstance(cell, Text):
        text = cell.plain
    else:  # another renderable measures itself
        return 0
    return max((len(word) for word in text.split()), default=0)
