"""Utilisation profiles for the scenario's inference pods: GPU duty cycle and GPU
memory over time, replayed from the GenAI serving trace or drawn like it.

With the trace (``<data_dir>/genai``, Alibaba cluster-trace-v2026-GenAI, ~57 s
sampling) every pod that reported its GPU duty cycle and GPU memory becomes one
profile. Missing samples read as 0 % utilisation (a pod that reported nothing did no
work we can count) and as the last memory value seen (memory stays allocated between
samples; before a pod's first sample, its first value).

Without the trace (an installed package, no data), :func:`synthetic_profiles` draws
profiles from statistics measured once on the trace (:data:`TRACE_STATISTICS`): an
on/off Markov chain for the duty cycle with the trace's transition rates, non-zero
duty from the trace's quantiles, and each pod's memory level and spread from the
trace's. ``UtilisationProfiles.source`` says which one a run used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.forecast.metric_rows import metric_files, metric_name
from kubesage.core.forecast.panel import read_panel
from kubesage.core.paths import shared_trace_dir
from kubesage.core.scenario.model import UtilisationProfiles

DUTY_METRIC = "gpu_duty_cycle"
"""``pod_gpu_duty_cycle_anon.csv.gz``: GPU utilisation, percent."""
MEMORY_METRIC = "gpu_memory_used_bytes"
"""``pod_gpu_memory_used_bytes_anon.csv.gz``: GPU memory used, bytes."""

GIB = float(2**30)


@dataclass(frozen=True)
class TraceStatistics:
    """What the synthetic profiles reproduce, measured on the GenAI trace's first 16
    hours (the ``genai/`` files of the shared data, read and filled as
    :func:`load_profiles` does: 124 pods × 1,011 steps of 57 s)."""

    step_s: float
    steps: int
    pods: int
    p_on: float
    """P(duty > 0 at step t+1 | duty = 0 at t), pooled over pods and steps."""
    p_off: float
    """P(duty = 0 at step t+1 | duty > 0 at t)."""
    zero_share: float
    """Share of (pod, step) cells at 0 % (the chain's stationary share is
    p_off / (p_on + p_off))."""
    duty_quantiles: tuple[tuple[float, float], ...]
    """(quantile, percent) of the non-zero duty samples."""
    nonzero_duty_mean: float
    memory_level_quantiles_gib: tuple[tuple[float, float], ...]
    """(quantile, GiB) of the pods' median GPU memory."""
    memory_cv: float
    """Median over pods of a pod's memory standard deviation / mean."""


TRACE_STATISTICS = TraceStatistics(
    step_s=57.0,
    steps=1011,
    pods=124,
    p_on=0.1554,
    p_off=0.2364,
    zero_share=0.6039,
    duty_quantiles=(
        (0.0, 0.0333),
        (0.01, 0.1333),
        (0.05, 0.4667),
        (0.10, 1.2),
        (0.25, 9.667),
        (0.50, 18.53),
        (0.75, 25.8),
        (0.90, 37.6),
        (0.95, 59.2),
        (0.99, 92.47),
        (1.0, 99.67),
    ),
    nonzero_duty_mean=20.88,
    memory_level_quantiles_gib=(
        (0.0, 0.0),
        (0.10, 17.29),
        (0.25, 21.94),
        (0.50, 22.13),
        (0.75, 22.56),
        (0.90, 28.93),
        (1.0, 31.91),
    ),
    memory_cv=0.182,
)
"""Measured once on the shared ``genai/`` files (see docs/scenario.md); the trace
itself is never copied into the project."""


def default_data_dir() -> Path | None:
    """Where the shared traces are when no ``--data-dir`` is given: the folder holding
    the shared ``genai/`` trace (:func:`kubesage.core.paths.shared_trace_dir`); None
    (synthetic profiles) when there is none."""
    genai = shared_trace_dir("genai")
    return genai.parent if genai is not None else None


def load_profiles(data_dir: Path | None, *, seed: int = 0) -> UtilisationProfiles:
    """The GenAI trace's profiles from ``<data_dir>/genai``; synthetic ones (drawn with
    ``seed``) when ``data_dir`` is None or holds no duty-cycle and memory files."""
    files = trace_files(data_dir)
    if files is None:
        return synthetic_profiles(seed)
    # Just these two: read_panel keeps the pods present in every metric it reads, and the
    # other GenAI files (container memory, QPS) would drop pods that have both GPU series.
    directory = files[0].parent
    panel = read_panel(directory, absent_as_zero=(), metrics=[metric_name(p) for p in files])
    duty_index = panel.metrics.index(DUTY_METRIC)
    memory_index = panel.metrics.index(MEMORY_METRIC)
    duty_seen = panel.mask[:, :, duty_index]
    memory_seen = panel.mask[:, :, memory_index]
    keep = duty_seen.any(axis=0) & memory_seen.any(axis=0)
    duty = np.where(duty_seen, panel.values[:, :, duty_index], 0.0)[:, keep]
    memory = _carry_forward(panel.values[:, :, memory_index], memory_seen)[:, keep]
    return UtilisationProfiles(
        duty_pct=np.clip(duty, 0.0, 100.0),
        memory_bytes=np.maximum(memory, 0.0),
        step_s=panel.step_s,
        source=f"genai trace ({directory}, {int(keep.sum())} pods)",
    )


def synthetic_profiles(
    seed: int,
    *,
    count: int = TRACE_STATISTICS.pods,
    steps: int = TRACE_STATISTICS.steps,
    stats: TraceStatistics = TRACE_STATISTICS,
) -> UtilisationProfiles:
    """``count`` profiles of ``steps`` steps drawn from ``stats`` (the GenAI trace's)."""
    if count < 1 or steps < 2:
        raise ValueError(f"need at least one profile of two steps, got {count} × {steps}")
    rng = np.random.default_rng(seed)
    stationary_zero = stats.p_off / (stats.p_on + stats.p_off)
    on = np.empty((steps, count), dtype=bool)
    on[0] = rng.random(count) >= stationary_zero
    flips = rng.random((steps, count))
    for t in range(1, steps):
        on[t] = np.where(on[t - 1], flips[t] >= stats.p_off, flips[t] < stats.p_on)
    duty = np.where(on, _from_quantiles(rng, stats.duty_quantiles, (steps, count)), 0.0)
    levels = _from_quantiles(rng, stats.memory_level_quantiles_gib, (count,)) * GIB
    noise = rng.normal(1.0, stats.memory_cv, (steps, count))
    memory = levels[None, :] * np.clip(noise, 0.1, None)
    source = (
        f"synthetic (seed {seed}; GenAI trace statistics: {stats.zero_share:.0%} of "
        f"samples idle, non-zero duty median {_median(stats.duty_quantiles):.1f} % and "
        f"mean {stats.nonzero_duty_mean:.1f} %, on/off rates {stats.p_on:.3f}/"
        f"{stats.p_off:.3f} per {stats.step_s:.0f} s step, memory median "
        f"{_median(stats.memory_level_quantiles_gib):.1f} GiB)"
    )
    return UtilisationProfiles(
        duty_pct=np.asarray(np.clip(duty, 0.0, 100.0), dtype=np.float64),
        memory_bytes=np.asarray(memory, dtype=np.float64),
        step_s=stats.step_s,
        source=source,
    )


def trace_files(data_dir: Path | None) -> tuple[Path, Path] | None:
    """The duty-cycle and memory files under ``<data_dir>/genai``, if both are there."""
    if data_dir is None:
        return None
    directory = Path(data_dir) / "genai"
    if not directory.is_dir():
        return None
    found: dict[str, Path] = {}
    for path in metric_files(directory):
        found.setdefault(metric_name(path), path)
    if DUTY_METRIC not in found or MEMORY_METRIC not in found:
        return None
    return found[DUTY_METRIC], found[MEMORY_METRIC]


def _carry_forward(values: FloatArray, seen: BoolArray) -> FloatArray:
    """Each column's last seen value at every step; its first seen value before that."""
    steps = values.shape[0]
    index = np.where(seen, np.arange(steps)[:, None], -1)
    np.maximum.accumulate(index, axis=0, out=index)
    first = np.argmax(seen, axis=0)
    index = np.where(index < 0, first[None, :], index)
    filled = np.take_along_axis(values, index, axis=0)
    return np.asarray(filled, dtype=np.float64)


def _from_quantiles(
    rng: np.random.Generator, quantiles: tuple[tuple[float, float], ...], shape: tuple[int, ...]
) -> FloatArray:
    """Draws whose distribution interpolates the (quantile, value) table linearly."""
    probabilities = np.array([q for q, _ in quantiles])
    values = np.array([v for _, v in quantiles])
    return np.asarray(np.interp(rng.random(shape), probabilities, values), dtype=np.float64)


def _median(quantiles: tuple[tuple[float, float], ...]) -> float:
    return float(np.interp(0.5, [q for q, _ in quantiles], [v for _, v in quantiles]))
