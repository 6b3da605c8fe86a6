"""``kubesage train ppo``: train the placement policy in the simulator, rollouts on Ray.

Given several ``--seed``, it trains one model per seed and keeps the one that gains
most over FGD on arrival orders of its own (:mod:`kubesage.core.sim.model_selection`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.cli.options import Mode
from kubesage.core.cli.progress import runs_progress
from kubesage.core.cli.tables import print_table
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.sim.model_selection import Selection, Workload, select_model
from kubesage.core.sim.qualification import DEFAULT_RUNS, QUALIFY_SEEDS_FROM
from kubesage.core.sim.runner import default_jobs
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.openb_variants import gpus_per_model, openb_variant
from kubesage.core.types import NodeSpec, PodRequest

if TYPE_CHECKING:  # torch takes seconds to import: every command would pay for it
    from kubesage.core.rl.network import PlacementNetwork
    from kubesage.core.rl.training import TrainingStoppedError, TrainSettings

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
    seeds: Annotated[
        list[int] | None,
        typer.Option(
            "--seed",
            metavar="INT",
            help="Training seed (default 0). Repeat it to train one model per seed and keep "
            "the one that gains most over FGD on arrival orders of its own (docs/ppo.md).",
        ),
    ] = None,
    select_runs: Annotated[
        int,
        typer.Option(
            "--select-runs",
            min=2,
            help="With several --seed: arrival orders each model replays per workload.",
        ),
    ] = DEFAULT_RUNS,
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
    from kubesage.core.rl.training import TrainSettings

    seeds = seeds or [0]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise InputError(f"--seed repeats {', '.join(map(str, repeated))}: each trains one model")
    outputs = {seed: out if len(seeds) == 1 else seed_file(out, seed) for seed in seeds}
    for path in (out, *outputs.values()):
        check_output(path)
        check_output(_metrics_file(path), "the metrics file")
    node_specs = read_nodes(nodes)
    workloads = [read_pods(path, require_creation_time=mode is Mode.replay) for path in pods]
    models = gpus_per_model(node_specs)
    info: dict[str, object] = {
        "nodes": nodes.name,
        "pods": [p.name for p in pods],
        "variants": list(variants or []),
        "iterations": iterations,
        "steps_per_worker": steps,
        "workers": workers,
        "mode": mode.value,
    }
    networks: dict[int, PlacementNetwork] = {}
    for seed, path in outputs.items():
        generated = [
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
        seed_info = {**info, "seed": seed}
        networks[seed] = _train_one(node_specs, workloads + generated, settings, path, seed_info)
        _save(networks[seed], path, seed_info)
        stderr.print(
            f"model written to {path}; metrics per iteration in {_metrics_file(path)}",
            markup=False,
        )
    if len(seeds) == 1:
        return
    chosen, selection = _select(node_specs, pods, workloads, variants or [], outputs, select_runs)
    _save(networks[chosen], out, {**info, "seed": chosen, "selection": selection.as_dict()})
    _metrics_file(out).write_bytes(_metrics_file(outputs[chosen]).read_bytes())
    _print_selection(selection, out)


def seed_file(out: Path, seed: int) -> Path:
    """Where the model of one of several training seeds is written: beside ``out``."""
    return out.with_name(f"{out.stem}.seed{seed}{out.suffix}")


def _metrics_file(model: Path) -> Path:
    return model.with_suffix(".metrics.jsonl")


def _train_one(
    nodes: list[NodeSpec],
    workloads: list[list[PodRequest]],
    settings: TrainSettings,
    out: Path,
    info: dict[str, object],
) -> PlacementNetwork:
    """Train one seed with a progress bar; on Ctrl-C or a worker failure, save what was
    learned to ``out`` and end the command saying so."""
    from kubesage.core.rl.training import TrainingInterruptedError, WorkerError, train

    metrics = _metrics_file(out)
    progress = Progress(
        TextColumn(f"training ppo (seed {settings.seed})"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=stderr,
    )
    with progress:
        task = progress.add_task("train", total=settings.iterations, status="starting workers")

        def on_iteration(iteration: int, stats: dict[str, float]) -> None:
            allocation = stats.get("charts/episodic_allocation_pct")
            status = f"{stats['charts/steps_per_s']:.0f} steps/s"
            if allocation is not None:
                status += f", allocation {allocation:.2f} %"
            progress.update(task, completed=iteration, status=status)

        try:
            network, _ = train(
                nodes, workloads, settings, metrics_path=metrics, on_iteration=on_iteration
            )
        except TrainingInterruptedError as exc:
            stderr.print(f"error: {_saved_so_far(exc, out, metrics, info)}", markup=False)
            raise typer.Exit(code=130) from None
        except WorkerError as exc:
            raise _saved_so_far(exc, out, metrics, info) from exc
    return network


def _select(
    nodes: list[NodeSpec],
    pods: list[Path],
    workloads: list[list[PodRequest]],
    variants: list[str],
    outputs: dict[int, Path],
    runs: int,
) -> tuple[int, Selection]:
    """Replay every trained seed's model against FGD; the chosen seed and the scores.

    The workloads are the pod lists trained on and each ``--variant`` drawn afresh
    (generator seeds from the qualification's, never a training seed's draw)."""
    named = [
        Workload(path.name.split(".")[0], listed)
        for path, listed in zip(pods, workloads, strict=True)
    ]
    models = gpus_per_model(nodes)
    named += [
        Workload(
            name, openb_variant(workloads[0], name, seed=QUALIFY_SEEDS_FROM + n, models=models)
        )
        for n, name in enumerate(variants)
    ]
    candidates = [(f"seed {seed}", path) for seed, path in outputs.items()]
    total = len(named) * runs * (len(candidates) + 1)
    stderr.print(
        f"Choosing among {len(candidates)} models: {runs} arrival orders of "
        f"{len(named)} workload(s) each, and FGD's on the same orders.",
        markup=False,
    )
    kept = ", ".join(str(path) for path in outputs.values())
    try:
        with runs_progress() as progress:
            task = progress.add_task("selecting", total=total)
            selection = select_model(
                nodes,
                named,
                candidates,
                runs=runs,
                jobs=default_jobs(),
                on_result=lambda _: progress.advance(task),
            )
    except InputError as exc:
        raise InputError(f"{exc}; the trained models are kept: {kept}") from exc
    except KeyboardInterrupt:
        stderr.print(
            f"error: interrupted while choosing; the trained models are kept: {kept}",
            markup=False,
        )
        raise typer.Exit(code=130) from None
    by_label = {label: seed for (label, _), seed in zip(candidates, outputs, strict=True)}
    return by_label[selection.chosen.label], selection


def _print_selection(selection: Selection, out: Path) -> None:
    title = f"each seed's model − {selection.baseline}, GPU allocation at 130 % arrived (points)"
    table = Table(title=title)
    table.add_column("model")
    for name in selection.workloads:
        table.add_column(name, justify="right")
    table.add_column("mean", justify="right")
    for score in selection.scores:
        marker = " (chosen)" if score is selection.chosen else ""
        gains = [f"{q.mean_gain:+.3f} ± {q.standard_error:.3f}" for q in score.per_workload]
        table.add_row(score.label + marker, *gains, f"{score.mean_gain:+.3f}")
    print_table(Console(stderr=True), table)
    chosen = selection.chosen
    stderr.print(f"{chosen.label}'s model written to {out}", markup=False)
    if chosen.mean_gain <= 0:
        stderr.print(
            f"warning: no seed's model gained over {selection.baseline} on average; "
            f"`kubesage qualify --model {out}` will keep --policy {selection.baseline}",
            markup=False,
        )


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
