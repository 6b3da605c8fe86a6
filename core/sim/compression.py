"""Time compression for replays: raise a trace's contention, keep its pattern.

Production traces are often recorded on clusters far larger than their busy
periods need (openb's ``default`` trace asks for under 15 % of its GPUs even at
its busiest moment), so a faithful time replay never meets contention.
Compression divides every gap between arrivals by one factor and keeps every
pod's duration: the arrival order, the bursts and the relative gaps stay, as do
each pod's shape and lifetime, while the demand that overlaps in time grows.

The target is the *peak load*: the most GPU requested at any one moment, as a
share of the cluster's GPU capacity (departures before arrivals at equal times,
as in the simulator). The factor for a target is found by bisection on its
logarithm; peak load does not strictly grow with the factor for every trace, so
the result is the smallest factor found that reaches the target.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.types import PodRequest

MAX_FACTOR = 1e9


def _creation_times(pods: Sequence[PodRequest]) -> list[float]:
    times = []
    for pod in pods:
        if pod.creation_time_s is None:
            raise InputError(f"pod '{pod.name}' has no creation time; compression needs one")
        times.append(pod.creation_time_s)
    if not times:
        raise InputError("the workload has no pods")
    return times


def peak_load(pods: Sequence[PodRequest], gpu_capacity_milli: int) -> float:
    """The most GPU requested at once, as a share of ``gpu_capacity_milli``."""
    if gpu_capacity_milli <= 0:
        raise InputError("peak load needs a cluster with GPUs")
    starts = np.array(_creation_times(pods))
    ends = np.array([np.inf if p.deletion_time_s is None else p.deletion_time_s for p in pods])
    gpu = np.array([p.total_gpu_milli for p in pods], dtype=np.float64)
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([gpu, -gpu])
    # Departures (negative deltas) first at equal times.
    order = np.lexsort((deltas, times))
    return float(np.cumsum(deltas[order]).max(initial=0.0)) / gpu_capacity_milli


def compress_arrivals(pods: Sequence[PodRequest], factor: float) -> list[PodRequest]:
    """Every arrival gap divided by ``factor``; every duration kept."""
    if factor <= 0:
        raise InputError(f"the compression factor must be positive, got {factor}")
    first = min(_creation_times(pods))
    compressed = []
    for pod in pods:
        assert pod.creation_time_s is not None
        start = first + (pod.creation_time_s - first) / factor
        end = (
            None
            if pod.deletion_time_s is None
            else start + (pod.deletion_time_s - pod.creation_time_s)
        )
        compressed.append(pod.model_copy(update={"creation_time_s": start, "deletion_time_s": end}))
    return compressed


def compress_to_peak_load(
    pods: Sequence[PodRequest], gpu_capacity_milli: int, target: float
) -> tuple[list[PodRequest], float]:
    """Compressed until the peak load reaches ``target``; also the factor used.

    Raises when even arrivals at one instant stay below the target (the trace
    does not hold enough GPU demand for it).
    """
    if target <= 0:
        raise InputError(f"the target peak load must be positive, got {target}")
    if peak_load(pods, gpu_capacity_milli) >= target:
        return list(pods), 1.0
    ceiling = peak_load(compress_arrivals(pods, MAX_FACTOR), gpu_capacity_milli)
    if ceiling < target:
        raise InputError(
            f"the trace peaks at {ceiling:.2f} × GPU capacity even with every arrival "
            f"together; it cannot reach {target:.2f}"
        )
    low, high = 0.0, float(np.log(MAX_FACTOR))
    for _ in range(60):
        middle = (low + high) / 2
        if peak_load(compress_arrivals(pods, float(np.exp(middle))), gpu_capacity_milli) >= target:
            high = middle
        else:
            low = middle
    factor = float(np.exp(high))
    return compress_arrivals(pods, factor), factor
