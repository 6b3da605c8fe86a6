"""Backpressure-driven parallelism for Flink jobs (DS2's rule, with guard rails).

The decision (``Autoscaler.decide``) does no I/O and reads no clock: it takes an
``Observation`` — per vertex, rates measured over a window — and returns a
``ScalingDecision`` whose reasons say why. Per vertex ``v``:

- *true processing rate* per subtask = records in/s per subtask ÷ busy fraction, where
  the busy fraction is ``busyTimeMsPerSecond / 1000`` taken as the max over subtasks
  (the slowest subtask bounds the vertex); sources use records out;
- *target rates*, in topological order from the sources: a source's target is its
  demand — the observed (or, with a forecaster, the forecast) output rate plus the
  growth of its backlog (``pendingRecords``) — plus ``backlog / catch_up_s``; every
  other vertex receives the sum of its inputs' targets and passes on
  ``target × (out / in)``;
- *parallelism* = ``ceil(target / true rate per subtask / target utilisation)``, clamped
  to ``[min_parallelism, max parallelism]`` and, for a vertex behind a hash (keyBy)
  edge, raised to a divisor of its max parallelism so key groups spread evenly.

Guard rails: no decision while the job is not RUNNING or within ``settle_s`` of its
last (re)start, nor while metrics are missing; a change must be proposed by
``stable_observations`` consecutive observations; a vertex whose utilisation is within
``target ± boundary`` keeps its parallelism; scale-downs wait ``scale_down_delay_s``;
no vertex reverses a rescale within ``oscillation_window_s``; and a plan that needs
more task slots than the cluster has is capped to the slots there are, saying so.

``run_autoscaler`` is the control loop: it measures observations through the
``FlinkClient`` (``collector.ObservationCollector``), decides, rescales in place
unless ``dry_run``, and reports each decision. A ``FlinkError`` never ends the loop:
it is logged, counted and the next tick tries again.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError, FlinkNotFound
from kubesage.adapters.flink.rest_models import JobVertex, PlanInput
from kubesage.core.errors import ConfigError

if TYPE_CHECKING:
    from kubesage.adapters.flink.rescale import RescaleOutcome
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)

PENDING_SUFFIX = "pendingRecords"
COUNTERS = (
    "numRecordsIn",
    "numRecordsOut",
    "accumulateBusyTimeMs",
    "accumulateBackPressuredTimeMs",
)
METERS = ("numRecordsInPerSecond", "numRecordsOutPerSecond", "busyTimeMsPerSecond")


@dataclass(frozen=True)
class AutoscalerSettings:
    """Tuning of the decision; defaults suit jobs whose rates change over minutes."""

    target_utilisation: float = 0.8
    """Fraction of its true processing rate a vertex should run at (headroom for spikes)."""
    utilisation_boundary: float = 0.1
    """A vertex within ``target ± boundary`` utilisation keeps its parallelism."""
    settle_s: float = 20.0
    """Seconds after a (re)start before metrics count: tasks warm up, buffers refill."""
    stable_observations: int = 2
    """Consecutive observations that must propose the same parallelism."""
    scale_down_delay_s: float = 300.0
    """A scale-down must be proposed this long before it happens."""
    oscillation_window_s: float = 600.0
    """No vertex reverses the direction of its last rescale within this window."""
    catch_up_s: float = 300.0
    """A backlog is planned to drain within this time."""
    min_parallelism: int = 1
    max_parallelism: int | None = None
    exclude: frozenset[str] = frozenset()
    """Vertex ids or names never rescaled (their rates still propagate)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.target_utilisation <= 1.0:
            raise ConfigError("must be in (0, 1]", field="target_utilisation")
        if not 0.0 <= self.utilisation_boundary < self.target_utilisation:
            raise ConfigError("must be in [0, target_utilisation)", field="utilisation_boundary")
        if self.stable_observations < 1:
            raise ConfigError("must be ≥ 1", field="stable_observations")
        if self.min_parallelism < 1:
            raise ConfigError("must be ≥ 1", field="min_parallelism")
        if self.catch_up_s <= 0:
            raise ConfigError("must be > 0", field="catch_up_s")


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
    forecast_records_per_s: float | None = None
    """A forecaster's prediction of this source's demand over the next steps."""

    @property
    def is_source(self) -> bool:
        return not self.inputs

    def __post_init__(self) -> None:
        # Flink reports NaN for metrics it does not measure (busy time of legacy
        # sources); a non-finite value is treated as not reported.
        for name in (
            "records_in_per_s",
            "records_out_per_s",
            "busy_ms_per_s",
            "backpressured_ms_per_s",
            "pending_records",
            "pending_growth_per_s",
            "forecast_records_per_s",
        ):
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


@dataclass(frozen=True)
class VertexDecision:
    vertex_id: str
    name: str
    current: int
    proposed: int
    """The parallelism after the guard rails."""
    ideal: int | None
    """What the rule asked for before the guard rails (None: not computed)."""
    target_records_per_s: float | None
    true_rate_per_subtask: float | None
    utilisation: float | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class ScalingDecision:
    job_id: str
    time_s: float
    action: Literal["rescale", "hold", "skip"]
    vertices: tuple[VertexDecision, ...]
    reasons: tuple[str, ...]

    @property
    def changes(self) -> dict[str, int]:
        """Vertex id → new parallelism, for the vertices that change."""
        return {v.vertex_id: v.proposed for v in self.vertices if v.proposed != v.current}

    def describe(self) -> str:
        lines = [f"{self.action}: " + "; ".join(self.reasons)]
        for vertex in self.vertices:
            arrow = f"{vertex.current}→{vertex.proposed}"
            lines.append(f"  {vertex.name} [{arrow}]: " + "; ".join(vertex.reasons))
        return "\n".join(lines)


@dataclass
class _VertexMemory:
    ideals: list[int] = field(default_factory=list)
    scale_down_since_s: float | None = None
    last_rescale_s: float | None = None
    last_direction: int = 0


class Autoscaler:
    """DS2's parallelism rule with guard rails; remembers only what the guard rails need."""

    def __init__(self, settings: AutoscalerSettings | None = None) -> None:
        self.settings = settings or AutoscalerSettings()
        self._memory: dict[str, _VertexMemory] = {}

    def record_rescale(self, time_s: float, old: Mapping[str, int], new: Mapping[str, int]) -> None:
        """Notes an applied rescale (for the oscillation guard) and clears pending proposals."""
        for vertex_id, parallelism in new.items():
            memory = self._memory.setdefault(vertex_id, _VertexMemory())
            before = old.get(vertex_id, parallelism)
            if parallelism != before:
                memory.last_rescale_s = time_s
                memory.last_direction = 1 if parallelism > before else -1
        for memory in self._memory.values():
            memory.ideals.clear()
            memory.scale_down_since_s = None

    def decide(self, observation: Observation) -> ScalingDecision:
        skip = self._skip_reason(observation)
        if skip:
            return ScalingDecision(
                observation.job_id,
                observation.time_s,
                "skip",
                tuple(_keep(v, skip) for v in observation.vertices),
                (skip,),
            )
        targets = self._targets(observation)
        decisions = [self._vertex(observation, v, targets) for v in observation.vertices]
        decisions, slot_reason = self._fit_slots(observation, decisions)
        changed = any(d.proposed != d.current for d in decisions)
        reasons = [
            f"rates over {observation.window_s:.0f} s, target utilisation "
            f"{self.settings.target_utilisation:.2f}"
        ]
        if slot_reason:
            reasons.append(slot_reason)
        return ScalingDecision(
            observation.job_id,
            observation.time_s,
            "rescale" if changed else "hold",
            tuple(decisions),
            tuple(reasons),
        )

    # -- steps ----------------------------------------------------------------------

    def _skip_reason(self, observation: Observation) -> str | None:
        if observation.job_state != "RUNNING":
            return f"job is {observation.job_state}, not RUNNING"
        not_running = [v.name for v in observation.vertices if v.status != "RUNNING"]
        if not_running:
            return f"vertices not RUNNING yet: {', '.join(not_running)}"
        since = observation.time_s - observation.running_since_s
        if since < self.settings.settle_s:
            return (
                f"job (re)started {since:.0f} s ago; metrics count after "
                f"{self.settings.settle_s:.0f} s"
            )
        if observation.window_s <= 0:
            return "no measurement window yet (rates need two samples)"
        window_start = observation.time_s - observation.window_s - observation.running_since_s
        if window_start < self.settings.settle_s:
            return (
                f"the measurement window starts {window_start:.0f} s after the (re)start; "
                f"it must start after {self.settings.settle_s:.0f} s"
            )
        missing = [
            v.name
            for v in observation.vertices
            if not self._excluded(v)
            and (
                v.busy_ms_per_s is None
                or (v.records_in_per_s if not v.is_source else v.records_out_per_s) is None
            )
        ]
        if missing:
            return f"metrics missing for {', '.join(missing)}"
        return None

    def _excluded(self, vertex: VertexObservation) -> bool:
        return vertex.vertex_id in self.settings.exclude or vertex.name in self.settings.exclude

    def _targets(self, observation: Observation) -> dict[str, tuple[float, float]]:
        """Vertex id → (target records in/s, target records out/s), sources first."""
        by_id = {v.vertex_id: v for v in observation.vertices}
        order = _topological(observation.vertices)
        targets: dict[str, tuple[float, float]] = {}
        for vertex_id in order:
            vertex = by_id[vertex_id]
            observed_in = vertex.records_in_per_s or 0.0
            observed_out = vertex.records_out_per_s or 0.0
            if vertex.is_source or vertex.pending_records is not None:
                demand = observed_out + (vertex.pending_growth_per_s or 0.0)
                if vertex.forecast_records_per_s is not None:
                    demand = max(demand, vertex.forecast_records_per_s)
                backlog = max(vertex.pending_records or 0.0, 0.0)
                target_out = max(demand, 0.0) + backlog / self.settings.catch_up_s
                target_in = sum(targets[i][1] for i in vertex.inputs if i in targets)
                targets[vertex_id] = (target_in or observed_in, target_out)
                continue
            target_in = sum(targets[i][1] for i in vertex.inputs if i in targets)
            selectivity = observed_out / observed_in if observed_in > 0 else 1.0
            targets[vertex_id] = (target_in, target_in * selectivity)
        return targets

    def _vertex(
        self,
        observation: Observation,
        vertex: VertexObservation,
        targets: Mapping[str, tuple[float, float]],
    ) -> VertexDecision:
        settings = self.settings
        target_in, target_out = targets[vertex.vertex_id]
        if self._excluded(vertex):
            return _keep(vertex, "excluded from scaling", target=target_in)
        assert vertex.busy_ms_per_s is not None
        rate = vertex.records_out_per_s if vertex.is_source else vertex.records_in_per_s
        target = target_out if vertex.is_source else target_in
        busy = min(max(vertex.busy_ms_per_s, 0.0), 1000.0) / 1000.0
        if not rate or busy <= 0.0:
            return _keep(vertex, "no records processed in the window", target=target)
        true_rate = rate / vertex.parallelism / busy
        utilisation = target / (true_rate * vertex.parallelism)
        low = settings.target_utilisation - settings.utilisation_boundary
        high = settings.target_utilisation + settings.utilisation_boundary
        reasons = [
            f"true rate {true_rate:.1f} rec/s per subtask (busy {busy * 1000:.0f} ms/s), "
            f"target {target:.1f} rec/s, utilisation {utilisation:.2f}"
        ]
        ideal = math.ceil(target / (true_rate * settings.target_utilisation) - 1e-9)
        ideal = self._clamp(vertex, ideal, reasons)
        if low <= utilisation <= high:
            ideal = vertex.parallelism
            reasons.append(f"within {low:.2f}–{high:.2f}: keep")
        memory = self._memory.setdefault(vertex.vertex_id, _VertexMemory())
        memory.ideals = [*memory.ideals, ideal][-settings.stable_observations :]
        proposed = ideal
        if proposed != vertex.parallelism:
            proposed = self._guard(observation, vertex, memory, proposed, reasons)
        else:
            memory.scale_down_since_s = None
        return VertexDecision(
            vertex.vertex_id,
            vertex.name,
            vertex.parallelism,
            proposed,
            ideal,
            target,
            true_rate,
            utilisation,
            tuple(reasons),
        )

    def _clamp(self, vertex: VertexObservation, ideal: int, reasons: list[str]) -> int:
        settings = self.settings
        upper = vertex.max_parallelism if vertex.max_parallelism > 0 else 32768
        if settings.max_parallelism is not None:
            upper = min(upper, settings.max_parallelism)
        clamped = min(max(ideal, settings.min_parallelism), upper)
        if clamped != ideal:
            reasons.append(f"{ideal} clamped to [{settings.min_parallelism}, {upper}]")
        if vertex.hash_input and vertex.max_parallelism > 0:
            aligned = _divisor_at_least(clamped, vertex.max_parallelism)
            if aligned != clamped:
                reasons.append(
                    f"{clamped} raised to {aligned}, a divisor of max parallelism "
                    f"{vertex.max_parallelism} (hash input: even key groups)"
                )
                clamped = aligned
        return clamped

    def _guard(
        self,
        observation: Observation,
        vertex: VertexObservation,
        memory: _VertexMemory,
        proposed: int,
        reasons: list[str],
    ) -> int:
        settings = self.settings
        now = observation.time_s
        if len(memory.ideals) < settings.stable_observations or len(set(memory.ideals)) > 1:
            reasons.append(
                f"waiting for stable metrics: last proposals {memory.ideals}, need "
                f"{settings.stable_observations} equal"
            )
            return vertex.parallelism
        direction = 1 if proposed > vertex.parallelism else -1
        if (
            memory.last_rescale_s is not None
            and memory.last_direction == -direction
            and now - memory.last_rescale_s < settings.oscillation_window_s
        ):
            reasons.append(
                f"would reverse the rescale of {now - memory.last_rescale_s:.0f} s ago "
                f"(oscillation window {settings.oscillation_window_s:.0f} s): keep"
            )
            return vertex.parallelism
        if direction < 0:
            if memory.scale_down_since_s is None:
                memory.scale_down_since_s = now
            waited = now - memory.scale_down_since_s
            if waited < settings.scale_down_delay_s:
                reasons.append(
                    f"scale-down to {proposed} deferred: proposed for {waited:.0f} s, "
                    f"needs {settings.scale_down_delay_s:.0f} s"
                )
                return vertex.parallelism
        else:
            memory.scale_down_since_s = None
        reasons.append(f"scale {'up' if direction > 0 else 'down'} to {proposed}")
        return proposed

    def _fit_slots(
        self, observation: Observation, decisions: list[VertexDecision]
    ) -> tuple[list[VertexDecision], str | None]:
        """Caps the plan to the slots that exist; vertices of one slot-sharing group share."""
        groups: dict[str, list[int]] = {}
        by_id = {v.vertex_id: v for v in observation.vertices}
        for index, decision in enumerate(decisions):
            groups.setdefault(by_id[decision.vertex_id].slot_sharing_group, []).append(index)
        current = sum(max(decisions[i].current for i in members) for members in groups.values())
        needed = sum(max(decisions[i].proposed for i in members) for members in groups.values())
        capacity = observation.slots_free + current
        if needed <= capacity:
            return decisions, None
        spare = capacity - sum(1 for _ in groups)  # every group keeps at least one slot
        per_group = max(1, 1 + spare // max(len(groups), 1))
        capped = list(decisions)
        for members in groups.values():
            for i in members:
                decision = capped[i]
                if decision.proposed > per_group and decision.proposed > decision.current:
                    limit = max(per_group, decision.current)
                    capped[i] = replace(
                        decision,
                        proposed=limit,
                        reasons=(
                            *decision.reasons,
                            f"capped at {limit}: only {capacity} task slots for this job",
                        ),
                    )
        reason = (
            f"plan needs {needed} task slots but the cluster has {capacity} for this job "
            f"({observation.slots_total} in all): capped"
        )
        return capped, reason


def _keep(vertex: VertexObservation, reason: str, *, target: float | None = None) -> VertexDecision:
    return VertexDecision(
        vertex.vertex_id,
        vertex.name,
        vertex.parallelism,
        vertex.parallelism,
        None,
        target,
        None,
        None,
        (reason,),
    )


def _divisor_at_least(parallelism: int, max_parallelism: int) -> int:
    """The smallest divisor of ``max_parallelism`` ≥ ``parallelism`` (up to half of it)."""
    for candidate in range(parallelism, max_parallelism // 2 + 1):
        if max_parallelism % candidate == 0:
            return candidate
    return parallelism


def _topological(vertices: tuple[VertexObservation, ...]) -> list[str]:
    placed: set[str] = set()
    order: list[str] = []
    remaining = [v for v in vertices]
    known = {v.vertex_id for v in vertices}
    while remaining:
        ready = [v for v in remaining if all(i in placed or i not in known for i in v.inputs)]
        ready = ready or remaining[:1]
        for vertex in ready:
            order.append(vertex.vertex_id)
            placed.add(vertex.vertex_id)
        remaining = [v for v in remaining if v.vertex_id not in placed]
    return order


# -- measuring ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Sample:
    time_s: float
    counters: dict[str, dict[str, float]]
    """vertex id → counter → value (records summed, busy/backpressure max over subtasks)."""


class ObservationCollector:
    """Measures ``Observation`` s through the REST client, from Flink's counters.

    Rates come from the difference of cumulative counters (``numRecordsIn``/``Out``
    summed over subtasks, ``accumulateBusyTimeMs`` max over subtasks) between the oldest
    sample inside ``window_s`` and now: they follow a rescale within seconds, where
    Flink's own ``…PerSecond`` meters average over 60 s. A restart of the job empties
    the window. Without those counters (an older Flink) the meters are used.
    """

    def __init__(
        self,
        client: FlinkClient,
        job_id: str,
        *,
        window_s: float = 20.0,
        clock: Callable[[], float] = time.time,
        forecaster: Forecaster | None = None,
        forecast_horizon: int = 3,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.window_s = window_s
        self.clock = clock
        self.forecaster = forecaster
        self.forecast_horizon = forecast_horizon
        self._samples: list[_Sample] = []
        self._running_since_ms = -1
        self._pending_names: dict[str, list[str]] = {}
        self._demand_history: dict[str, list[float]] = {}

    def collect(self) -> Observation:
        job = self.client.job(self.job_id)
        overview = self.client.overview()
        now = self.clock()
        if job.running_since_ms != self._running_since_ms:
            self._samples.clear()
            self._pending_names.clear()
            self._running_since_ms = job.running_since_ms
        running = job.state == "RUNNING" and all(v.status == "RUNNING" for v in job.vertices)
        counters: dict[str, dict[str, float]] = {}
        meters: dict[str, dict[str, float]] = {}
        if running:
            for vertex in job.vertices:
                counters[vertex.id], meters[vertex.id] = self._read(vertex.id)
            # Flink's metric store fills on the first query after a (re)start: a sample
            # without every counter would poison the window, so it is not kept.
            if all(set(COUNTERS) <= set(values) for values in counters.values()):
                self._samples.append(_Sample(now, counters))
            horizon = now - self.window_s
            while len(self._samples) > 2 and self._samples[1].time_s <= horizon:
                self._samples.pop(0)
        first = self._samples[0] if len(self._samples) > 1 else None
        window = now - first.time_s if first is not None else 0.0
        inputs = job.inputs()
        vertices = tuple(
            self._vertex(vertex, inputs[vertex.id], first, counters, meters, window)
            for vertex in job.vertices
        )
        return Observation(
            job_id=self.job_id,
            time_s=now,
            job_state=job.state,
            running_since_s=job.running_since_ms / 1000.0,
            window_s=window,
            vertices=vertices,
            slots_total=overview.slots_total,
            slots_free=overview.slots_available,
        )

    def _read(self, vertex_id: str) -> tuple[dict[str, float], dict[str, float]]:
        if not self._pending_names.get(vertex_id):
            # Looked up until found: user gauges appear only after their first report.
            names = self.client.metric_names(self.job_id, vertex_id)
            self._pending_names[vertex_id] = [n for n in names if n.endswith(PENDING_SUFFIX)]
        pending = self._pending_names.get(vertex_id, [])
        metrics = self.client.subtask_metrics(
            self.job_id, vertex_id, [*COUNTERS, *METERS, *pending]
        )
        values: dict[str, float] = {}
        for name in ("numRecordsIn", "numRecordsOut"):
            if name in metrics:
                values[name] = metrics[name].sum
        for name in ("accumulateBusyTimeMs", "accumulateBackPressuredTimeMs"):
            if name in metrics:
                values[name] = metrics[name].max
        if pending and all(name in metrics for name in pending):
            values[PENDING_SUFFIX] = sum(metrics[name].sum for name in pending)
        meter_values = {
            "numRecordsInPerSecond": metrics["numRecordsInPerSecond"].sum
            if "numRecordsInPerSecond" in metrics
            else math.nan,
            "numRecordsOutPerSecond": metrics["numRecordsOutPerSecond"].sum
            if "numRecordsOutPerSecond" in metrics
            else math.nan,
            "busyTimeMsPerSecond": metrics["busyTimeMsPerSecond"].max
            if "busyTimeMsPerSecond" in metrics
            else math.nan,
        }
        return values, meter_values

    def _vertex(
        self,
        vertex: JobVertex,
        edges: tuple[PlanInput, ...],
        first: _Sample | None,
        counters: Mapping[str, Mapping[str, float]],
        meters: Mapping[str, Mapping[str, float]],
        window: float,
    ) -> VertexObservation:
        vertex_id = vertex.id
        base = VertexObservation(
            vertex_id=vertex_id,
            name=vertex.name,
            parallelism=vertex.parallelism,
            max_parallelism=vertex.max_parallelism,
            inputs=tuple(edge.id for edge in edges),
            hash_input=any(edge.ship_strategy.upper() == "HASH" for edge in edges),
            status=vertex.status,
            slot_sharing_group=vertex.slot_sharing_group,
        )
        now_values = counters.get(vertex_id, {})
        if first is None or window <= 0:
            return base

        def rate(name: str) -> float | None:
            before = first.counters.get(vertex_id, {}).get(name)
            after = now_values.get(name)
            if before is None or after is None:
                return None
            return max(after - before, 0.0) / window

        def meter(name: str) -> float | None:
            value = meters.get(vertex_id, {}).get(name, math.nan)
            return None if math.isnan(value) else value

        busy = rate("accumulateBusyTimeMs")
        records_in = rate("numRecordsIn")
        records_out = rate("numRecordsOut")
        pending = now_values.get(PENDING_SUFFIX)
        growth = None
        if pending is not None:
            before = first.counters.get(vertex_id, {}).get(PENDING_SUFFIX, pending)
            growth = (pending - before) / window
        forecast = None
        if not edges or pending is not None:
            demand = (records_out or 0.0) + (growth or 0.0)
            forecast = self._forecast(vertex_id, demand)
        return replace(
            base,
            records_in_per_s=records_in
            if records_in is not None
            else meter("numRecordsInPerSecond"),
            records_out_per_s=records_out
            if records_out is not None
            else meter("numRecordsOutPerSecond"),
            busy_ms_per_s=min(busy, 1000.0) if busy is not None else meter("busyTimeMsPerSecond"),
            backpressured_ms_per_s=rate("accumulateBackPressuredTimeMs"),
            pending_records=pending,
            pending_growth_per_s=growth,
            forecast_records_per_s=forecast,
        )

    def _forecast(self, vertex_id: str, demand: float) -> float | None:
        """The forecaster's highest predicted demand over the horizon (None without one)."""
        history = self._demand_history.setdefault(vertex_id, [])
        history.append(demand)
        del history[:-256]
        if self.forecaster is None or len(history) < 2:
            return None
        from kubesage.core.forecast.panel import MetricPanel

        values = np.asarray(history, dtype=np.float64).reshape(-1, 1, 1)
        panel = MetricPanel(
            entities=(vertex_id,),
            metrics=("records_per_s",),
            start_s=0.0,
            step_s=1.0,
            values=values,
            mask=np.ones_like(values, dtype=bool),
            alive=np.ones(values.shape[:2], dtype=bool),
        )
        try:
            self.forecaster.fit(panel, panel.steps)
            forecast = self.forecaster.predict(panel, self.forecast_horizon)
        except Exception as exc:  # a forecaster is optional: fall back to observed rates
            log.warning("forecaster %s failed (%s); using observed rates", type(exc).__name__, exc)
            return None
        return float(np.max(forecast.values[:, 0, 0]))


# -- the control loop ---------------------------------------------------------------


@dataclass
class LoopStats:
    ticks: int = 0
    decisions: int = 0
    rescales: int = 0
    failed_rescales: int = 0
    errors: int = 0
    last_error: str = ""


DecisionCallback = Callable[[ScalingDecision, "RescaleOutcome | None"], None]


def _running_job(client: FlinkClient) -> str | None:
    running = [job.job_id for job in client.jobs() if job.state == "RUNNING"]
    return running[0] if len(running) == 1 else None


def run_autoscaler(
    client: FlinkClient,
    job_id: str | None,
    *,
    dry_run: bool,
    forecaster: Forecaster | None = None,
    on_decision: DecisionCallback | None = None,
    stop: threading.Event | None = None,
    settings: AutoscalerSettings | None = None,
    interval_s: float = 5.0,
    window_s: float = 20.0,
    rescale_timeout_s: float = 90.0,
    max_ticks: int | None = None,
    clock: Callable[[], float] = time.time,
) -> LoopStats:
    """Observe, decide and (unless ``dry_run``) rescale every ``interval_s`` until ``stop``.

    ``job_id=None`` follows the only RUNNING job. Each decision goes to ``on_decision``
    with the rescale outcome (None when nothing was applied).
    """
    from kubesage.adapters.flink.rescale import rescale_in_place

    stop = stop or threading.Event()
    autoscaler = Autoscaler(settings)
    stats = LoopStats()
    collector: ObservationCollector | None = None
    while not stop.is_set() and (max_ticks is None or stats.ticks < max_ticks):
        stats.ticks += 1
        try:
            target = job_id or _running_job(client)
            if target is None:
                log.info("no single RUNNING job to follow; waiting")
            else:
                if collector is None or collector.job_id != target:
                    collector = ObservationCollector(
                        client, target, window_s=window_s, clock=clock, forecaster=forecaster
                    )
                decision = autoscaler.decide(collector.collect())
                stats.decisions += 1
                outcome = None
                if decision.action == "rescale" and not dry_run:
                    old = {v.vertex_id: v.current for v in decision.vertices}
                    outcome = rescale_in_place(
                        client, target, decision.changes, timeout_s=rescale_timeout_s
                    )
                    if outcome.succeeded:
                        stats.rescales += 1
                        autoscaler.record_rescale(clock(), old, decision.changes)
                    else:
                        stats.failed_rescales += 1
                if on_decision is not None:
                    on_decision(decision, outcome)
        except FlinkError as exc:
            stats.errors += 1
            stats.last_error = str(exc)
            log.warning("autoscaler tick %d failed (%s); retrying next tick", stats.ticks, exc)
        stop.wait(interval_s)
    return stats
