"""The phase search of checkpoint staggering: exact for the count, local for the bytes.

Used by :func:`~kubesage.adapters.flink.stagger.plan_stagger` for unequal intervals
(equal intervals have a closed-form optimum there) and to lower the peak bytes of any
plan. Everything works on the planning grid: a job is its period and checkpoint
length in slots and its bytes per checkpoint, and a phase is a slot.

:class:`PhaseLayout` holds the load over the horizon and evaluates all phases of one
job at once (numpy): the peak the load would reach with that job at each phase.

Count: :func:`branch_and_bound` is an exact depth-first branch and bound over the grid
phases (the first job of the order fixed at phase 0: shifting every phase by the same
amount changes nothing). Jobs are placed in order of load ``d_i / T_i``, each one's
phases visited best first; a branch stops when it cannot beat the best plan so far
(which starts as :func:`greedy_phases`), and the whole search stops as soon as a plan
meets the lower bound or ``node_budget`` search nodes were visited. It reports whether
it finished: only then is the plan proven optimal on the grid.

Bytes: :func:`improve_bytes` moves each job in turn to its phase of least peak bytes
that keeps the peak count, until nothing improves (at most ``MAX_BYTES_ROUNDS``
rounds); it is not proven optimal.

Overlap: where collisions cannot be avoided, many phases give the same peaks (every
phase, when two checkpoints are longer than the intervals' common divisor), and the
smallest would start the jobs together. :func:`spread_overlap` moves each job in turn
to the phase of least overlap time (slots it is in flight beside another job) among
those that keep both peaks, the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.core.arrays import BoolArray, FloatArray, IntArray

MAX_BYTES_ROUNDS = 6


class PhaseLayout:
    """Load profiles over the horizon; evaluates one job's every phase at once (numpy)."""

    def __init__(
        self, periods: Sequence[int], lengths: Sequence[int], weights: FloatArray, horizon: int
    ) -> None:
        self.periods = list(periods)
        self.lengths = list(lengths)
        self.weights = weights
        self.horizon = horizon
        self._time = np.arange(horizon, dtype=np.int64)

    def mask(self, job: int, phase: int) -> BoolArray:
        return bool_mask(self._time, phase, self.periods[job], self.lengths[job])

    def profiles(self, phases: Sequence[int | None]) -> tuple[IntArray, FloatArray]:
        count = np.zeros(self.horizon, dtype=np.int64)
        load = np.zeros(self.horizon, dtype=np.float64)
        for job, phase in enumerate(phases):
            if phase is not None:
                mask = self.mask(job, phase)
                count += mask
                load += self.weights[job] * mask
        return count, load

    def peaks(self, phases: Sequence[int]) -> tuple[int, float]:
        count, load = self.profiles(phases)
        return int(count.max()), float(load.max())

    def candidate_overlaps(self, job: int, profile: FloatArray) -> FloatArray:
        """Slots job ``job`` would be in flight beside ``profile``'s jobs (counted once
        per other job in flight), at each phase ``0 … T-1``."""
        period, length = self.periods[job], self.lengths[job]
        padded = np.zeros(-(-self.horizon // period) * period, dtype=np.float64)
        padded[: self.horizon] = profile
        column_sum = padded.reshape(-1, period).sum(axis=0)
        return circular_window_sum(column_sum, length)

    def candidate_peaks(self, job: int, profile: FloatArray, weight: float) -> FloatArray:
        """Peak of ``profile`` plus job ``job`` at each phase ``0 … T-1``."""
        period, length = self.periods[job], self.lengths[job]
        padded = np.zeros(-(-self.horizon // period) * period, dtype=np.float64)
        padded[: self.horizon] = profile
        column_max = padded.reshape(-1, period).max(axis=0)
        inside = circular_window_max(column_max, length) + weight
        if length == period:
            return inside
        outside = np.roll(circular_window_max(column_max, period - length), -length)
        return np.maximum(inside, outside)


def bool_mask(time: IntArray, phase: int, period: int, length: int) -> BoolArray:
    """True where a job with that phase, period and checkpoint length is in flight."""
    result: BoolArray = (time - phase) % period < length
    return result


def circular_window_max(values: FloatArray, width: int) -> FloatArray:
    """``out[s] = max(values[(s + j) % n] for j < width)``, by doubling (O(n log width))."""
    n = len(values)
    if not 1 <= width <= n:
        raise StaggerInputError(f"window width {width} outside [1, {n}]")
    doubled = np.concatenate([values, values])
    span, level = 1, doubled
    while span * 2 <= width:
        level = np.maximum(level[:-span], level[span:])
        span *= 2
    # Two overlapping power-of-two windows cover any width (sparse-table query).
    result: FloatArray = np.maximum(level[:n], level[width - span : width - span + n])
    return result


def circular_window_sum(values: FloatArray, width: int) -> FloatArray:
    """``out[s] = sum(values[(s + j) % n] for j < width)`` (prefix sums)."""
    n = len(values)
    if not 1 <= width <= n:
        raise StaggerInputError(f"window width {width} outside [1, {n}]")
    prefix = np.concatenate([[0.0], np.cumsum(np.concatenate([values, values]))])
    result: FloatArray = prefix[width : width + n] - prefix[:n]
    return result


def branch_and_bound(layout: PhaseLayout, node_budget: int, lower: int) -> tuple[list[int], bool]:
    """Phases of least peak count, and whether the search finished within the budget.

    ``lower`` is a lower bound on the peak count: a plan that meets it ends the search.
    """
    jobs = len(layout.periods)
    order = sorted(range(jobs), key=lambda j: (-layout.lengths[j] / layout.periods[j], j))
    best_phases = greedy_phases(layout, order)
    best = layout.peaks(best_phases)[0]
    nodes = 0
    phases: list[int | None] = [None] * jobs
    profile = np.zeros(layout.horizon, dtype=np.float64)

    def search(depth: int, profile: FloatArray, current: int) -> bool:
        nonlocal best, best_phases, nodes
        if best <= lower:
            return True
        if depth == jobs:
            best, best_phases = current, [p if p is not None else 0 for p in phases]
            return True
        job = order[depth]
        peaks = layout.candidate_peaks(job, profile, 1.0) if depth else np.array([current + 1.0])
        for phase in np.argsort(peaks, kind="stable"):
            if peaks[phase] >= best:
                break
            nodes += 1
            if nodes > node_budget:
                return False
            phases[job] = int(phase)
            if not search(depth + 1, profile + layout.mask(job, int(phase)), int(peaks[phase])):
                return False
            phases[job] = None
        return True

    finished = search(0, profile, 0)
    return best_phases, finished


def greedy_phases(layout: PhaseLayout, order: Sequence[int]) -> list[int]:
    """Each job, in ``order``, at its phase of least resulting peak count (smallest phase)."""
    phases: list[int | None] = [None] * len(layout.periods)
    profile = np.zeros(layout.horizon, dtype=np.float64)
    for job in order:
        phase = int(np.argmin(layout.candidate_peaks(job, profile, 1.0)))
        phases[job] = phase
        profile += layout.mask(job, phase)
    return [p if p is not None else 0 for p in phases]


def improve_bytes(layout: PhaseLayout, phases: list[int]) -> list[int]:
    """Move jobs one at a time to lower the peak bytes without raising the peak count."""
    return _one_job_at_a_time(layout, phases, by_overlap=False)


def spread_overlap(layout: PhaseLayout, phases: list[int]) -> list[int]:
    """Move jobs one at a time to lower the total overlap time, keeping both peaks."""
    return _one_job_at_a_time(layout, phases, by_overlap=True)


def _one_job_at_a_time(layout: PhaseLayout, phases: list[int], *, by_overlap: bool) -> list[int]:
    """The local search of :func:`improve_bytes` and :func:`spread_overlap`: each job in
    turn goes to its allowed phase of least score, until no move lowers it."""
    phases = list(phases)
    target_count, best_bytes = layout.peaks(phases)
    for _ in range(MAX_BYTES_ROUNDS):
        improved = False
        for job in range(len(phases)):
            others: list[int | None] = [p if j != job else None for j, p in enumerate(phases)]
            count, load = layout.profiles(others)
            counts = layout.candidate_peaks(job, count.astype(np.float64), 1.0)
            loads = layout.candidate_peaks(job, load, float(layout.weights[job]))
            if by_overlap:  # keep both peaks; lower the time beside other jobs
                overlaps = layout.candidate_overlaps(job, count.astype(np.float64))
                keeps = (counts <= target_count) & (loads <= best_bytes + 1e-9)
                allowed, to_beat = np.where(keeps, overlaps, np.inf), float(overlaps[phases[job]])
            else:  # keep the peak count; lower the peak bytes
                allowed, to_beat = np.where(counts <= target_count, loads, np.inf), best_bytes
            phase = int(np.argmin(allowed))
            if allowed[phase] < to_beat - 1e-9:
                phases[job] = phase
                if not by_overlap:
                    best_bytes = float(allowed[phase])
                improved = True
        if not improved:
            break
    return phases
