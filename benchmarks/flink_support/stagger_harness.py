"""The checkpoint-staggering experiment the benchmark and the integration test share.

The same jobs are checkpointed by kubesage's coordinator on a stagger plan, then all
at the same instants (what jobs started together on one interval do), and the peak
concurrency of each run is measured from Flink's own checkpoint history. Everything
it drives is the product's (:mod:`~kubesage.adapters.flink.checkpoint_coordinator`,
:mod:`~kubesage.adapters.flink.stagger`); only the experiment's set-up lives here.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointClient,
    CheckpointCoordinator,
    CoordinatorReport,
)
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.stagger import (
    CheckpointProfile,
    StaggerPlan,
    aligned_plan,
    optimum_equal_intervals,
    plan_stagger,
)


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


def run_schedule(
    client: CheckpointClient, plan: StaggerPlan, *, periods: int, lead_ms: int = 500
) -> CoordinatorReport:
    """Drive ``plan`` for ``periods`` of its longest interval, from an epoch ``lead_ms`` ahead."""
    epoch = int(time.time() * 1000) + lead_ms
    coordinator = CheckpointCoordinator(client, plan, epoch_ms=epoch)
    longest = max(plan.intervals_ms.values(), default=0)
    return coordinator.run(duration_s=(lead_ms + periods * longest) / 1000)


def compare_with_aligned(
    client: CheckpointClient,
    profiles: Sequence[CheckpointProfile],
    *,
    periods: int,
    resolution_ms: int = 100,
) -> StaggerComparison:
    """Run the stagger plan, then every job at phase 0, each for ``periods`` intervals.

    Equal intervals only: ``optimum`` is ``max(1, ⌈Σ d_i / T⌉)`` over the longest
    duration each job showed while on the plan.
    """
    intervals = {p.interval_ms for p in profiles}
    if len(intervals) != 1:
        raise StaggerInputError("compare_with_aligned needs equal intervals")
    interval = intervals.pop()
    plan = plan_stagger(profiles, resolution_ms=resolution_ms)
    staggered = run_schedule(client, plan, periods=periods)
    aligned = run_schedule(client, aligned_plan(profiles), periods=periods)
    longest: dict[str, int] = {}
    for record in staggered.records:
        if record.duration_ms is not None:
            longest[record.job_id] = max(longest.get(record.job_id, 0), record.duration_ms)
    durations = [min(interval, longest.get(p.job_id, p.duration_ms)) for p in profiles]
    return StaggerComparison(plan, staggered, aligned, optimum_equal_intervals(interval, durations))
