"""Summaries of a trajectory, extracted the way the FGD paper's analysis does.

Arrived workload and allocation are percentages of cluster GPU capacity. The value
"at X % arrived" is the mean over every event whose arrived workload, rounded to a
whole percent (half to even), equals X; if no event rounds to X, events within
X ± 1 are used; if none, there is no value. It is neither an interpolation nor the
last point before X — the paper's ``merge_alloc_discrete`` script does exactly this.
"""

from __future__ import annotations

import math

import numpy as np

from kubesage.core.arrays import FloatArray


def arrived_percent(arrived_gpu_milli: FloatArray, gpu_capacity_milli: int) -> FloatArray:
    """Arrived GPU request in whole percent of capacity (numpy rounds half to even)."""
    return np.round(arrived_gpu_milli * 100.0 / gpu_capacity_milli)


def value_at(arrived_pct: FloatArray, values: FloatArray, x: float) -> float | None:
    """Mean of ``values`` where ``arrived_pct == x`` (else within ±1); None if nothing is near."""
    exact = arrived_pct == x
    if exact.any():
        return float(values[exact].mean())
    near = np.abs(arrived_pct - x) <= 1
    if near.any():
        return float(values[near].mean())
    return None


def discrete_curve(
    arrived_pct: FloatArray, values: FloatArray, upto: int
) -> tuple[list[int], list[float]]:
    """``value_at`` for every whole percent 0..upto that has one (for plots)."""
    xs: list[int] = []
    ys: list[float] = []
    for x in range(upto + 1):
        y = value_at(arrived_pct, values, float(x))
        if y is not None and math.isfinite(y):
            xs.append(x)
            ys.append(y)
    return xs, ys


def downsample(
    times: FloatArray, values: FloatArray, points: int = 400
) -> tuple[list[float], list[float]]:
    """At most ``points`` evenly spaced samples of a time series (for replay plots)."""
    if times.size <= points:
        return times.tolist(), values.tolist()
    index = np.linspace(0, times.size - 1, points).round().astype(int)
    return times[index].tolist(), values[index].tolist()
