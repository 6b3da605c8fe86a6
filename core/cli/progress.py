"""The progress bar of the commands that run many simulations (on stderr: stdout is the
table or the one JSON object)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kubesage.core.cli.errors import stderr


def runs_progress() -> Progress:
    """Description, bar, done/total and elapsed time; it stays on screen when done."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=False,
    )
