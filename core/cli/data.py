"""``kubesage data …``: fetch public traces into the local cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.paths import cache_dir as default_cache_dir
from kubesage.core.traces.fetch import DATASETS, fetch_dataset

data_app = typer.Typer(help="Public trace data: download and verify.", no_args_is_help=True)


@data_app.command("fetch")
@user_errors
def fetch(
    dataset: Annotated[str, typer.Argument(help=f"Data set: {', '.join(DATASETS)}.")] = "openb",
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir", help="Cache root (default: $KUBESAGE_CACHE_DIR or ~/.cache/kubesage)."
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="Fetch from this URL prefix instead (a mirror)."),
    ] = None,
) -> None:
    """Download a data set's files into the cache and check their SHA-256 sums."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=stderr
    )
    tasks: dict[str, TaskID] = {}

    def on_progress(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done)

    with progress:
        paths = fetch_dataset(
            dataset, cache_dir=cache_dir, base_url=base_url, on_progress=on_progress
        )
    root = (cache_dir or default_cache_dir()) / dataset
    stderr.print(f"{len(paths)} file(s) verified in {root}")
    for path in paths:
        typer.echo(str(path))
