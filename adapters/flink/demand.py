"""What each vertex of a Flink job must process, and how far that figure can be trusted.

The scaling rule (:func:`~kubesage.adapters.flink.autoscaler.decide`) needs, per vertex,
the records per second it must accept. They come from the sources, in topological
order, the way Flink's own operator autoscaler computes them:

- a *source's demand* is its output (``numRecordsOut``; what the consumers it alone
  feeds receive when it reports none or 0 against their records in; its records in
  otherwise) plus the growth of its backlog (``pendingRecords``), or a forecaster's
  prediction when that is higher (or lower, while the source keeps up with no backlog:
  the measured window trails a decline), plus ``backlog / catch_up_s`` to drain what
  it owes;
- every other vertex must accept the sum of its inputs' targets and passes on
  ``target × (records out / records in)`` (its selectivity; 1 when it cannot be measured);
- a FINISHED vertex (a bounded input that has ended) emits nothing more: 0; a vertex
  all of whose inputs are FINISHED is draining what is in flight: its target is what it
  receives now.

Two things make a figure weaker, and both are recorded rather than hidden:

- *missing metrics* — a vertex that reports no output, or no records in, gets what can
  be measured instead (what it receives now, a selectivity of 1), and the
  :class:`VertexDemand` notes say what was assumed; a source whose output is unknown
  leaves its consumers on their own observed input;
- *a saturated source* — one with no backlog metric that is backpressured (or is itself
  busy) emits only what the job takes, so its demand is at least its output but its
  true value cannot be read. When its consumers hold it back (backpressure), everything
  downstream inherits ``lower_bound``: the decision may scale a bottleneck up step by
  step, re-measuring after each rescale, and must not scale anything down on such a
  figure. A source saturated by its own busy time (a slow or rate-limited reader) is
  its own bottleneck: its consumers receive all it emits, so their demand is exact (a
  probe that overshot while it was held back is scaled down again), and only the
  source's own demand is a lower bound.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubesage.adapters.flink.observation import Observation, VertexObservation

SATURATED_BACKPRESSURE_MS = 500.0
"""Backpressured ms/s from which a source emits only what downstream takes: Flink's
"high" backpressure level starts at 50 %."""
KEPT_UP_S = 1.0
"""A backlog of at most this many seconds of a source's output is one keeping up."""
SATURATED_BUSY_MS = 900.0
"""Busy ms/s from which a source (with its chained operators) is its own bottleneck."""


@dataclass(frozen=True)
class VertexDemand:
    """What one vertex must process, in records/s (``None``: cannot be known)."""

    target_in: float | None
    target_out: float | None
    lower_bound: bool = False
    """The true demand is at least this (a saturated source upstream, or this one)."""
    bounds_consumers: bool = False
    """The demand it passes on is only a lower bound too (not so for a source saturated
    by its own busy time: its consumers receive all it emits)."""
    notes: tuple[str, ...] = ()
    """The metrics that were missing and what was assumed instead."""

    @property
    def known(self) -> bool:
        return self.target_in is not None or self.target_out is not None


@dataclass(frozen=True)
class JobDemand:
    vertices: Mapping[str, VertexDemand]
    """Vertex id → its demand."""
    saturated: tuple[str, ...]
    """Names of the sources whose demand is only a lower bound."""
    held_back: tuple[str, ...] = ()
    """Those of them their consumers hold back: the consumers' demand is a lower bound too."""

    def of(self, vertex_id: str) -> VertexDemand:
        return self.vertices.get(vertex_id, VertexDemand(None, None))


def job_demand(observation: Observation, catch_up_s: float) -> JobDemand:
    """Every vertex's demand, from the sources downstream (see the module docstring)."""
    by_id = {v.vertex_id: v for v in observation.vertices}
    demands: dict[str, VertexDemand] = {}
    saturated: list[str] = []
    held: list[str] = []
    for vertex_id in topological(observation.vertices):
        vertex = by_id[vertex_id]
        if vertex.finished:
            demand = VertexDemand(0.0, 0.0, notes=("FINISHED: emits nothing more",))
        elif vertex.inputs and all(i in by_id and by_id[i].finished for i in vertex.inputs):
            # Every input has ended: what still arrives is in flight, owed like a backlog.
            demand = _downstream(vertex, {}, unknown="its inputs are FINISHED (draining)")
        elif vertex.is_source or vertex.pending_records is not None:
            received = _received_from(vertex_id, observation.vertices)
            demand = _source(vertex, catch_up_s, demands, received)
            if demand.lower_bound and vertex.is_source:
                saturated.append(vertex.name)
                if held_back(vertex):
                    held.append(vertex.name)
        else:
            demand = _downstream(vertex, demands, share=_edge_share(vertex, observation))
        demands[vertex_id] = demand
    return JobDemand(demands, tuple(saturated), tuple(held))


def keeping_up(vertex: VertexObservation, output: float) -> bool:
    """A source emitting ``output`` rec/s whose backlog is measured and neither builds
    nor exceeds :data:`KEPT_UP_S` of output: its demand may be taken from a forecast
    below what the trailing window measured (the measurement lags a decline by half a
    window). Without a backlog metric, or while one builds, what was measured stands."""
    pending, growth = vertex.backlog_as_output
    if pending is None or growth is None:
        return False
    return growth <= 0.0 and pending <= output * KEPT_UP_S


def is_saturated(vertex: VertexObservation) -> bool:
    """A source whose true demand cannot be read: no backlog metric, and backpressured
    or its own bottleneck."""
    if vertex.pending_records is not None:
        return False
    return held_back(vertex) or (vertex.busy_ms_per_s or 0.0) >= SATURATED_BUSY_MS


def held_back(vertex: VertexObservation) -> bool:
    """A source its consumers hold back (backpressured, no backlog metric): what they
    receive is what they can take, not what it has to give."""
    if vertex.pending_records is not None:
        return False
    return (vertex.backpressured_ms_per_s or 0.0) >= SATURATED_BACKPRESSURE_MS


def _received_from(vertex_id: str, vertices: tuple[VertexObservation, ...]) -> float | None:
    """Records/s that consumers fed by ``vertex_id`` alone receive (None: none reports).

    A consumer's records in is the most reliable measure of an edge (Flink's operator
    autoscaler reads it first): a chain ending in a Python operator may report no output.
    """
    rates = [
        v.records_in_per_s
        for v in vertices
        if v.inputs == (vertex_id,) and v.records_in_per_s is not None
    ]
    return sum(rates) if rates else None


def _source(
    vertex: VertexObservation,
    catch_up_s: float,
    upstream: Mapping[str, VertexDemand],
    received: float | None,
) -> VertexDemand:
    """A source's demand; also a vertex that reports a backlog (its own demand signal)."""
    notes: list[str] = []
    output = vertex.records_out_per_s
    if not output and received:
        notes.append(
            f"records out {'reads 0' if output is not None else 'not reported'} while its "
            f"consumers receive {received:.1f} rec/s: output taken from them"
        )
        output = received
    if output is None and vertex.records_in_per_s is not None:
        output = vertex.records_in_per_s
        notes.append("records out not reported: demand read from records in")
    if output is None:
        notes.append("records out not reported: demand unknown")
        return VertexDemand(None, None, notes=tuple(notes))
    pending, growth = vertex.backlog_as_output  # in the output's records
    demand = output + (growth or 0.0)
    forecast = vertex.forecast_records_per_s
    if forecast is not None and forecast > demand:
        demand = forecast  # load coming: ahead of the measured window
    elif forecast is not None and forecast < demand and keeping_up(vertex, output):
        notes.append(
            f"forecast {forecast:.1f} rec/s below the measured {demand:.1f} with no backlog "
            "building: load falling faster than the measured window shows"
        )
        demand = forecast
    backlog = max(pending or 0.0, 0.0)
    target_out = max(demand, 0.0) + backlog / catch_up_s
    lower_bound = vertex.is_source and is_saturated(vertex)
    held = vertex.is_source and held_back(vertex)
    if held:
        notes.append(
            f"saturated: no backlog metric and backpressured "
            f"{vertex.backpressured_ms_per_s or 0.0:.0f} ms/s, so demand is at least its "
            f"output {output:.1f} rec/s"
        )
    elif lower_bound:
        notes.append(
            f"saturated: no backlog metric and busy {vertex.busy_ms_per_s or 0.0:.0f} ms/s, "
            f"so demand is at least its output {output:.1f} rec/s; its own bottleneck: its "
            "consumers receive all it emits"
        )
    elif vertex.is_source and vertex.pending_records is None:
        notes.append(f"no backlog metric: demand taken as its output {output:.1f} rec/s")
    inputs = [upstream[i] for i in vertex.inputs if i in upstream]
    target_in = sum(d.target_out or 0.0 for d in inputs) or vertex.records_in_per_s
    inherited = any(d.bounds_consumers for d in inputs)
    return VertexDemand(
        target_in,
        target_out,
        lower_bound or inherited,
        bounds_consumers=held or inherited,
        notes=tuple(notes),
    )


def _edge_share(vertex: VertexObservation, observation: Observation) -> float:
    """The share of its one input's output that ``vertex`` receives, where that input
    feeds several vertices (a split or side outputs: each gets part; the same stream to
    two consumers, or a broadcast: each gets all, or more): its records in over the
    input's records out, as measured. 1 for a vertex with several inputs (their shares
    cannot be told apart), a sole consumer, or when either rate is unknown."""
    if len(vertex.inputs) != 1:
        return 1.0
    (producer_id,) = vertex.inputs
    consumers = [v for v in observation.vertices if producer_id in v.inputs]
    producer = next((v for v in observation.vertices if v.vertex_id == producer_id), None)
    if producer is None or len(consumers) < 2:
        return 1.0
    produced, received = producer.records_out_per_s, vertex.records_in_per_s
    if not produced or received is None:
        return 1.0
    return received / produced


def _downstream(
    vertex: VertexObservation,
    upstream: Mapping[str, VertexDemand],
    *,
    unknown: str = "upstream demand unknown",
    share: float = 1.0,
) -> VertexDemand:
    """A non-source vertex's demand; ``unknown`` says why its inputs' targets are not used;
    ``share``: of its one input's target it receives (:func:`_edge_share`)."""
    notes: list[str] = []
    inputs = [upstream.get(i, VertexDemand(None, None)) for i in vertex.inputs]
    lower_bound = any(d.bounds_consumers for d in inputs)
    if inputs and all(d.target_out is not None for d in inputs):
        target_in: float | None = sum(d.target_out or 0.0 for d in inputs) * share
        if share != 1.0:
            notes.append(f"receives {share:.2f} of its input's output (a shared producer)")
    else:
        target_in = vertex.records_in_per_s
        notes.append(
            f"{unknown}: target is what it receives now"
            if target_in is not None
            else f"{unknown} and records in not reported"
        )
    observed_in, observed_out = vertex.records_in_per_s, vertex.records_out_per_s
    if observed_in and observed_out is not None:
        selectivity = observed_out / observed_in
    else:
        selectivity = 1.0
        if observed_out is None or observed_in is None:
            notes.append("records in/out not both reported: selectivity assumed 1")
    target_out = target_in * selectivity if target_in is not None else None
    return VertexDemand(
        target_in, target_out, lower_bound, bounds_consumers=lower_bound, notes=tuple(notes)
    )


def topological(vertices: tuple[VertexObservation, ...]) -> list[str]:
    """Vertex ids, every vertex after its inputs (a cycle is broken at its first vertex)."""
    placed: set[str] = set()
    order: list[str] = []
    remaining = list(vertices)
    known = {v.vertex_id for v in vertices}
    while remaining:
        ready = [v for v in remaining if all(i in placed or i not in known for i in v.inputs)]
        ready = ready or remaining[:1]
        for vertex in ready:
            order.append(vertex.vertex_id)
            placed.add(vertex.vertex_id)
        remaining = [v for v in remaining if v.vertex_id not in placed]
    return order
