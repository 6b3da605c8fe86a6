"""Run policies × seeds over one cluster and workload, in parallel processes if asked.

A run that names a model file (:attr:`RunSpec.model`) needs its policy to use that
file: a learned policy that cannot (its ``problem`` set) fails the run with the
:class:`~kubesage.core.errors.ModelError`, and :func:`run_many` checks every such
policy before any run starts. A learned policy falls back to FGD only in place of its
shipped model; how many of a run's decisions fell back is in :attr:`RunResult.fallbacks`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import ModelError
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy
from kubesage.core.sim.engine import ProgressCallback, Simulator
from kubesage.core.sim.metrics import arrived_percent, discrete_curve, downsample, value_at
from kubesage.core.sim.protocol import DEFAULT_TUNE, check_gpu_capacity, fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.types import NodeSpec, PodRequest
from kubesage.core.worker_pool import run_in_workers

Mode = Literal["fgd", "replay"]
T = TypeVar("T")


@dataclass(frozen=True)
class RunSpec:
    """One simulation: a policy and a seed on a cluster and workload."""

    policy: str
    seed: int
    mode: Mode = "fgd"
    tune: float = DEFAULT_TUNE
    model: Path | None = None
    """For learned policies: the model file, which must load (None: the shipped one, or
    FGD's decisions if that cannot be used)."""


@dataclass(frozen=True)
class RunResult:
    """What one run measured. Percentages are of cluster GPU capacity."""

    policy: str
    seed: int
    mode: Mode
    alloc_at_100: float | None
    alloc_at_130: float | None
    frag_ratio_at_90: float | None
    failed_pods: int
    alloc_peak: float
    """Highest GPU allocation reached (% of capacity)."""
    alloc_time_mean: float
    """Time-weighted mean GPU allocation (% of capacity); event-weighted in fgd mode."""
    pods: int
    nodes: int
    wall_s: float
    arrived_end: float = 0.0
    """GPU request arrived by the last event (% of capacity): the arrived axis ends there."""
    curves: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    """Plot series: name → (x, y)."""
    fallbacks: int = 0
    """Decisions a learned policy left to FGD because its model could not make them."""
    fallback_reason: str = ""
    """Why its model could not be used at all ("" when it could: any fallbacks were then
    single requests its model scored as non-finite)."""

    def summary_row(self) -> dict[str, object]:
        """The fields of the CLI's JSON ``runs`` entries (a replay adds its peak and
        time-mean allocation, the figures its table shows)."""
        row: dict[str, object] = {
            "policy": self.policy,
            "seed": self.seed,
            "alloc_at_100": _round(self.alloc_at_100),
            "alloc_at_130": _round(self.alloc_at_130),
            "frag_ratio_at_90": _round(self.frag_ratio_at_90),
            "failed_pods": self.failed_pods,
        }
        if self.mode != "fgd":
            row["alloc_peak"] = _round(self.alloc_peak)
            row["alloc_time_mean"] = _round(self.alloc_time_mean)
        return row


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_one(
    spec: RunSpec,
    nodes: Sequence[NodeSpec],
    workload: Sequence[PodRequest],
    on_progress: ProgressCallback | None = None,
) -> RunResult:
    """Simulate ``spec`` and summarise it."""
    started = time.perf_counter()
    typical = typical_pods(workload)
    policy = _policy(spec, workload)
    simulator = Simulator(
        nodes, policy, lambda state: FragmentationMeasure(typical, state.gpu_models)
    )
    capacity = simulator.state.gpu_capacity_milli_total
    check_gpu_capacity(capacity)
    if spec.mode == "fgd":
        arrivals = fgd_arrivals(
            workload, gpu_capacity_milli=capacity, seed=spec.seed, tune=spec.tune
        )
        simulator.run_arrivals(arrivals, on_progress)
        pods = len(arrivals)
    else:
        simulator.run_replay(workload, on_progress)
        pods = len(workload)
    series = simulator.trajectory.as_arrays()
    arrived = arrived_percent(series["arrived_gpu_milli"], capacity)
    alloc_pct = np.round(series["allocated_gpu_milli"] * 100.0 / capacity, 2)
    frag_pct = series["fragmentation_ratio"] * 100.0
    upto = int(arrived.max()) if arrived.size else 0
    curves: dict[str, tuple[list[float], list[float]]] = {}
    for name, values in (("allocation", alloc_pct), ("fragmentation", frag_pct)):
        xs, ys = discrete_curve(arrived, values, upto)
        curves[f"{name}_by_arrived"] = ([float(x) for x in xs], ys)
        curves[f"{name}_by_time"] = downsample(series["time_s"], values)
    return RunResult(
        policy=spec.policy,
        seed=spec.seed,
        mode=spec.mode,
        alloc_at_100=value_at(arrived, alloc_pct, 100.0),
        alloc_at_130=value_at(arrived, alloc_pct, 130.0),
        frag_ratio_at_90=value_at(arrived, frag_pct, 90.0),
        failed_pods=len(simulator.failed),
        alloc_peak=float(alloc_pct.max()),
        alloc_time_mean=_time_weighted_mean(series["time_s"], alloc_pct),
        pods=pods,
        nodes=simulator.state.num_nodes,
        wall_s=time.perf_counter() - started,
        arrived_end=float(series["arrived_gpu_milli"][-1] * 100.0 / capacity)
        if series["arrived_gpu_milli"].size
        else 0.0,
        curves=curves,
        fallbacks=_attribute(policy, "fallbacks", int, 0),
        fallback_reason=_attribute(policy, "problem", str, ""),
    )


def _attribute(policy: Policy, name: str, kind: type[T], default: T) -> T:
    """A learned policy's ``name`` (``fallbacks``, ``problem``); ``default`` for the rest."""
    value = getattr(policy, name, default)
    return value if isinstance(value, kind) else default


def _policy(spec: RunSpec, workload: Sequence[PodRequest]) -> Policy:
    """``spec``'s policy; ModelError when it cannot use the model file ``spec`` names."""
    policy = make_policy(
        spec.policy, PolicyContext(seed=spec.seed, workload=workload, model=spec.model)
    )
    if spec.model is not None and (problem := _attribute(policy, "problem", str, "")):
        raise ModelError(problem)
    return policy


def check_models(specs: Sequence[RunSpec], workload: Sequence[PodRequest]) -> None:
    """Build each policy a spec names a model file for, once: ModelError when one cannot
    use its model, before any run starts."""
    for spec in {(s.policy, s.model): s for s in specs if s.model is not None}.values():
        _policy(spec, workload)


def _time_weighted_mean(times: FloatArray, values: FloatArray) -> float:
    """Mean of a step function that holds ``values[i]`` from ``times[i]`` to ``times[i+1]``."""
    spans = np.diff(times)
    if spans.size == 0 or spans.sum() <= 0:
        return float(values.mean())
    return float((values[:-1] * spans).sum() / spans.sum())


def default_jobs() -> int:
    """Worker processes to use by default: the CPUs this process may run on."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def run_many(
    specs: Sequence[RunSpec],
    nodes: Sequence[NodeSpec],
    workload: Sequence[PodRequest],
    *,
    jobs: int = 1,
    on_result: Callable[[RunResult], None] | None = None,
    on_progress: Callable[[RunSpec, int, int], None] | None = None,
) -> list[RunResult]:
    """Run every spec; results come back in the order of ``specs``.

    With ``jobs == 1`` runs happen in this process and ``on_progress`` sees every
    event; with more, each run is a task in a process pool and progress is per run.
    """
    ClusterState(nodes)  # fail fast on a bad cluster, before any worker starts
    check_models(specs, workload)  # and on a model file that cannot be used
    if jobs <= 1 or len(specs) <= 1:
        results = []
        for spec in specs:
            progress = None
            if on_progress is not None:
                progress = _bind_progress(on_progress, spec)
            result = run_one(spec, nodes, workload, progress)
            if on_result:
                on_result(result)
            results.append(result)
        return results
    return run_in_workers(functools.partial(_run_spec, nodes, workload), specs, jobs, on_result)


def _run_spec(
    nodes: Sequence[NodeSpec], workload: Sequence[PodRequest], spec: RunSpec
) -> RunResult:
    """:func:`run_one` without progress (a worker process's task)."""
    return run_one(spec, nodes, workload)


def _bind_progress(
    callback: Callable[[RunSpec, int, int], None], spec: RunSpec
) -> ProgressCallback:
    def progress(done: int, total: int) -> None:
        callback(spec, done, total)

    return progress
