"""``kubesage simulate --scenario mixed``: the whole control loop on a mixed workload.

Runs every variant (``k8s-default``, ``fgd``, ``kubesage`` and its ablations) over the
same arrivals per seed, prints the figures side by side (means over the seeds) or one
JSON object with ``--format json``, and writes the HTML report; with ``--sweep`` the
same over a range of offered loads. Runs go to local processes (``--jobs``) or a Ray
cluster (``--ray-address``). See docs/scenario.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kubesage.core.cli.errors import stderr
from kubesage.core.cli.options import OutputFormat
from kubesage.core.cli.progress import runs_progress
from kubesage.core.cli.tables import print_table
from kubesage.core.errors import InputError
from kubesage.core.model_files import writing_report
from kubesage.core.report.scenario_html import write_scenario_report
from kubesage.core.scenario.cluster import MAX_GPU_NODES
from kubesage.core.scenario.profiles import load_profiles
from kubesage.core.scenario.result import (
    FIGURE_LABELS,
    FIGURES,
    VARIANTS,
    ScenarioSettings,
    VariantRun,
    document,
    mean_figures,
    sweep_figures,
)
from kubesage.core.scenario.sweep import run_scenario, sweep

SCENARIOS = ("mixed",)
SWEEP_LOADS = (0.6, 0.7, 0.8, 0.9, 0.95)
"""The offered loads ``--sweep`` runs (the issue's 0.6 to 0.95)."""


def parse_variants(text: str | None) -> list[str]:
    """``--variants a,b`` (default: every variant), checked."""
    if not text:
        return list(VARIANTS)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise InputError(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    return list(dict.fromkeys(names))


def check_settings(settings: ScenarioSettings) -> None:
    """Clear errors for options out of range."""
    if not 1 <= settings.gpu_nodes <= MAX_GPU_NODES:
        raise InputError(
            f"--gpu-nodes must be a whole number from 1 to {MAX_GPU_NODES}, "
            f"got {settings.gpu_nodes}"
        )
    if not settings.hours > 0 or not math.isfinite(settings.hours):
        raise InputError(f"--hours must be a positive number, got {settings.hours}")
    if not 0.0 < settings.load <= 1.5:
        raise InputError(f"--load must be in (0, 1.5], got {settings.load}")


def run_scenario_command(
    settings: ScenarioSettings,
    *,
    seeds: Sequence[int],
    variants: Sequence[str],
    do_sweep: bool,
    jobs: int,
    ray_address: str | None,
    output_format: OutputFormat,
    report_dir: Path,
    no_report: bool,
) -> None:
    """What ``kubesage simulate --scenario mixed`` does (see the module docstring)."""
    check_settings(settings)
    loads = sorted({*SWEEP_LOADS, settings.load}) if do_sweep else [settings.load]
    total = len(loads) * len(seeds) * len({*variants, "k8s-default"})
    where = f"Ray at {ray_address}" if ray_address else f"{jobs} local worker(s)"
    profiles = load_profiles(Path(settings.data_dir) if settings.data_dir else None)
    stderr.print(f"Inference utilisation profiles: {profiles.source}.", markup=False)
    stderr.print(
        f"Scenario mixed: {settings.gpu_nodes} GPU nodes, {settings.hours:g} h, "
        f"load {', '.join(f'{load:g}' for load in loads)}, seeds "
        f"{', '.join(map(str, seeds))}, {len(variants)} variant(s); {where}."
    )
    progress = runs_progress()
    with progress:
        task = progress.add_task("runs", total=total)

        def advance(run: VariantRun) -> None:
            progress.advance(task)

        if do_sweep:
            by_load = sweep(
                settings,
                loads,
                seeds,
                variants,
                jobs=jobs,
                ray_address=ray_address,
                on_result=advance,
            )
            runs = by_load[settings.load]
        else:
            by_load = None
            runs = run_scenario(
                settings, seeds, variants, jobs=jobs, ray_address=ray_address, on_result=advance
            )
    result = document(settings, seeds, runs)
    scenario = result["scenario"]
    if isinstance(scenario, dict):  # where the inference profiles came from, said
        scenario["profiles"] = profiles.source
    if by_load is not None:
        result["sweep"] = sweep_figures(settings, seeds, by_load)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(result, separators=(",", ":")))
    else:
        _print(settings, runs, Console())
    if not no_report:
        with writing_report(report_dir, "--report-dir"):
            path = write_scenario_report(
                report_dir,
                settings,
                seeds,
                runs,
                sweep=by_load,
                profiles=profiles.source,
                description=(
                    f"Mixed workload on {settings.gpu_nodes} DGX-class nodes "
                    f"({settings.gpu_nodes * 8} GPUs) for {settings.hours:g} h at offered load "
                    f"{settings.load:g}; seeds {', '.join(map(str, seeds))}."
                ),
            )
        stderr.print(f"Report written to {path}", markup=False)


def _print(
    settings: ScenarioSettings, runs: Mapping[str, Sequence[VariantRun]], console: Console
) -> None:
    table = Table(
        title=(
            f"Mixed workload, {settings.gpu_nodes * 8} GPUs, load {settings.load:g}, "
            f"{settings.hours:g} h (means over seeds)"
        )
    )
    table.add_column("variant", no_wrap=True)
    for figure in FIGURES:
        table.add_column(FIGURE_LABELS[figure], justify="right")
    for name, variant_runs in runs.items():
        figures = mean_figures(variant_runs)
        table.add_row(name, *(f"{figures[figure]:.1f}" for figure in FIGURES))
    print_table(console, table)
