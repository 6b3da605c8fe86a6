"""``kubesage data …``: fetch public traces into the local cache; generate openb variants."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.paths import cache_dir as default_cache_dir
from kubesage.core.traces import read_nodes, read_pods, write_pods
from kubesage.core.traces.fetch import DATASETS, fetch_dataset, pinned
from kubesage.core.traces.openb_variants import gpus_per_model, openb_variant, variant_statistics

data_app = typer.Typer(
    help="Public trace data: download and verify; generate variants.", no_args_is_help=True
)


@data_app.command("fetch")
@user_errors
def fetch(
    dataset: Annotated[str, typer.Argument(help=f"Data set: {', '.join(DATASETS)}.")] = "openb",
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="Cache root (default: $KUBESAGE_CACHE_DIR, else $XDG_CACHE_HOME/kubesage, "
            "else ~/.cache/kubesage).",
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="Fetch from this URL prefix instead (a mirror)."),
    ] = None,
) -> None:
    """Download a data set's files into the cache and check their SHA-256 sums.

    openb: node lists, five pod lists. openb-variants: the other pod lists (FGD's variants).

    genai: every hour of the GenAI trace's per-pod metrics, as .csv.gz files.

    The last two are not pinned by checksum: the first download's sums are checked later."""
    cache_dir = None if cache_dir is None else cache_dir.expanduser()
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=stderr
    )
    tasks: dict[str, TaskID] = {}

    def on_progress(name: str, done: int, total: int | None) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done)

    try:
        with progress:
            paths = fetch_dataset(
                dataset,
                cache_dir=cache_dir,
                base_url=base_url,
                on_progress=on_progress,
            )
    except KeyboardInterrupt:
        stderr.print(
            "interrupted: run the same command again to go on from the bytes received "
            "(kept where the mirror names the file's version)",
            markup=False,
        )
        raise typer.Exit(code=130) from None
    root = (cache_dir or default_cache_dir()) / dataset
    how = "verified" if pinned(dataset) else "checked against their first download"
    stderr.print(f"{len(paths)} file(s) {how} in {root}", markup=False)
    for path in paths:
        typer.echo(str(path))


@data_app.command("variant")
@user_errors
def variant(
    name: Annotated[
        str, typer.Argument(help="Variant: gpushare<N>, multigpu<N>, gpuspec<N> or cpu<NNN>.")
    ],
    base: Annotated[Path, typer.Option("--base", help="The openb pod list to draw from.")],
    out: Annotated[Path, typer.Option("--out", help="Pod list CSV to write.")],
    seed: Annotated[int, typer.Option("--seed")] = 0,
    specs_from: Annotated[
        Path | None,
        typer.Option(
            "--specs-from", help="gpuspec: a pod list whose GPU-model constraints are drawn."
        ),
    ] = None,
    nodes: Annotated[
        Path | None,
        typer.Option("--nodes", help="gpuspec without --specs-from: constraints by GPU model."),
    ] = None,
) -> None:
    """Generate one of the FGD paper's openb workload variants from a base pod list."""
    check_output(out)
    pods = openb_variant(
        read_pods(base),
        name,
        seed=seed,
        specs=read_pods(specs_from) if specs_from else (),
        models=gpus_per_model(read_nodes(nodes)) if nodes else None,
    )
    gzipped = out.name.endswith(".gz")
    write_replacing(out, lambda temporary: write_pods(pods, temporary, gzipped=gzipped))
    shares = variant_statistics(pods)
    stderr.print(
        f"{len(pods)} pods written to {out}: GPU in shares {shares['gpushare']:.1%}, "
        f"multi-GPU {shares['multigpu']:.1%}, constrained {shares['gpuspec']:.1%}; "
        f"CPU-only pods {shares['cpu']:.1%}"
    )
