"""What checkpoint storms cost the shared storage: write rate across jobs, duration p95.

The stagger plan counts checkpoints in flight (:mod:`~kubesage.adapters.flink.stagger`);
what the checkpoint storage feels is bytes per second. Flink's checkpoint history
gives, per completed checkpoint, its ``trigger_timestamp``, its
``latest_ack_timestamp`` (the last subtask's acknowledgement: every byte of the
checkpoint is written by then) and its ``checkpointed_size`` (the bytes this
checkpoint wrote: the full state, or the increment of an incremental checkpoint).
The history does not say *when* inside ``[trigger, latest ack]`` the bytes were
written, so each checkpoint's bytes are spread evenly over that interval (at least
1 ms) and summed across jobs on a grid of ``step_ms``; the peak of that sum is the
storm's write rate. A step much shorter than the checkpoints keeps the peak of the
even spread (the default 10 ms against checkpoints of 100s of ms); a step longer
than them averages a burst away.

The two ends of that scale answer different questions. On the fine grid the peak
is the fastest the jobs wrote together: one lone checkpoint that writes quickly can
top several that, started together, each write slower (they share the disk and the
CPUs that serialise their state). Over a window of a second
(:meth:`WriteRate.peak_over`) the peak is what a storage throughput metric or quota
counted per second sees: there checkpoints started together add up, and staggered ones
do not, as long as the interval leaves room between them.

``state_size`` (the full state) and ``persisted_data`` (unaligned channel state)
are not used: the first over-counts incremental checkpoints, the second is part of
``checkpointed_size`` already.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.adapters.flink.checkpoint_coordinator import CheckpointClient
from kubesage.adapters.flink.checkpoint_history import completed_entries
from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.rest_models import CheckpointEntry, CheckpointStats
from kubesage.core.arrays import FloatArray

DEFAULT_STEP_MS = 10
"""Grid of the write-rate timeline: well below the 100s of ms a checkpoint lasts."""


@dataclass(frozen=True)
class CheckpointWrite:
    """One completed checkpoint: when it wrote (epoch ms) and how many bytes."""

    job_id: str
    checkpoint_id: int
    start_ms: int
    """``trigger_timestamp``."""
    end_ms: int
    """``latest_ack_timestamp`` (``trigger + end_to_end_duration`` when Flink gave none)."""
    size_bytes: int
    """``checkpointed_size``."""

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


def write_of(job_id: str, entry: CheckpointEntry) -> CheckpointWrite:
    """The write of one history entry; Flink's ``-1`` for "no acknowledgement" falls back
    to the end-to-end duration."""
    end = entry.latest_ack_timestamp_ms
    if end < entry.trigger_timestamp_ms:
        end = entry.trigger_timestamp_ms + entry.end_to_end_duration_ms
    return CheckpointWrite(
        job_id, entry.id, entry.trigger_timestamp_ms, end, entry.checkpointed_size_bytes
    )


def checkpoint_writes(
    job_id: str, stats: CheckpointStats, *, since_ms: int = 0, until_ms: int | None = None
) -> list[CheckpointWrite]:
    """The completed checkpoints of one job's history triggered in ``[since_ms, until_ms)``."""
    return [
        write_of(job_id, entry)
        for entry in completed_entries(stats)
        if entry.trigger_timestamp_ms >= since_ms
        and (until_ms is None or entry.trigger_timestamp_ms < until_ms)
    ]


def history_writes(
    client: CheckpointClient,
    job_ids: Iterable[str],
    *,
    since_ms: int = 0,
    until_ms: int | None = None,
) -> list[CheckpointWrite]:
    """:func:`checkpoint_writes` of every job, read from Flink now.

    Flink keeps a bounded history per job (``web.checkpoints.history``): read it soon
    after the run it should cover.
    """
    writes: list[CheckpointWrite] = []
    for job_id in job_ids:
        stats = client.checkpoints(job_id)
        writes += checkpoint_writes(job_id, stats, since_ms=since_ms, until_ms=until_ms)
    return writes


@dataclass(frozen=True)
class WriteRate:
    """Bytes per second written by checkpoints, summed across jobs, on a time grid."""

    start_ms: int
    """Left edge of the first step."""
    step_ms: int
    bytes_per_s: FloatArray
    """Mean rate over each step ``[start + k·step, start + (k+1)·step)``."""

    @property
    def peak_bytes_per_s(self) -> float:
        return float(self.bytes_per_s.max()) if self.bytes_per_s.size else 0.0

    @property
    def peak_at_ms(self) -> int | None:
        """Start of the step with the peak; None for an empty timeline."""
        if not self.bytes_per_s.size:
            return None
        return self.start_ms + int(np.argmax(self.bytes_per_s)) * self.step_ms

    @property
    def total_bytes(self) -> float:
        return float(self.bytes_per_s.sum()) * self.step_ms / 1000

    def peak_over(self, window_ms: int) -> float:
        """Highest mean rate over any ``window_ms`` (rounded to whole steps, at least one):
        what a storage metric counted per window (per second, say) would show."""
        if window_ms <= 0:
            raise StaggerInputError(f"window_ms must be positive, got {window_ms}")
        if not self.bytes_per_s.size:
            return 0.0
        steps = max(1, round(window_ms / self.step_ms))
        # Steps beyond the timeline wrote nothing: a window may hang over its end.
        padded = np.concatenate([self.bytes_per_s, np.zeros(steps - 1)])
        sums = np.convolve(padded, np.ones(steps), mode="valid")
        return float(sums.max()) / steps


def write_rate(writes: Sequence[CheckpointWrite], *, step_ms: int = DEFAULT_STEP_MS) -> WriteRate:
    """Each write's bytes spread evenly over ``[start, end)`` and summed per step.

    Steps are aligned to multiples of ``step_ms`` (epoch ms), so timelines of runs on
    the same grid line up. Exact: a step gets the bytes of the part of each write it
    overlaps, so the timeline's total is the writes' total.
    """
    if step_ms <= 0:
        raise StaggerInputError(f"step_ms must be positive, got {step_ms}")
    if not writes:
        return WriteRate(0, step_ms, np.zeros(0))
    starts = np.array([w.start_ms for w in writes], dtype=np.float64)
    ends = np.array([max(w.end_ms, w.start_ms + 1) for w in writes], dtype=np.float64)
    sizes = np.array([w.size_bytes for w in writes], dtype=np.float64)
    first = math.floor(starts.min() / step_ms) * step_ms
    steps = math.ceil((ends.max() - first) / step_ms)
    edges = first + step_ms * np.arange(steps + 1, dtype=np.float64)
    # Bytes each write has written by each edge (even spread), summed over writes.
    done = np.clip((edges[None, :] - starts[:, None]) / (ends - starts)[:, None], 0.0, 1.0)
    written = (done * sizes[:, None]).sum(axis=0)
    return WriteRate(first, step_ms, np.diff(written) * 1000 / step_ms)


def peak_write_rate(writes: Sequence[CheckpointWrite], *, step_ms: int = DEFAULT_STEP_MS) -> float:
    """Highest checkpoint write rate across jobs, bytes/s (0 without writes)."""
    return write_rate(writes, step_ms=step_ms).peak_bytes_per_s


def duration_quantile(durations_ms: Iterable[int], quantile: float = 0.95) -> int | None:
    """Nearest-rank quantile of checkpoint durations (p95 by default); None without any.

    Nearest rank, not interpolation: the figure is a duration a checkpoint really had.
    With fewer than 20 checkpoints the p95 is the longest one.
    """
    if not 0 < quantile <= 1:
        raise StaggerInputError(f"quantile must be in (0, 1], got {quantile}")
    ordered = sorted(durations_ms)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]
