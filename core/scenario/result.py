"""The scenario's settings, its variants, and what one run of one variant yields.

A run is (settings, variant, seed) → :class:`VariantRun`: the figures the issue names
(:data:`FIGURES`, all numbers), the per-reconciler action counts, and time series for
the report's plots. Several seeds of one variant are averaged by
:func:`mean_figures`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

VARIANTS = (
    "k8s-default",
    "fgd",
    "kubesage",
    "kubesage-no-defrag",
    "kubesage-no-gang",
    "kubesage-no-elastic",
)
"""Every variant, in report order: kube-scheduler's default scoring with no loop
actions; FGD packing with no loop actions; the full loop; the loop without one
reconciler each."""

FIGURES = (
    "large_task_schedulable_pct",
    "pods_migrated_pct",
    "gpu_allocation_pct",
    "gpu_utilisation_pct",
    "training_throughput_gain_pct",
    "validation_release_pct",
    "released_gpu_hours_used_pct",
    "pending_p95_s",
    "training_start_wait_mean_s",
)
"""The figures of one variant, as ``--format json`` names them. The last is not in the
issue's list: the mean time from a training job's arrival to its start (a job never
started counts until the end), so a variant that places other work by making gangs
wait shows it."""

FIGURE_LABELS = {
    "large_task_schedulable_pct": "large tasks schedulable (%)",
    "pods_migrated_pct": "pods migrated (%)",
    "gpu_allocation_pct": "GPU allocation (%)",
    "gpu_utilisation_pct": "GPU utilisation (%)",
    "training_throughput_gain_pct": "training throughput gain vs k8s-default (%)",
    "validation_release_pct": "validation GPU time released (%)",
    "released_gpu_hours_used_pct": "released GPU time used by others (%)",
    "pending_p95_s": "pending time p95 (s)",
    "training_start_wait_mean_s": "training start wait, mean (s)",
}
"""A heading for every name of :data:`FIGURES` (the table and the report use it)."""

SERIES = ("time_s", "gpu_allocation", "pending_large", "migrations", "released_gpus")
"""Time series of a run, sampled once per loop tick: allocated share of GPUs,
large tasks pending, migrations so far, GPUs released by elastic scaling now."""


@dataclass(frozen=True)
class ScenarioSettings:
    """``kubesage simulate --scenario mixed`` options."""

    gpu_nodes: int = 16
    hours: float = 2.0
    load: float = 0.85
    """Offered GPU load: the share of GPU capacity the arrivals request on average."""
    tick_s: float = 30.0
    """The control loop's tick on the simulator's clock."""
    data_dir: str | None = None
    """Where the shared traces are (the folder holding ``genai/``); None: synthetic
    profiles (the command line fills it from ``--data-dir``, ``$KUBESAGE_SHARED_DATA``
    or ``../shared/data``: :func:`~kubesage.core.scenario.profiles.default_data_dir`)."""
    policy: str = "fgd"
    """The kubesage variants' policy: the one ``kubesage serve`` uses by default."""


@dataclass
class VariantRun:
    """One variant on one seed."""

    variant: str
    seed: int
    figures: dict[str, float]
    """Every name of :data:`FIGURES` → a number."""
    actions: dict[str, dict[str, int]] = field(default_factory=dict)
    """Reconciler → action kind → count of actions done."""
    series: dict[str, list[float]] = field(default_factory=dict)
    """Every name of :data:`SERIES` → one value per tick."""
    conservation: dict[str, float] = field(default_factory=dict)
    """Pods arrived, placed, pending, finished; GPU-seconds held vs accounted."""
    job_throughput: dict[str, float] = field(default_factory=dict)
    """Training job id → its mean tokens/s over the training phases it ran (the
    throughput gain against ``k8s-default`` is computed from these, same jobs)."""


def fill_throughput_gain(runs: Mapping[str, VariantRun]) -> None:
    """Set ``training_throughput_gain_pct`` of every run of one seed against its
    ``k8s-default`` run: the ratio of mean job throughputs over the jobs both ran."""
    base = runs.get("k8s-default")
    for run in runs.values():
        if base is None:
            run.figures["training_throughput_gain_pct"] = 0.0
            continue
        common = sorted(set(run.job_throughput) & set(base.job_throughput))
        ours = sum(run.job_throughput[job] for job in common)
        theirs = sum(base.job_throughput[job] for job in common)
        run.figures["training_throughput_gain_pct"] = (
            100.0 * (ours / theirs - 1.0) if theirs > 0 else 0.0
        )


def mean_figures(runs: Sequence[VariantRun]) -> dict[str, float]:
    """The mean of each figure over ``runs`` (one variant, several seeds)."""
    return {name: statistics.fmean(run.figures[name] for run in runs) for name in FIGURES}


def summed_actions(runs: Sequence[VariantRun]) -> dict[str, dict[str, float]]:
    """Mean action counts per reconciler and kind over ``runs``."""
    totals: dict[str, dict[str, float]] = {}
    for run in runs:
        for reconciler, kinds in run.actions.items():
            for kind, count in kinds.items():
                slot = totals.setdefault(reconciler, {})
                slot[kind] = slot.get(kind, 0.0) + count / len(runs)
    return totals


def document(
    settings: ScenarioSettings, seeds: Sequence[int], runs: Mapping[str, Sequence[VariantRun]]
) -> dict[str, object]:
    """The ``--format json`` object: ``{"scenario": {...}, "variants": {name: M}}``."""
    return {
        "scenario": {**vars(settings), "seeds": list(seeds)},
        "variants": {
            name: {**mean_figures(variant_runs), "actions": summed_actions(variant_runs)}
            for name, variant_runs in runs.items()
        },
    }


def sweep_figures(
    settings: ScenarioSettings,
    seeds: Sequence[int],
    sweep: Mapping[float, Mapping[str, Sequence[VariantRun]]],
) -> list[dict[str, object]]:
    """The ``sweep`` of ``--sweep``'s JSON and ``results.json``: every load's variants as
    :func:`document` gives them, lowest load first."""
    return [
        {
            "load": load,
            "variants": document(replace(settings, load=load), seeds, sweep[load])["variants"],
        }
        for load in sorted(sweep)
    ]
