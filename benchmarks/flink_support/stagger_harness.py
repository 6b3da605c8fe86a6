"""The checkpoint-staggering experiment the benchmark and the integration test share.

The same jobs are checkpointed by kubesage's coordinator on a stagger plan, then all
at the same instants (what jobs started together on one interval do), and the peak
concurrency of each run is measured from Flink's own checkpoint history. What each
run wrote is read from that history too (:mod:`~kubesage.adapters.flink.checkpoint_io`:
bytes per second across jobs, durations) and, given a sampler, from the file system
while it runs (``io_sampler``). Everything
it drives is the product's (:mod:`~kubesage.adapters.flink.checkpoint_coordinator`,
:mod:`~kubesage.adapters.flink.stagger`); only the experiment's set-up lives here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointClient,
    CheckpointCoordinator,
    CoordinatorReport,
)
from kubesage.adapters.flink.checkpoint_io import CheckpointWrite, history_writes
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.stagger import (
    CheckpointProfile,
    StaggerPlan,
    aligned_plan,
    optimum_equal_intervals,
    plan_stagger,
)

from .io_sampler import IoTimeline

log = logging.getLogger(__name__)


def equal_interval(
    profiles: Sequence[CheckpointProfile], factor: float, *, minimum_ms: int, step_ms: int
) -> list[CheckpointProfile]:
    """The profiles with one shared interval: ``factor`` × the sum of their durations.

    Rounded up to ``step_ms`` and at least ``minimum_ms``. ``factor ≥ 1`` leaves room to
    run every checkpoint alone (optimum 1); below 1 no schedule avoids overlaps.
    """
    if factor <= 0 or minimum_ms <= 0 or step_ms <= 0:
        raise StaggerInputError("factor, minimum_ms and step_ms must be positive")
    total_ms = sum(p.duration_ms for p in profiles)
    interval = max(minimum_ms, math.ceil(factor * total_ms / step_ms) * step_ms)
    return [dataclasses.replace(p, interval_ms=interval) for p in profiles]


@dataclass(frozen=True)
class StaggerComparison:
    """The same jobs checkpointed on the plan and all at once, measured by Flink."""

    plan: StaggerPlan
    staggered: CoordinatorReport
    aligned: CoordinatorReport
    optimum: int
    """Least peak possible for the interval and the longest durations seen on the plan."""
    staggered_writes: list[CheckpointWrite] = field(default_factory=list)
    """The completed checkpoints of the run on the plan, from Flink's history."""
    aligned_writes: list[CheckpointWrite] = field(default_factory=list)
    staggered_io: IoTimeline | None = None
    """The file system's counters during the run on the plan (with a sampler)."""
    aligned_io: IoTimeline | None = None


Sampler = Callable[[], AbstractContextManager[IoTimeline]]
"""Starts sampling the file system for a ``with`` block (``io_sampler.sample_io``)."""


@dataclass(frozen=True)
class MeasuredRun:
    """One run of a plan: the coordinator's report and what its checkpoints wrote."""

    report: CoordinatorReport
    writes: list[CheckpointWrite]
    io: IoTimeline | None


def run_schedule(
    client: CheckpointClient, plan: StaggerPlan, *, periods: int, lead_ms: int = 500
) -> CoordinatorReport:
    """Drive ``plan`` for ``periods`` of its longest interval, from an epoch ``lead_ms`` ahead."""
    epoch = int(time.time() * 1000) + lead_ms
    coordinator = CheckpointCoordinator(client, plan, epoch_ms=epoch)
    longest = max(plan.intervals_ms.values(), default=0)
    return coordinator.run(duration_s=(lead_ms + periods * longest) / 1000)


def measured_run(
    client: CheckpointClient,
    plan: StaggerPlan,
    *,
    periods: int,
    sampler: Sampler | None = None,
    history_wait_s: float = 15.0,
) -> MeasuredRun:
    """:func:`run_schedule`, with what its checkpoints wrote: from Flink's history (read
    right after the run: the history is bounded) and, given ``sampler``, the file system."""
    since = int(time.time() * 1000)
    with sampler() if sampler is not None else nullcontext(None) as io:
        report = run_schedule(client, plan, periods=periods)
    until = int(time.time() * 1000)
    # The REST API caches checkpoint statistics for a few seconds: wait until the history
    # shows every checkpoint the coordinator saw complete.
    expected = {(r.job_id, r.checkpoint_id) for r in report.records if r.outcome == "completed"}
    deadline = time.monotonic() + history_wait_s
    while True:
        writes = history_writes(client, sorted(plan.phases_ms), since_ms=since, until_ms=until)
        missing = expected - {(w.job_id, w.checkpoint_id) for w in writes}
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if missing:
        log.warning("%d completed checkpoints not in Flink's history", len(missing))
    return MeasuredRun(report, writes, io)


def compare_with_aligned(
    client: CheckpointClient,
    profiles: Sequence[CheckpointProfile],
    *,
    periods: int,
    resolution_ms: int = 100,
    sampler: Sampler | None = None,
) -> StaggerComparison:
    """Run the stagger plan, then every job at phase 0, each for ``periods`` intervals.

    Equal intervals only: ``optimum`` is ``max(1, ⌈Σ d_i / T⌉)`` over the longest
    duration each job showed while on the plan. ``sampler`` watches the file system
    during each run.
    """
    intervals = {p.interval_ms for p in profiles}
    if len(intervals) != 1:
        raise StaggerInputError("compare_with_aligned needs equal intervals")
    interval = intervals.pop()
    plan = plan_stagger(profiles, resolution_ms=resolution_ms)
    on_plan = measured_run(client, plan, periods=periods, sampler=sampler)
    at_once = measured_run(client, aligned_plan(profiles), periods=periods, sampler=sampler)
    staggered, aligned = on_plan.report, at_once.report
    longest: dict[str, int] = {}
    for record in staggered.records:
        if record.duration_ms is not None:
            longest[record.job_id] = max(longest.get(record.job_id, 0), record.duration_ms)
    durations = [min(interval, longest.get(p.job_id, p.duration_ms)) for p in profiles]
    return StaggerComparison(
        plan,
        staggered,
        aligned,
        optimum_equal_intervals(interval, durations),
        staggered_writes=on_plan.writes,
        aligned_writes=at_once.writes,
        staggered_io=on_plan.io,
        aligned_io=at_once.io,
    )
