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

from kubesage.core.cli.errors import refuse_unused_options, stderr, user_errors
from kubesage.core.cli.options import Mode
from kubesage.core.cli.progress import runs_progress
from kubesage.core.cli.tables import print_table
from kubesage.core.errors import DependencyError, InputError, KubesageError
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.sim.model_selection import (
    SELECT_SEEDS_FROM,
    Baseline,
    Selection,
    Workload,
    run_baseline,
    select_model,
)
from kubesage.core.sim.qualification import DEFAULT_RUNS
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
        int | None,
        typer.Option(
            "--select-runs",
            min=2,
            help=f"With several --seed: arrival orders each model replays per workload "
            f"(default {DEFAULT_RUNS}).",
        ),
    ] = None,
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
    """Train the ppo policy on the FGD protocol over the given traces; write the model.

    With several --seed, one model per seed is trained and written beside --out, and
    the one that gains most over FGD, replayed on the training workloads in arrival
    orders of its own (always the FGD protocol), is written to --out (docs/ppo.md).
    """
    from kubesage.core.rl.training import TrainSettings

    seeds = seeds or [0]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise InputError(f"--seed repeats {', '.join(map(str, repeated))}: each trains one model")
    if len(seeds) == 1:
        refuse_unused_options(
            {"--select-runs": select_runs is not None},
            "with several --seed",
            "one --seed trains one model",
        )
    outputs = {seed: out if len(seeds) == 1 else seed_file(out, seed) for seed in seeds}
    _check_outputs(out, list(outputs.values()))
    node_specs = read_nodes(nodes)
    workloads = [read_pods(path, require_creation_time=mode is Mode.replay) for path in pods]
    models = gpus_per_model(node_specs)
    baseline = None
    if len(seeds) > 1:  # FGD's runs first: a workload they cannot judge fails before training
        named = _selection_workloads(node_specs, pods, workloads, variants or [])
        baseline = _baseline(node_specs, named, select_runs or DEFAULT_RUNS)

    def info(seed: int) -> dict[str, object]:
        """What the model file records of its training."""
        return {
            "nodes": nodes.name,
            "pods": [p.name for p in pods],
            "variants": list(variants or []),
            "iterations": iterations,
            "steps_per_worker": steps,
            "workers": workers,
            "seed": seed,
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
        networks[seed] = _train_one(node_specs, workloads + generated, settings, path, info(seed))
        _save(networks[seed], path, info(seed))
        stderr.print(
            f"model written to {path}; metrics per iteration in {_metrics_file(path)}",
            markup=False,
        )
    if baseline is None:
        return
    chosen, selection = _select(node_specs, baseline, outputs)
    _save(networks[chosen], out, {**info(chosen), "selection": selection.as_dict()})
    _metrics_file(out).write_bytes(_metrics_file(outputs[chosen]).read_bytes())
    _print_selection(selection, out)


def seed_file(out: Path, seed: int) -> Path:
    """Where the model of one of several training seeds is written: beside ``out``."""
    return out.with_name(f"{out.stem}.seed{seed}{out.suffix}")


def _metrics_file(model: Path) -> Path:
    return model.with_suffix(".metrics.jsonl")


def _check_outputs(out: Path, models: list[Path]) -> None:
    """Refuse, before the work, files that could not be written or that would be one
    file (an ``--out`` without a suffix gives every seed's metrics one name)."""
    files = [out, _metrics_file(out)]
    for model in models:
        files += [model, _metrics_file(model)] if model != out else []
    if len(set(files)) < len(files):
        raise InputError(
            f"--out {out}: name it with a suffix (model.safetensors): each seed's model and "
            "metrics are named from it, and here two of them would be one file"
        )
    for file in files:
        check_output(file, "--out" if file.suffix != ".jsonl" else "the metrics file")


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


def _selection_workloads(
    nodes: list[NodeSpec], pods: list[Path], workloads: list[list[PodRequest]], variants: list[str]
) -> list[Workload]:
    """What the seeds' models are chosen on: the pod lists trained on, and each
    ``--variant`` drawn again with generator seeds of selection's own (from 20,000; the
    training draws' are the training seed plus the variant's index)."""
    models = gpus_per_model(nodes)
    listed = [(path.name.split(".")[0], read) for path, read in zip(pods, workloads, strict=True)]
    listed += [
        (f"{name} (generated)", openb_variant(workloads[0], name, seed=seed, models=models))
        for seed, name in enumerate(variants, start=SELECT_SEEDS_FROM)
    ]
    named: list[Workload] = []
    for name, drawn in listed:  # a name given twice is numbered: the record keys on it
        taken = any(w.name == name for w in named)
        named.append(Workload(f"{name} ({len(named) + 1})" if taken else name, drawn))
    return named


def _baseline(nodes: list[NodeSpec], named: list[Workload], runs: int) -> Baseline:
    """FGD on every workload in selection's arrival orders, with a progress bar."""
    with runs_progress() as progress:
        task = progress.add_task("FGD, to choose the seeds by", total=len(named) * runs)
        return run_baseline(
            nodes, named, runs=runs, jobs=default_jobs(), on_result=lambda _: progress.advance(task)
        )


def _select(
    nodes: list[NodeSpec], baseline: Baseline, outputs: dict[int, Path]
) -> tuple[int, Selection]:
    """Replay every trained seed's model on the baseline's orders; the chosen seed and
    the scores. Whatever stops it, the seeds' files stay and the error says where."""
    candidates = [(f"seed {seed}", path) for seed, path in outputs.items()]
    runs = len(baseline.results[0])
    stderr.print(
        f"Choosing among {len(candidates)} models: {runs} arrival orders of "
        f"{len(baseline.workloads)} workload(s) each, against FGD's.",
        markup=False,
    )
    kept = f"the trained models are kept: {', '.join(str(path) for path in outputs.values())}"
    try:
        with runs_progress() as progress:
            task = progress.add_task(
                "choosing", total=len(baseline.workloads) * runs * len(outputs)
            )
            selection = select_model(
                nodes,
                baseline,
                candidates,
                jobs=default_jobs(),
                on_result=lambda _: progress.advance(task),
            )
    except KubesageError as exc:
        raise KubesageError(f"{exc}; {kept}") from exc
    except KeyboardInterrupt:
        stderr.print(f"error: interrupted while choosing; {kept}", markup=False)
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
