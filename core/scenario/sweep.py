"""Many runs of the mixed-workload scenario: seeds × variants (× loads), in this
process, in local processes, or on a Ray cluster.

A run is a :class:`ScenarioTask` (settings, variant, seed): plain, frozen, picklable
data, so the same task runs anywhere :mod:`kubesage` is installed.
:func:`run_task` builds the task's arrivals from the settings and the seed and replays
them with :func:`~kubesage.core.scenario.runner.run_variant`; every variant of one
seed sees the same arrivals, wherever it runs, because the workload depends only on
(settings, seed).

:func:`run_tasks` runs tasks and returns their results in task order:

- ``jobs == 1`` and no ``ray_address``: one after the other, in this process;
- ``jobs > 1``: a pool of ``jobs`` spawned processes on this machine;
- ``ray_address``: one Ray task per run on the cluster at that address (``"local"``
  starts a Ray instance on this machine with ``jobs`` CPUs, the machine's when ``jobs``
  is 1). The cluster's workers need this version of kubesage installed.

:func:`run_scenario` runs the variants over the seeds and fills in each run's
``training_throughput_gain_pct`` against the ``k8s-default`` run of the same seed.
The gain needs that run, so ``k8s-default`` is always run; when the caller's variants
leave it out it is run for the gain only and left out of the result.
:func:`sweep` does the same at several loads, all runs in one batch so the workers
stay busy across loads.

Results are deterministic: a task's run depends only on the task, so the figures do
not depend on ``jobs`` or on where the tasks ran.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.scenario.cluster import scenario_topology
from kubesage.core.scenario.model import Arrival, UtilisationProfiles
from kubesage.core.scenario.profiles import load_profiles
from kubesage.core.scenario.result import (
    VARIANTS,
    ScenarioSettings,
    VariantRun,
    fill_throughput_gain,
)
from kubesage.core.scenario.runner import run_variant
from kubesage.core.scenario.workload import WorkloadSettings, generate_workload
from kubesage.core.worker_pool import run_in_workers

BASELINE = "k8s-default"
"""The variant every throughput gain is measured against."""

ResultCallback = Callable[[VariantRun], None]
"""Called in the caller's process with each run as it finishes (in any order, before
the throughput gain is filled in)."""


@dataclass(frozen=True)
class ScenarioTask:
    """One variant of the scenario on one seed."""

    settings: ScenarioSettings
    variant: str
    seed: int


@functools.cache
def _profiles(data_dir: str | None) -> UtilisationProfiles:
    """The utilisation profiles, loaded once per process and data directory."""
    return load_profiles(Path(data_dir) if data_dir is not None else None)


@functools.lru_cache(maxsize=4)
def _arrivals(
    hours: float, load: float, capacity_gpus: int, data_dir: str | None, seed: int
) -> tuple[Arrival, ...]:
    """The arrivals of one scenario and seed: every variant of a seed run in this process
    replays them, so they are generated once (a tuple: shared, never changed)."""
    workload = WorkloadSettings(hours=hours, load=load, capacity_gpus=capacity_gpus)
    return tuple(generate_workload(workload, _profiles(data_dir), seed))


def run_task(task: ScenarioTask) -> VariantRun:
    """Run one task (see the module docstring); ``training_throughput_gain_pct`` is left
    for :func:`run_scenario`, which has the seed's ``k8s-default`` run."""
    settings = task.settings
    drtg = scenario_topology(settings.gpu_nodes)
    capacity = sum(node.gpu_count for node in drtg.node_specs())
    arrivals = _arrivals(settings.hours, settings.load, capacity, settings.data_dir, task.seed)
    profiles = _profiles(settings.data_dir)
    return run_variant(settings, task.variant, task.seed, arrivals, profiles, drtg=drtg)


def run_tasks(
    tasks: Sequence[ScenarioTask],
    *,
    jobs: int = 1,
    ray_address: str | None = None,
    on_result: ResultCallback | None = None,
) -> list[VariantRun]:
    """Run every task; results come back in the order of ``tasks``."""
    if jobs < 1:
        raise InputError(f"jobs must be at least 1, not {jobs}")
    if ray_address is not None:
        return _run_on_ray(tasks, ray_address, jobs, on_result)
    if jobs == 1 or len(tasks) <= 1:
        results = []
        for task in tasks:
            result = run_task(task)
            if on_result is not None:
                on_result(result)
            results.append(result)
        return results
    return run_in_workers(run_task, tasks, jobs, on_result)


def _start_ray(address: str, jobs: int) -> tuple[Any, bool]:
    """Import Ray and connect (``"local"``: start one here); return the module and
    whether this call started it (and so shuts it down). DependencyError when Ray is
    missing or cannot connect."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray
    except ImportError as exc:
        raise DependencyError(
            f"--ray-address needs Ray, which is not installed ({exc}); "
            "leave it out to run in local processes"
        ) from exc
    if ray.is_initialized():
        return ray, False
    if address != "local":
        _check_reachable(address)
    try:
        if address == "local":
            ray.init(
                num_cpus=jobs if jobs > 1 else (os.cpu_count() or 1),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        else:
            ray.init(address=address, log_to_driver=False)
    # Ray reports an unreachable or malformed address as ConnectionError, RuntimeError
    # or ValueError depending on where it fails; all of them mean "no cluster there"
    except Exception as exc:
        raise DependencyError(f"cannot connect to Ray at '{address}': {exc}") from exc
    return ray, True


def _check_reachable(address: str) -> None:
    """DependencyError unless ``host:port`` (or ``ray://host:port``) accepts a connection:
    ``ray.init`` keeps retrying an address nobody answers for minutes. Other forms
    (``auto``) are Ray's to resolve."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdecimal():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5.0):
            pass
    except OSError as exc:
        raise DependencyError(f"cannot connect to Ray at '{address}': {exc}") from exc


def _run_on_ray(
    tasks: Sequence[ScenarioTask],
    address: str,
    jobs: int,
    on_result: ResultCallback | None,
) -> list[VariantRun]:
    """One Ray task per run; results in task order, ``on_result`` as each finishes."""
    if not tasks:
        return []
    ray, started = _start_ray(address, jobs)
    try:
        remote = ray.remote(num_cpus=1)(run_task)
        refs = [remote.remote(task) for task in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        ordered: dict[int, VariantRun] = {}
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for ref in done:
                result: VariantRun = ray.get(ref)
                ordered[index[ref]] = result
                if on_result is not None:
                    on_result(result)
        return [ordered[i] for i in range(len(tasks))]
    finally:
        if started:
            ray.shutdown()


T = TypeVar("T")


def _unique(values: Iterable[T]) -> list[T]:
    """``values`` without repeats, in first-seen order."""
    return list(dict.fromkeys(values))


def _check(variants: Sequence[str], seeds: Sequence[int]) -> None:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise InputError(f"unknown variant '{unknown[0]}'; known: {', '.join(VARIANTS)}")
    if not variants:
        raise InputError("no variants to run")
    if not seeds:
        raise InputError("no seeds to run")


def sweep(
    settings: ScenarioSettings,
    loads: Sequence[float],
    seeds: Sequence[int],
    variants: Sequence[str] = VARIANTS,
    *,
    jobs: int = 1,
    ray_address: str | None = None,
    on_result: ResultCallback | None = None,
) -> dict[float, dict[str, list[VariantRun]]]:
    """Run ``variants`` over ``seeds`` at each of ``loads`` (``settings`` with its load
    replaced): load → variant → one run per seed, in the order given. Throughput gains
    are filled in against ``k8s-default`` of the same load and seed, which is run even
    when ``variants`` leave it out (and then left out of the result)."""
    loads, seeds, variants = _unique(loads), _unique(seeds), _unique(variants)
    _check(variants, seeds)
    if not loads:
        raise InputError("no loads to run")
    if not all(0.0 < load < float("inf") for load in loads):
        raise InputError(f"loads must be positive fractions of capacity, not {loads}")
    needed = variants if BASELINE in variants else [BASELINE, *variants]
    points = {load: replace(settings, load=load) for load in loads}
    tasks = [
        ScenarioTask(point, variant, seed)
        for point in points.values()
        for seed in seeds
        for variant in needed
    ]
    runs = run_tasks(tasks, jobs=jobs, ray_address=ray_address, on_result=on_result)
    by_seed: dict[tuple[float, int], dict[str, VariantRun]] = {}
    for task, run in zip(tasks, runs, strict=True):
        by_seed.setdefault((task.settings.load, task.seed), {})[task.variant] = run
    for seed_runs in by_seed.values():
        fill_throughput_gain(seed_runs)
    return {
        load: {
            variant: [by_seed[(point.load, seed)][variant] for seed in seeds]
            for variant in variants
        }
        for load, point in points.items()
    }


def run_scenario(
    settings: ScenarioSettings,
    seeds: Sequence[int],
    variants: Sequence[str] = VARIANTS,
    *,
    jobs: int = 1,
    ray_address: str | None = None,
    on_result: ResultCallback | None = None,
) -> dict[str, list[VariantRun]]:
    """Run ``variants`` over ``seeds`` at ``settings.load``: variant → one run per seed,
    throughput gains filled in (see :func:`sweep`)."""
    return sweep(
        settings,
        [settings.load],
        seeds,
        variants,
        jobs=jobs,
        ray_address=ray_address,
        on_result=on_result,
    )[settings.load]
