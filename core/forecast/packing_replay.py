"""Replay pods' GPU duty cycle and memory on a GPU pool packed by their reservations.

Every ``interval`` steps (a *decision*) each pod present gets a reservation per
resource — the peak it is expected to reach during the interval — and the pods are
packed onto GPUs by :func:`kubesage.core.forecast.packing.pack` (sum of reserved
duty ≤ 100 %, sum of reserved memory ≤ the GPU's memory). The interval then plays
out on the pods' true usage. Policies differ only by their reservations
(``reservations[d, n, r]`` for decision ``d``, pod ``n``, resource ``r``):

- :func:`whole_gpu` — every pod a GPU to itself (what requests imply);
- :func:`history_peak` — each pod's peak over everything seen before the decision;
- :func:`oracle` — the true peak of the coming interval (the bound: never overloads);
- a forecaster's upper-quantile peak (:mod:`kubesage.core.forecast.quantile`).

Missing data, explicitly:

- a pod is *present* in an interval when it reported any metric in one of its steps
  (the scheduler places pods when they arrive; the replay moves arrivals to the
  interval's start); absent pods are not placed and hold no GPU;
- a pod's true usage at a step where it is alive but one of the two metrics has no
  sample is its previous sample of that metric (carried forward); 0 when it is not
  alive or never reported it;
- a reservation of NaN — the pod had no sample in the interval before the decision,
  so nothing current is known — keeps the pod's previous reservation, or a whole GPU
  for a pod never reserved before;
- reservations are clipped to ``[0, capacity]``: no pod can use more than a GPU.

Figures: GPU-hours (GPUs holding a pod, per step), overload minutes (per GPU and
step, summed true duty > 100 % or summed true memory > capacity, counted in the
step's minutes), and migrations (a pod present at consecutive decisions on another
GPU) per pod-hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.packing import UNPLACED, pack
from kubesage.core.forecast.panel import MetricPanel

DUTY_METRIC = "gpu_duty_cycle"
MEMORY_METRIC = "gpu_memory_used_bytes"
RESOURCES = (DUTY_METRIC, MEMORY_METRIC)
DUTY_CAPACITY = 100.0
"""Percent of one GPU's time."""


@dataclass(frozen=True)
class Usage:
    """The pods' true usage ``values[s, n, r]`` of ``RESOURCES`` and when they are alive."""

    values: FloatArray
    alive: BoolArray
    observed: BoolArray
    """``observed[s, n, r]``: a real sample (not carried forward)."""
    step_s: float


@dataclass(frozen=True)
class ReplayResult:
    gpu_hours: float
    overload_minutes: float
    migrations: int
    pod_hours: float
    decisions: int

    @property
    def migrations_per_pod_hour(self) -> float:
        return self.migrations / self.pod_hours if self.pod_hours > 0 else 0.0


def usage_of(panel: MetricPanel, resources: tuple[str, ...] = RESOURCES) -> Usage:
    """True usage of ``resources`` (carried forward over missing cells of live pods)."""
    missing = [r for r in resources if r not in panel.metrics]
    if missing:
        raise InputError(f"the data has no {', '.join(missing)} metric: {', '.join(panel.metrics)}")
    index = [panel.metrics.index(r) for r in resources]
    values = panel.values[:, :, index]
    observed = panel.mask[:, :, index]
    filled = np.zeros_like(values)
    last = np.zeros(values.shape[1:])
    for s in range(panel.steps):
        last = np.where(observed[s], values[s], last)
        filled[s] = np.where(panel.alive[s][:, None], last, 0.0)
    return Usage(
        values=filled, alive=panel.alive.copy(), observed=observed.copy(), step_s=panel.step_s
    )


def decision_steps(start: int, end: int, interval: int) -> IntArray:
    """The first step of every interval from ``start`` to ``end`` (exclusive)."""
    if interval < 1 or not 0 <= start < end:
        raise InputError(f"need interval ≥ 1 and 0 ≤ start < end; got {interval}, {start}, {end}")
    return np.arange(start, end, interval, dtype=np.int64)


def present_in(usage: Usage, origins: IntArray, interval: int) -> BoolArray:
    """``[d, n]``: pod n reports in some step of decision d's interval."""
    steps = usage.alive.shape[0]
    return np.stack([usage.alive[o : min(o + interval, steps)].any(axis=0) for o in origins])


def whole_gpu(usage: Usage, origins: IntArray, capacity: FloatArray) -> FloatArray:
    """Every pod reserves a whole GPU."""
    return np.broadcast_to(capacity, (origins.size, usage.values.shape[1], capacity.size)).copy()


def history_peak(usage: Usage, origins: IntArray, interval: int) -> FloatArray:
    """Each pod's peak over its samples before the decision (NaN: no recent sample)."""
    sampled = np.where(usage.observed, usage.values, -np.inf)
    running = np.maximum.accumulate(sampled, axis=0)
    out = np.stack(
        [running[o - 1] if o > 0 else np.full(running.shape[1:], -np.inf) for o in origins]
    )
    out = np.where(np.isfinite(out), out, np.nan)
    return np.where(recently_sampled(usage, origins, interval), out, np.nan)


def oracle(usage: Usage, origins: IntArray, interval: int) -> FloatArray:
    """The true peak of each pod over the coming interval."""
    steps = usage.values.shape[0]
    return np.stack([usage.values[o : min(o + interval, steps)].max(axis=0) for o in origins])


class PeakForecaster(Protocol):
    """What :func:`forecast_peaks` reads: an upper forecast of each series' peak over
    the interval after each origin, in the panel's units (e.g. a
    :class:`~kubesage.core.forecast.quantile.QuantileForecaster`)."""

    def peaks(self, panel: MetricPanel, origins: np.ndarray) -> FloatArray: ...


def forecast_peaks(
    forecaster: PeakForecaster,
    panel: MetricPanel,
    usage: Usage,
    origins: IntArray,
    interval: int,
    resources: tuple[str, ...] = RESOURCES,
) -> FloatArray:
    """A forecaster's reservations: its peak forecast of each resource, NaN for a pod
    without a sample in the interval before the decision."""
    peaks = forecaster.peaks(panel, origins)[:, :, [panel.metrics.index(r) for r in resources]]
    return np.where(recently_sampled(usage, origins, interval), peaks, np.nan)


def recently_sampled(usage: Usage, origins: IntArray, interval: int) -> BoolArray:
    """``[d, n, r]``: a real sample in the ``interval`` steps before the decision."""
    return np.stack(
        [
            usage.observed[max(0, o - interval) : o].any(axis=0)
            if o > 0
            else np.zeros(usage.observed.shape[1:], dtype=bool)
            for o in origins
        ]
    )


def replay(
    usage: Usage,
    origins: IntArray,
    interval: int,
    reservations: FloatArray,
    capacity: FloatArray,
) -> ReplayResult:
    """Pack at every decision by ``reservations`` and play each interval out on the truth."""
    steps, pods = usage.values.shape[:2]
    if reservations.shape != (origins.size, pods, capacity.size):
        raise InputError(
            f"reservations {reservations.shape} do not match "
            f"({origins.size} decisions, {pods} pods, {capacity.size} resources)"
        )
    present = present_in(usage, origins, interval)
    last = np.full((pods, capacity.size), np.nan)
    gpu = np.full(pods, UNPLACED, dtype=np.int64)
    gpu_steps = overloaded_steps = pod_steps = 0
    migrations = 0
    for d, origin in enumerate(origins):
        wanted = reservations[d]
        known = np.where(np.isnan(wanted), last, wanted)
        demand = np.clip(np.where(np.isnan(known), capacity[None], known), 0.0, capacity[None])
        packing = pack(demand, capacity, present[d], np.where(present[d], gpu, UNPLACED))
        migrations += packing.moved
        gpu = packing.gpu
        last = np.where(present[d][:, None], demand, last)
        span = slice(int(origin), min(int(origin) + interval, steps))
        length = span.stop - span.start
        used = np.unique(gpu[gpu != UNPLACED])
        gpu_steps += used.size * length
        pod_steps += int(present[d].sum()) * length
        for g in used:
            members = gpu == g
            load = usage.values[span][:, members].sum(axis=1)  # (steps, resources)
            overloaded_steps += int(np.any(load > capacity[None] * (1 + 1e-9), axis=1).sum())
    hours = usage.step_s / 3600.0
    return ReplayResult(
        gpu_hours=gpu_steps * hours,
        overload_minutes=overloaded_steps * usage.step_s / 60.0,
        migrations=migrations,
        pod_hours=pod_steps * hours,
        decisions=int(origins.size),
    )


def distance_to_oracle(
    result: ReplayResult, oracle_result: ReplayResult, overload_scale: float
) -> float:
    """``|GPU-hours − oracle's| / oracle's + |overload − oracle's| / max(overload_scale, 1)``
    (``overload_scale``: history-peak packing's overload minutes)."""
    gpu = abs(result.gpu_hours - oracle_result.gpu_hours) / max(oracle_result.gpu_hours, 1e-9)
    overload = abs(result.overload_minutes - oracle_result.overload_minutes)
    return gpu + overload / max(overload_scale, 1.0)
