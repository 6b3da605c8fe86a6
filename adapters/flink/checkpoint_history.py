"""What a job's checkpoints look like, read from Flink's checkpoint history or probed.

The stagger plan needs, per job, how long a checkpoint stays in flight and how many
bytes it writes (a :class:`~kubesage.adapters.flink.stagger.CheckpointProfile`); a
run needs to know how many checkpoints really overlapped. Both come from what Flink
records: the completed checkpoints of a job's history (``trigger_timestamp``,
``end_to_end_duration``, ``checkpointed_size``), or the coordinator's own records
of probe checkpoints triggered one job at a time.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable, Sequence

from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointClient,
    CheckpointCoordinator,
    CheckpointRecord,
    single_job_plan,
)
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.rest_models import CheckpointEntry, CheckpointStats
from kubesage.adapters.flink.stagger import CheckpointProfile, peak_concurrent

log = logging.getLogger(__name__)

DEFAULT_DURATION_MS = 1_000
"""Stands in for the duration of a job that has no completed checkpoint yet."""


def completed_entries(stats: CheckpointStats) -> list[CheckpointEntry]:
    """Completed checkpoints (not savepoints) of a history, oldest first."""
    done = [e for e in stats.history if e.status == "COMPLETED" and not e.is_savepoint]
    return sorted(done, key=lambda e: e.trigger_timestamp_ms)


def history_windows(
    client: CheckpointClient,
    job_ids: Iterable[str],
    *,
    since_ms: int = 0,
    until_ms: int | None = None,
) -> list[tuple[int, int]]:
    """``[trigger, trigger + end-to-end duration)`` of the jobs' completed checkpoints.

    Only checkpoints triggered in ``[since_ms, until_ms)`` count. Flink keeps a bounded
    history per job (``web.checkpoints.history``, 10 by default), so read it soon after
    the run it should cover.
    """
    windows = []
    for job_id in job_ids:
        for entry in completed_entries(client.checkpoints(job_id)):
            start = entry.trigger_timestamp_ms
            if start >= since_ms and (until_ms is None or start < until_ms):
                windows.append((start, start + entry.end_to_end_duration_ms))
    return windows


def history_peak_concurrent(
    client: CheckpointClient,
    job_ids: Iterable[str],
    *,
    since_ms: int = 0,
    until_ms: int | None = None,
) -> int:
    """Most checkpoints of these jobs in flight at once, measured by Flink's own history.

    Whoever triggered them (a coordinator, Flink's scheduler, a user): this is what the
    shared checkpoint storage saw.
    """
    return peak_concurrent(history_windows(client, job_ids, since_ms=since_ms, until_ms=until_ms))


def observed_profile(
    job_id: str,
    interval_ms: int,
    entries: Sequence[CheckpointEntry],
    *,
    duration_quantile: float = 1.0,
    default_duration_ms: int = DEFAULT_DURATION_MS,
) -> CheckpointProfile:
    """A job's profile from its completed checkpoints.

    The duration is a high quantile (by default the longest seen): a plan built on a
    typical duration would let the long ones overlap. The size is the median bytes a
    checkpoint wrote. Without history, ``default_duration_ms`` and size 0 stand in.
    """
    if not 0 < duration_quantile <= 1:
        raise StaggerInputError(f"duration_quantile must be in (0, 1], got {duration_quantile}")
    durations = sorted(e.end_to_end_duration_ms for e in entries)
    if not durations:
        return CheckpointProfile(job_id, interval_ms, default_duration_ms, 0)
    index = min(len(durations) - 1, max(0, round(duration_quantile * len(durations)) - 1))
    size = int(statistics.median(e.checkpointed_size_bytes for e in entries))
    return CheckpointProfile(job_id, interval_ms, durations[index], size)


def measure_profiles(
    client: CheckpointClient,
    job_ids: Iterable[str],
    interval_ms: int,
    *,
    rounds: int = 2,
    timeout_s: float = 60.0,
    poll_s: float = 0.1,
) -> list[CheckpointProfile]:
    """Profiles measured by triggering ``rounds`` checkpoints per job, one job at a time.

    One at a time, so no measured duration is inflated by another job's checkpoint.
    A job whose probes all fail keeps the default duration (logged).
    """
    profiles = []
    for job_id in job_ids:
        coordinator = CheckpointCoordinator(client, single_job_plan(job_id, interval_ms))
        records = [
            coordinator.checkpoint_now(job_id, timeout_s=timeout_s, poll_s=poll_s)
            for _ in range(rounds)
        ]
        for record in records:
            if record.outcome != "completed" or record.duration_ms is None:
                log.warning("job %s: probe checkpoint %s %s", job_id, record.outcome, record.detail)
        profiles.append(profile_from_records(job_id, interval_ms, records))
    return profiles


def profile_from_records(
    job_id: str, interval_ms: int, records: Iterable[CheckpointRecord]
) -> CheckpointProfile:
    """Like :func:`observed_profile`, from the coordinator's own records."""
    timed = [r for r in records if r.outcome == "completed" and r.duration_ms is not None]
    durations = sorted(r.duration_ms for r in timed if r.duration_ms is not None)
    if not durations:
        return CheckpointProfile(job_id, interval_ms, DEFAULT_DURATION_MS, 0)
    size = int(statistics.median(r.size_bytes or 0 for r in timed))
    return CheckpointProfile(job_id, interval_ms, durations[-1], size)
