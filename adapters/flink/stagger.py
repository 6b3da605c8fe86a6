"""Checkpoint staggering: phase offsets that keep checkpoints of many jobs apart.

Model. Job ``i`` checkpoints every ``T_i`` (its interval) and a checkpoint stays in
flight for ``d_i`` (its observed duration) while writing ``b_i`` bytes (its observed
checkpoint size). With phase ``φ_i`` its checkpoints occupy the half-open windows
``[φ_i + k·T_i, φ_i + k·T_i + d_i)``, ``k = 0, 1, …``. The pattern repeats every
hyperperiod ``H = lcm(T_i)``. Time is discretised on a grid of ``resolution_ms``;
intervals are rounded to the grid and durations rounded *up* (at least one slot), so
the model never under-counts an overlap.

Objective (exactly). Let ``a_i(t) = 1`` when job ``i`` has a checkpoint in flight at
``t``. The plan chooses integer phases ``φ_i ∈ [0, T_i)`` to

1. minimise the peak concurrent count ``C(φ) = max_t Σ_i a_i(t)`` — the hard
   constraint, since it is the quantity that can be guaranteed optimal; then
2. among phases with that peak count, minimise the peak concurrent checkpoint bytes
   ``B(φ) = max_t Σ_i b_i·a_i(t)`` (what the shared checkpoint storage must absorb at
   once); then
3. lower the total overlap ``Σ_t Σ_{i<j} a_i(t)·a_j(t)`` (time two jobs are in flight
   together: where collisions cannot be avoided, every phase may tie on 1 and 2, and the
   smallest would start the jobs together), then prefer the smallest phases
   (determinism).

Equal intervals (``T_i = T``, ``d_i ≤ T``): the optimum count is
``max(1, ⌈Σ d_i / T⌉)``. Lower bound: over one period the mean of ``Σ_i a_i(t)`` is
``Σ d_i / T``; the peak is at least the mean and an integer. Attainment (McNaughton's
wrap-around rule): lay the windows back to back on the line ``[0, k·T)`` with
``k = ⌈Σ d_i / T⌉`` (any slack ``k·T − Σ d_i`` shared out as gaps between them, which
absorbs jitter in the durations), then wrap the line onto the circle of
circumference ``T``. The windows are disjoint on the line, so each point of the
circle is covered at most once per lap, i.e. at most ``k`` times; and because each
``d_i ≤ T`` no window overlaps its own next occurrence. So the bound is attained,
and ``optimum_concurrent`` is exact.

Unequal intervals: the peak count is found by an exact depth-first branch and bound
over the grid phases (:mod:`~kubesage.adapters.flink.stagger_search`), within a
budget of ``DEFAULT_NODE_BUDGET`` search nodes. When the search finishes, the count is
the exact optimum on the grid; when the budget runs out, the best plan found is kept and
``optimum_concurrent`` is only set if that plan meets the lower bound
``max(1, ⌈Σ d_i / T_i⌉)`` (peak ≥ mean over the hyperperiod). A hyperperiod longer than
``MAX_HORIZON_SLOTS`` is evaluated over its first ``MAX_HORIZON_SLOTS`` slots only
(``exact_horizon`` is then false, and ``optimum_concurrent`` is never set: the jobs may
still meet after those slots).

The bytes step is a local search, also in ``stagger_search`` (each job in turn moved
to its best phase that keeps the peak count, until nothing improves); it is not
proven optimal — its lower bound ``max(max_i b_i, Σ_i b_i·d_i / T_i)`` is reported
beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.stagger_search import (
    PhaseLayout,
    branch_and_bound,
    improve_bytes,
    spread_overlap,
)
from kubesage.core.arrays import FloatArray

DEFAULT_RESOLUTION_MS = 100
MAX_HORIZON_SLOTS = 1 << 20
DEFAULT_NODE_BUDGET = 20_000


@dataclass(frozen=True)
class CheckpointProfile:
    """What the plan needs to know about one job's checkpoints."""

    job_id: str
    interval_ms: int
    """Checkpoint interval (``execution.checkpointing.interval``)."""
    duration_ms: int
    """Observed end-to-end checkpoint duration (e.g. the median of recent checkpoints)."""
    size_bytes: int = 0
    """Observed bytes written per checkpoint (checkpointed data size)."""

    def __post_init__(self) -> None:
        if not self.job_id:
            raise StaggerInputError("checkpoint profile: job_id must not be empty")
        if self.interval_ms <= 0:
            raise StaggerInputError(
                f"job {self.job_id}: interval_ms must be positive, got {self.interval_ms}"
            )
        if self.duration_ms < 0:
            raise StaggerInputError(
                f"job {self.job_id}: duration_ms must not be negative, got {self.duration_ms}"
            )
        if self.size_bytes < 0:
            raise StaggerInputError(
                f"job {self.job_id}: size_bytes must not be negative, got {self.size_bytes}"
            )


@dataclass(frozen=True)
class StaggerPlan:
    """Phase offsets (from a common epoch) and what they achieve in the model."""

    phases_ms: dict[str, int]
    """Job id → offset of its first checkpoint after the epoch, in ms."""
    intervals_ms: dict[str, int]
    durations_ms: dict[str, int]
    """Durations as modelled (rounded up to the grid, capped at the interval)."""
    resolution_ms: int
    horizon_ms: int
    peak_concurrent: int
    peak_bytes: int
    lower_bound_concurrent: int
    lower_bound_bytes: int
    optimum_concurrent: int | None
    """The lowest peak count possible for these intervals and durations; None if unproven."""
    method: str
    """``wrap-around`` (equal intervals), ``branch-and-bound`` (exact) or ``bounded-search``."""
    exact_horizon: bool
    notes: tuple[str, ...] = field(default=())

    def first_trigger_ms(self, job_id: str, after_ms: int) -> int:
        """The first scheduled checkpoint of ``job_id`` at or after ``after_ms`` since the epoch."""
        phase, interval = self.phases_ms[job_id], self.intervals_ms[job_id]
        if after_ms <= phase:
            return phase
        laps = -(-(after_ms - phase) // interval)
        return phase + laps * interval


def optimum_equal_intervals(interval: int, durations: Sequence[int]) -> int:
    """``max(1, ⌈Σ d_i / T⌉)``: the least peak count for equal intervals, each ``d_i ≤ T``."""
    if not durations:
        return 0
    if interval <= 0:
        raise StaggerInputError(f"interval must be positive, got {interval}")
    for duration in durations:
        if not 0 <= duration <= interval:
            raise StaggerInputError(f"duration {duration} is outside [0, interval={interval}]")
    return max(1, -(-sum(durations) // interval))


def lower_bound_concurrent(intervals: Sequence[int], durations: Sequence[int]) -> int:
    """``max(1, ⌈Σ d_i / T_i⌉)`` (peak ≥ mean load over the hyperperiod); 0 without jobs."""
    if not intervals:
        return 0
    mean = sum((d * (math.lcm(*intervals) // t) for t, d in zip(intervals, durations, strict=True)))
    return max(1, -(-mean // math.lcm(*intervals)))


def peak_concurrent(windows: Iterable[tuple[float, float]]) -> int:
    """Most half-open ``[start, end)`` windows in flight at one instant (sweep line).

    Used on measured checkpoint histories: an end and a start at the same instant do
    not overlap.
    """
    events: list[tuple[float, int]] = []
    for start, end in windows:
        if end < start:
            raise StaggerInputError(f"window ends ({end}) before it starts ({start})")
        if end > start:
            events.append((start, 1))
            events.append((end, -1))
    events.sort(key=lambda event: (event[0], event[1]))
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def plan_stagger(
    profiles: Sequence[CheckpointProfile],
    *,
    resolution_ms: int = DEFAULT_RESOLUTION_MS,
    node_budget: int = DEFAULT_NODE_BUDGET,
) -> StaggerPlan:
    """Phases for ``profiles`` under the objective in the module docstring."""
    if resolution_ms <= 0:
        raise StaggerInputError(f"resolution_ms must be positive, got {resolution_ms}")
    ids = [p.job_id for p in profiles]
    if len(set(ids)) != len(ids):
        raise StaggerInputError(f"duplicate job ids in checkpoint profiles: {sorted(ids)}")
    if not profiles:
        return StaggerPlan({}, {}, {}, resolution_ms, 0, 0, 0, 0, 0, 0, "wrap-around", True)
    grid = _Grid.of(profiles, resolution_ms)
    periods, lengths, weights = grid.periods, grid.lengths, grid.weights
    horizon, exact_horizon, notes = grid.horizon, grid.exact_horizon, list(grid.notes)
    lower = lower_bound_concurrent(periods, lengths)
    lower_bytes = math.ceil(
        max(
            float(weights.max()),
            sum(w * d / t for w, d, t in zip(weights, lengths, periods, strict=True)),
        )
    )
    layout = PhaseLayout(periods, lengths, weights, horizon)
    if len(set(periods)) == 1:
        phases = _wrap_around(periods[0], lengths)
        method = "wrap-around"
        optimum: int | None = optimum_equal_intervals(periods[0], lengths)
    else:
        phases, finished = branch_and_bound(layout, node_budget, lower)
        method = "branch-and-bound" if finished and exact_horizon else "bounded-search"
        count = layout.peaks(phases)[0]
        # Over a truncated horizon the count is a peak of the first slots only: no proof.
        optimum = count if exact_horizon and (finished or count == lower) else None
    phases = spread_overlap(layout, improve_bytes(layout, phases))
    return grid.plan(
        layout,
        phases,
        lower_bound_concurrent=lower,
        lower_bound_bytes=lower_bytes,
        optimum_concurrent=optimum,
        method=method,
        exact_horizon=exact_horizon,
        notes=tuple(notes),
    )


def best_phase(
    fixed: Sequence[tuple[CheckpointProfile, int]],
    new: CheckpointProfile,
    *,
    resolution_ms: int = DEFAULT_RESOLUTION_MS,
) -> tuple[int, int, int]:
    """Phase (ms) for ``new`` beside jobs whose phases are fixed, and the peaks it gives.

    Used when one job is added (``kubesage flink submit``): the running jobs keep their
    phases and the new one goes where the peak count, then the peak bytes, then the
    time in flight beside another job, is least (smallest phase on ties). Returns
    ``(phase_ms, peak_concurrent, peak_bytes)``.
    """
    if resolution_ms <= 0:
        raise StaggerInputError(f"resolution_ms must be positive, got {resolution_ms}")
    jobs = [profile for profile, _ in fixed] + [new]
    periods = [max(1, round(p.interval_ms / resolution_ms)) for p in jobs]
    lengths = [
        min(t, max(1, -(-p.duration_ms // resolution_ms)))
        for p, t in zip(jobs, periods, strict=True)
    ]
    weights = np.array([float(p.size_bytes) for p in jobs])
    layout = PhaseLayout(periods, lengths, weights, min(math.lcm(*periods), MAX_HORIZON_SLOTS))
    phases: list[int | None] = [
        (phase // resolution_ms) % t for (_, phase), t in zip(fixed, periods, strict=False)
    ]
    count, load = layout.profiles([*phases, None])
    job = len(jobs) - 1
    counts = layout.candidate_peaks(job, count.astype(np.float64), 1.0)
    loads = layout.candidate_peaks(job, load, float(weights[job]))
    overlaps = layout.candidate_overlaps(job, count.astype(np.float64))
    order = np.lexsort((np.arange(len(counts)), overlaps, loads, counts))
    phase = int(order[0])
    return phase * resolution_ms, int(counts[phase]), round(float(loads[phase]))


def aligned_plan(profiles: Sequence[CheckpointProfile], *, resolution_ms: int = 1) -> StaggerPlan:
    """Every job at phase 0: what uncoordinated jobs started together do (the baseline)."""
    grid = _Grid.of(profiles, resolution_ms)
    return grid.plan(
        PhaseLayout(grid.periods, grid.lengths, grid.weights, grid.horizon),
        [0] * len(grid.jobs),
        lower_bound_concurrent=lower_bound_concurrent(grid.periods, grid.lengths),
        lower_bound_bytes=0,
        optimum_concurrent=None,
        method="aligned",
        exact_horizon=True,
    )


@dataclass(frozen=True)
class _Grid:
    """Profiles on the planning grid: interval and duration in slots, sorted by job id."""

    jobs: list[CheckpointProfile]
    periods: list[int]
    lengths: list[int]
    """Durations rounded up to whole slots (at least one, at most the period)."""
    weights: FloatArray
    resolution_ms: int
    horizon: int
    exact_horizon: bool
    notes: tuple[str, ...]

    @classmethod
    def of(cls, profiles: Sequence[CheckpointProfile], resolution_ms: int) -> _Grid:
        jobs = sorted(profiles, key=lambda p: p.job_id)
        notes: list[str] = []
        periods = [max(1, round(p.interval_ms / resolution_ms)) for p in jobs]
        for p, period in zip(jobs, periods, strict=True):
            if period * resolution_ms != p.interval_ms:
                notes.append(
                    f"job {p.job_id}: interval {p.interval_ms} ms rounded to "
                    f"{period * resolution_ms} ms on the {resolution_ms} ms grid"
                )
        lengths = []
        for p, period in zip(jobs, periods, strict=True):
            slots = max(1, -(-p.duration_ms // resolution_ms))
            if slots > period:
                notes.append(
                    f"job {p.job_id}: duration {p.duration_ms} ms exceeds its interval; "
                    "it is always checkpointing"
                )
                slots = period
            lengths.append(slots)
        hyper = math.lcm(*periods) if jobs else 0
        horizon = min(hyper, MAX_HORIZON_SLOTS)
        if horizon != hyper:
            notes.append(
                f"hyperperiod of {hyper} slots evaluated over its first {horizon} only (bounded)"
            )
        weights = np.array([float(p.size_bytes) for p in jobs])
        return cls(
            jobs, periods, lengths, weights, resolution_ms, horizon, horizon == hyper, tuple(notes)
        )

    def plan(
        self,
        layout: PhaseLayout,
        phases: Sequence[int],
        *,
        lower_bound_concurrent: int,
        lower_bound_bytes: int,
        optimum_concurrent: int | None,
        method: str,
        exact_horizon: bool,
        notes: tuple[str, ...] = (),
    ) -> StaggerPlan:
        """The plan for ``phases`` (in slots), with its peaks measured on ``layout``."""
        count, peak_bytes = layout.peaks(list(phases)) if self.jobs else (0, 0.0)
        slot = self.resolution_ms
        return StaggerPlan(
            phases_ms={p.job_id: f * slot for p, f in zip(self.jobs, phases, strict=True)},
            intervals_ms={p.job_id: t * slot for p, t in zip(self.jobs, self.periods, strict=True)},
            durations_ms={p.job_id: d * slot for p, d in zip(self.jobs, self.lengths, strict=True)},
            resolution_ms=slot,
            horizon_ms=self.horizon * slot,
            peak_concurrent=count,
            peak_bytes=round(peak_bytes),
            lower_bound_concurrent=lower_bound_concurrent,
            lower_bound_bytes=lower_bound_bytes,
            optimum_concurrent=optimum_concurrent,
            method=method,
            exact_horizon=exact_horizon,
            notes=notes,
        )


def _wrap_around(period: int, lengths: Sequence[int]) -> list[int]:
    """McNaughton's layout with the slack ``k·T − Σ d`` shared out evenly as gaps."""
    total = sum(lengths)
    laps = max(1, -(-total // period))
    slack = laps * period - total
    count = len(lengths)
    phases, start = [], 0
    for index, length in enumerate(lengths):
        phases.append(start % period)
        gap = slack * (index + 1) // count - slack * index // count
        start += length + gap
    return phases


def profiles_from_mapping(
    intervals_ms: Mapping[str, int],
    durations_ms: Mapping[str, int],
    sizes_bytes: Mapping[str, int] | None = None,
) -> list[CheckpointProfile]:
    """Profiles from per-job dicts (jobs missing a duration are an error naming them)."""
    missing = sorted(set(intervals_ms) - set(durations_ms))
    if missing:
        raise StaggerInputError(f"no checkpoint duration for job(s) {', '.join(missing)}")
    sizes = sizes_bytes or {}
    return [
        CheckpointProfile(job, interval, durations_ms[job], sizes.get(job, 0))
        for job, interval in intervals_ms.items()
    ]
