"""Constructed observations for the autoscaler's tests: a source → slow → sink pipeline
whose slow vertex has a known capacity per subtask."""

from __future__ import annotations

from kubesage.adapters.flink.autoscaler import AutoscalerSettings, ScalingDecision
from kubesage.adapters.flink.observation import Observation, VertexObservation

SOURCE, SLOW, SINK = "src", "slow", "sink"


def pipeline(
    *,
    rate: float = 40.0,
    capacity: float = 20.0,
    slow_parallelism: int = 1,
    pending: float | None = None,
    growth: float | None = None,
    hash_input: bool = False,
    max_parallelism: int = 128,
    forecast: float | None = None,
) -> tuple[VertexObservation, ...]:
    """source → slow → sink; the slow vertex processes ``capacity`` rec/s per subtask.

    When the source offers more than the slow vertex can take, the job is backpressured:
    throughput is the slow vertex's capacity and the rest shows as backlog growth.
    """
    throughput = min(rate, capacity * slow_parallelism)
    busy = 1000.0 * throughput / (capacity * slow_parallelism)
    if growth is None and pending is not None:
        growth = rate - throughput
    return (
        VertexObservation(
            SOURCE,
            "Source",
            1,
            max_parallelism,
            records_in_per_s=0.0,
            records_out_per_s=throughput,
            busy_ms_per_s=100.0,
            pending_records=pending,
            pending_growth_per_s=growth,
            forecast_records_per_s=forecast,
        ),
        VertexObservation(
            SLOW,
            "slow",
            slow_parallelism,
            max_parallelism,
            inputs=(SOURCE,),
            hash_input=hash_input,
            records_in_per_s=throughput,
            records_out_per_s=throughput,
            busy_ms_per_s=busy,
        ),
        VertexObservation(
            SINK,
            "sink",
            1,
            max_parallelism,
            inputs=(SLOW,),
            records_in_per_s=throughput,
            records_out_per_s=0.0,
            busy_ms_per_s=5.0,
        ),
    )


def observe(
    vertices: tuple[VertexObservation, ...],
    *,
    time_s: float = 100.0,
    running_since_s: float = 0.0,
    state: str = "RUNNING",
    slots_total: int = 16,
    slots_free: int = 15,
    window_s: float = 20.0,
) -> Observation:
    return Observation(
        "job", time_s, state, running_since_s, window_s, vertices, slots_total, slots_free
    )


SETTINGS = AutoscalerSettings(exclude=frozenset({"Source"}), stable_observations=1)


def slow_of(decision: ScalingDecision) -> int:
    return next(v.proposed for v in decision.vertices if v.vertex_id == SLOW)


def proposal(decision: ScalingDecision, vertex_id: str) -> int:
    """The parallelism ``decision`` proposes for ``vertex_id``."""
    return next(v.proposed for v in decision.vertices if v.vertex_id == vertex_id)


def reasons_of(decision: ScalingDecision, vertex_id: str) -> str:
    """``vertex_id``'s reasons in ``decision``, joined."""
    return "; ".join(next(v.reasons for v in decision.vertices if v.vertex_id == vertex_id))
