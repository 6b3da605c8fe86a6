"""``kubesage train ppo``: train the placement policy in the simulator, rollouts on Ray."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.options import Mode
from kubesage.core.errors import DependencyError
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.openb_variants import gpus_per_model, openb_variant

if TYPE_CHECKING:  # torch takes seconds to import: every command would pay for it
    from kubesage.core.rl.network import PlacementNetwork
    from kubesage.core.rl.training import TrainingStoppedError

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
    worker_timeout: Annotated[
        float | None,
        typer.Option(
            "--worker-timeout",
            min=0.001,
            help="Seconds a call to the Ray workers may take (default: 300 for start-up and "
            "the first iteration, then 10x the first iteration, at least 120).",
        ),
    ] = None,
) -> None:
    """Train the ppo policy on the FGD protocol over the given traces; write the model."""
    from kubesage.core.rl.training import (
        TrainingInterruptedError,
        TrainSettings,
        WorkerError,
        train,
    )

    metrics = out.with_suffix(".metrics.jsonl")
    check_output(out)
    check_output(metrics, "the metrics file")
    node_specs = read_nodes(nodes)
    workloads = [read_pods(path, require_creation_time=mode is Mode.replay) for path in pods]
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
        worker_timeout_s=worker_timeout,
    )
    info = {
        "nodes": nodes.name,
        "pods": [p.name for p in pods],
        "variants": list(variants or []),
        "iterations": iterations,
        "steps_per_worker": steps,
        "workers": workers,
        "seed": seed,
        "mode": mode.value,
    }
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

        try:
            network, _ = train(
                node_specs, workloads, settings, metrics_path=metrics, on_iteration=on_iteration
            )
        except TrainingInterruptedError as exc:
            stderr.print(f"error: {_saved_so_far(exc, out, metrics, info)}", markup=False)
            raise typer.Exit(code=130) from None
        except WorkerError as exc:
            raise _saved_so_far(exc, out, metrics, info) from exc
    _save(network, out, info)
    stderr.print(f"model written to {out}; metrics per iteration in {metrics}", markup=False)


def _save(network: PlacementNetwork, out: Path, info: dict[str, object]) -> None:
    from kubesage.core.rl.persistence import save_network

    write_replacing(out, lambda path: save_network(network, path, info=info))


def _saved_so_far(
    exc: TrainingStoppedError, out: Path, metrics: Path, info: dict[str, object]
) -> DependencyError:
    """Save the weights of the iterations done before training stopped (the workers
    failed, or Ctrl-C); the error to end with, saying what was saved."""
    if exc.network is None:
        return DependencyError(f"{exc}; no iteration completed, nothing was saved")
    done = len(exc.history)
    _save(exc.network, out, {**info, "iterations": done, "stopped": str(exc)})
    return DependencyError(
        f"{exc}; the weights after iteration {done} of {info['iterations']} are saved to "
        f"{out} (metrics per iteration in {metrics})"
    )
