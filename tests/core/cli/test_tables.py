"""Every command's tables: no word in a cell is shortened, piped or in a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from kubesage.core.cli.tables import print_table

FIGURES = ["0.688123", "1234567.5", "kubesage-no-defrag"]


def _table() -> Table:
    table = Table(title="a title wider than the console it is printed on")
    table.add_column("model", no_wrap=True)
    for heading in ("a_long_heading_without_spaces", "h=15", "why"):
        table.add_column(heading, justify="right")
    table.add_row("stgcn", *FIGURES[:2], "prose may wrap between its words")
    table.add_row("[bold]linear_lad[/]", "0.5", FIGURES[2], "-")
    return table


def _printed(console: Console) -> str:
    print_table(console, _table())
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def test_piped_the_table_is_whole_at_its_natural_width() -> None:
    output = _printed(Console(file=io.StringIO(), width=40))  # not a terminal, as in a log
    assert "…" not in output
    for word in (*FIGURES, "linear_lad", "a_long_heading_without_spaces"):
        assert word in output
    assert "prose may wrap between its words" in output  # one line: nothing wraps
    assert "[bold]" not in output  # markup rendered, not measured as text


def test_in_a_narrow_terminal_cells_keep_every_word() -> None:
    """Narrower than the figures need: the table is cropped at the terminal's right
    edge, and the columns it shows hold their words whole, never folded or cut."""
    output = _printed(Console(file=io.StringIO(), width=44, force_terminal=True, color_system=None))
    assert "…" not in output
    lines = output.splitlines()
    assert all(len(line) <= 44 for line in lines)
    for word in (*FIGURES, "linear_lad"):
        assert any(word in line for line in lines), word


def test_a_column_never_narrows_below_its_set_minimum() -> None:
    table = Table()
    table.add_column("x", min_width=12)
    table.add_row("1")
    console = Console(file=io.StringIO(), width=80)
    print_table(console, table)
    assert table.columns[0].min_width == 12
