"""What the autoscaler knows of a Flink job at one instant: its topology and rates.

An :class:`Observation` is the input of the scaling decision
(:func:`~kubesage.adapters.flink.autoscaler.decide`) and the output of the REST
collector (:class:`~kubesage.adapters.flink.collector.ObservationCollector`). It
carries the job's topology — vertices, their parallelism and max parallelism, the
edges into each vertex (and whether one is a hash/keyBy edge), slot-sharing groups
and the cluster's task slots — and the rates measured over a window. It is plain,
immutable data: a test, a simulator or a replay can build one without Flink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubesage.adapters.flink.errors import FlinkNotFound

FINISHED = "FINISHED"
"""A vertex whose input has ended — a bounded source, or a side input, of a streaming
job that keeps running (Flink checkpoints after tasks finish since 1.15). It never
runs again: it keeps its parallelism, emits nothing more, and the rest of the job is
measured and scaled without it."""
SETTLED_STATUSES = frozenset({"RUNNING", FINISHED})
"""Vertex states a running job can be measured and scaled in; any other is a (re)start
that has not settled yet."""

_RATE_FIELDS = (
    "records_in_per_s",
    "records_out_per_s",
    "busy_ms_per_s",
    "backpressured_ms_per_s",
    "pending_records",
    "pending_growth_per_s",
    "forecast_records_per_s",
)


@dataclass(frozen=True)
class VertexObservation:
    """One vertex's rates over the observation window (``None`` = Flink did not report it)."""

    vertex_id: str
    name: str
    parallelism: int
    max_parallelism: int
    inputs: tuple[str, ...] = ()
    hash_input: bool = False
    slot_sharing_group: str = "default"
    status: str = "RUNNING"
    records_in_per_s: float | None = None
    """Sum over subtasks."""
    records_out_per_s: float | None = None
    busy_ms_per_s: float | None = None
    """Max over subtasks, 0–1000."""
    backpressured_ms_per_s: float | None = None
    pending_records: float | None = None
    """Backlog a source reports (sum of its ``*pendingRecords`` gauges)."""
    pending_growth_per_s: float | None = None
    output_per_pending: float | None = None
    """The vertex's records out per record of its backlog: its task's ``numRecordsOut``
    over the rate of the operator that reports the backlog (that operator's own
    ``numRecordsOut``, in the backlog's units). A chain that filters or splits after its
    source emits fewer or more records than it reads; None when unknown (taken as 1)."""
    forecast_records_per_s: float | None = None
    """A forecaster's prediction of this source's demand over the next steps."""

    @property
    def is_source(self) -> bool:
        return not self.inputs

    @property
    def backlog_as_output(self) -> tuple[float | None, float | None]:
        """The backlog and its growth per second in records of the vertex's output (what
        its consumers will receive for them): see :attr:`output_per_pending`."""
        scale = self.output_per_pending if self.output_per_pending is not None else 1.0
        pending = None if self.pending_records is None else self.pending_records * scale
        growth = None if self.pending_growth_per_s is None else self.pending_growth_per_s * scale
        return pending, growth

    @property
    def finished(self) -> bool:
        """Its input has ended (:data:`FINISHED`): left as it is."""
        return self.status == FINISHED

    def __post_init__(self) -> None:
        # Flink reports NaN for metrics it does not measure (busy time of legacy
        # sources); a non-finite value is treated as not reported.
        for name in _RATE_FIELDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                object.__setattr__(self, name, None)


@dataclass(frozen=True)
class Observation:
    job_id: str
    time_s: float
    job_state: str
    running_since_s: float
    """When the job last entered RUNNING (a restart or rescale moves it)."""
    window_s: float
    """Length of the window the rates were measured over (0: no rates yet)."""
    vertices: tuple[VertexObservation, ...]
    slots_total: int
    slots_free: int
    running_for_s: float | None = None
    """How long the job has been RUNNING by the JobManager's own clock (its ``now``
    minus ``running_since``); None when the reply has no ``now``."""

    @property
    def since_restart_s(self) -> float:
        """Seconds since the last (re)start: by the JobManager's clock where known, so
        that a skew between its clock and this host's does not move the settle rules."""
        if self.running_for_s is not None:
            return self.running_for_s
        return self.time_s - self.running_since_s

    def vertex(self, name: str) -> VertexObservation:
        """The vertex with this name or id (FlinkNotFound naming the job when none has)."""
        for vertex in self.vertices:
            if name in (vertex.name, vertex.vertex_id):
                return vertex
        raise FlinkNotFound(f"job {self.job_id} has no vertex '{name}'")

    def drained(
        self,
        source: str,
        *,
        max_pending_records: float,
        min_window_s: float = 15.0,
        max_backpressured_ms_per_s: float = 100.0,
    ) -> bool:
        """Whether ``source`` has caught up: its backlog below ``max_pending_records`` and
        it is not backpressured (Flink's "ok" level: ≤ 100 ms/s), over a full window.

        What "the job keeps up" means after a rescale: unknown metrics count as not drained.
        """
        vertex = self.vertex(source)
        return (
            self.window_s >= min_window_s
            and vertex.pending_records is not None
            and vertex.pending_records < max_pending_records
            and vertex.backpressured_ms_per_s is not None
            and vertex.backpressured_ms_per_s <= max_backpressured_ms_per_s
        )
