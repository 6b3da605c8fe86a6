"""``kubesage train ppo``: train the placement policy in the simulator, rollouts on Ray."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.options import Mode
from kubesage.core.rl.persistence import save_network
from kubesage.core.rl.training import TrainSettings, train
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.openb_variants import gpus_per_model, openb_variant

train_app = typer.Typer(help="Train learned policies in the simulator.", no_args_is_help=True)


@train_app.command("ppo")
@user_errors
def ppo(
    nodes: Annotated[Path, typer.Option("--nodes", help="openb node list CSV.")],
    pods: Annotated[list[Path], typer.Option("--pods", help="openb pod list CSV (repeatable).")],
    out: Annotated[Path, typer.Option("--out", help="Model file to write (.safetensors).")],
    workers: Annotated[
        int, typer.Option("--workers", min=0, help="Ray rollout workers (0: in-process).")
    ] = min(2, os.cpu_count() or 1),
    iterations: Annotated[int, typer.Option("--iterations", min=1)] = 20,
    steps: Annotated[int, typer.Option("--steps", min=2, help="Decisions per worker.")] = 1024,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    mode: Annotated[
        Mode, typer.Option("--mode", help="fgd: the paper's protocol; replay: trace times.")
    ] = Mode.fgd,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="An existing Ray cluster (default: local).")
    ] = None,
    variants: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            help="Also train on this openb variant (gpushare60, multigpu30, gpuspec25, cpu200, "
            "...) generated from the first --pods list (repeatable; docs/ppo.md).",
        ),
    ] = None,
) -> None:
    """Train the ppo policy on the FGD protocol over the given traces; write the model."""
    node_specs = read_nodes(nodes)
    workloads = [read_pods(path) for path in pods]
    models = gpus_per_model(node_specs)
    workloads += [
        openb_variant(workloads[0], name, seed=seed + number, models=models)
        for number, name in enumerate(variants or [])
    ]
    settings = TrainSettings(
        iterations=iterations,
        steps_per_worker=steps,
        workers=workers,
        seed=seed,
        mode=mode.value,
        ray_address=ray_address,
    )
    metrics = out.with_suffix(".metrics.jsonl")
    progress = Progress(
        TextColumn("training ppo"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=stderr,
    )
    with progress:
        task = progress.add_task("train", total=iterations, status="starting workers")

        def on_iteration(iteration: int, stats: dict[str, float]) -> None:
            allocation = stats.get("charts/episodic_allocation_pct")
            status = f"{stats['charts/steps_per_s']:.0f} steps/s"
            if allocation is not None:
                status += f", allocation {allocation:.2f} %"
            progress.update(task, completed=iteration, status=status)

        network, _ = train(
            node_specs, workloads, settings, metrics_path=metrics, on_iteration=on_iteration
        )
    save_network(
        network,
        out,
        info={
            "nodes": nodes.name,
            "pods": [p.name for p in pods],
            "variants": list(variants or []),
            "iterations": iterations,
            "steps_per_worker": steps,
            "workers": workers,
            "seed": seed,
            "mode": mode.value,
        },
    )
    stderr.print(f"model written to {out}; metrics per iteration in {metrics}")
