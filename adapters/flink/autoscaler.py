"""Backpressure-driven parallelism for Flink jobs (DS2's rule, with guard rails).

The decision is a pure function, :func:`decide`: it takes an
:class:`~kubesage.adapters.flink.observation.Observation` — the job's topology and, per
vertex, rates measured over a window — and the :class:`GuardRailMemory` of earlier
decisions, and returns a :class:`ScalingDecision` whose reasons say why, with the
memory to pass to the next call. It does no I/O and reads no clock. Per vertex ``v``:

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

:class:`Autoscaler` keeps the memory between calls for callers that want an object;
the control loop is :func:`~kubesage.adapters.flink.autoscale_loop.run_autoscaler`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from kubesage.adapters.flink.observation import Observation, VertexObservation
from kubesage.core.errors import ConfigError


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

    def excludes(self, vertex: VertexObservation) -> bool:
        return vertex.vertex_id in self.exclude or vertex.name in self.exclude


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


@dataclass(frozen=True)
class VertexMemory:
    """What the guard rails remember of one vertex between decisions."""

    ideals: tuple[int, ...] = ()
    """The rule's last ``stable_observations`` proposals, oldest first."""
    scale_down_since_s: float | None = None
    """When the scale-down now pending was first proposed."""
    last_rescale_s: float | None = None
    last_direction: int = 0
    """+1: the last rescale went up, -1: down, 0: none yet."""


@dataclass(frozen=True)
class GuardRailMemory:
    """The guard rails' memory of a job: vertex id → :class:`VertexMemory` (immutable)."""

    vertices: Mapping[str, VertexMemory] = field(default_factory=dict)

    def of(self, vertex_id: str) -> VertexMemory:
        return self.vertices.get(vertex_id, VertexMemory())

    def after_rescale(
        self, time_s: float, old: Mapping[str, int], new: Mapping[str, int]
    ) -> GuardRailMemory:
        """The memory once a rescale from ``old`` to ``new`` was applied at ``time_s``.

        The vertices that changed remember when and which way (the oscillation guard);
        every pending proposal is forgotten: the next ones are measured on the new job.
        """
        vertices = dict(self.vertices)
        for vertex_id, parallelism in new.items():
            memory = vertices.get(vertex_id, VertexMemory())
            before = old.get(vertex_id, parallelism)
            if parallelism != before:
                memory = replace(
                    memory, last_rescale_s=time_s, last_direction=1 if parallelism > before else -1
                )
            vertices[vertex_id] = memory
        return GuardRailMemory(
            {
                vertex_id: replace(memory, ideals=(), scale_down_since_s=None)
                for vertex_id, memory in vertices.items()
            }
        )


def decide(
    observation: Observation,
    memory: GuardRailMemory | None = None,
    settings: AutoscalerSettings | None = None,
) -> tuple[ScalingDecision, GuardRailMemory]:
    """The scaling decision for ``observation`` and the memory for the next call.

    Pure: the same observation, memory and settings always give the same answer, and
    ``memory`` itself is never changed. A skipped observation leaves the memory as it was.
    """
    memory = memory or GuardRailMemory()
    settings = settings or AutoscalerSettings()
    skip = _skip_reason(observation, settings)
    if skip:
        kept = tuple(_keep(v, skip) for v in observation.vertices)
        skipped = ScalingDecision(observation.job_id, observation.time_s, "skip", kept, (skip,))
        return skipped, memory
    targets = _targets(observation, settings)
    remembered = dict(memory.vertices)
    decisions = []
    for vertex in observation.vertices:
        vertex_decision, vertex_memory = _vertex(
            observation, vertex, targets, memory.of(vertex.vertex_id), settings
        )
        decisions.append(vertex_decision)
        if vertex_memory is not None:
            remembered[vertex.vertex_id] = vertex_memory
    decisions, slot_reason = _fit_slots(observation, decisions)
    changed = any(d.proposed != d.current for d in decisions)
    reasons = [
        f"rates over {observation.window_s:.0f} s, target utilisation "
        f"{settings.target_utilisation:.2f}"
    ]
    if slot_reason:
        reasons.append(slot_reason)
    decision = ScalingDecision(
        observation.job_id,
        observation.time_s,
        "rescale" if changed else "hold",
        tuple(decisions),
        tuple(reasons),
    )
    return decision, GuardRailMemory(remembered)


class Autoscaler:
    """:func:`decide` with its memory kept between calls."""

    def __init__(self, settings: AutoscalerSettings | None = None) -> None:
        self.settings = settings or AutoscalerSettings()
        self.memory = GuardRailMemory()

    def decide(self, observation: Observation) -> ScalingDecision:
        decision, self.memory = decide(observation, self.memory, self.settings)
        return decision

    def record_rescale(self, time_s: float, old: Mapping[str, int], new: Mapping[str, int]) -> None:
        """Notes an applied rescale (for the oscillation guard) and clears pending proposals."""
        self.memory = self.memory.after_rescale(time_s, old, new)


# -- steps --------------------------------------------------------------------------


def _skip_reason(observation: Observation, settings: AutoscalerSettings) -> str | None:
    if observation.job_state != "RUNNING":
        return f"job is {observation.job_state}, not RUNNING"
    not_running = [v.name for v in observation.vertices if v.status != "RUNNING"]
    if not_running:
        return f"vertices not RUNNING yet: {', '.join(not_running)}"
    since = observation.time_s - observation.running_since_s
    if since < settings.settle_s:
        return f"job (re)started {since:.0f} s ago; metrics count after {settings.settle_s:.0f} s"
    if observation.window_s <= 0:
        return "no measurement window yet (rates need two samples)"
    window_start = observation.time_s - observation.window_s - observation.running_since_s
    if window_start < settings.settle_s:
        return (
            f"the measurement window starts {window_start:.0f} s after the (re)start; "
            f"it must start after {settings.settle_s:.0f} s"
        )
    missing = [
        v.name
        for v in observation.vertices
        if not settings.excludes(v)
        and (
            v.busy_ms_per_s is None
            or (v.records_in_per_s if not v.is_source else v.records_out_per_s) is None
        )
    ]
    if missing:
        return f"metrics missing for {', '.join(missing)}"
    return None


def _targets(
    observation: Observation, settings: AutoscalerSettings
) -> dict[str, tuple[float, float]]:
    """Vertex id → (target records in/s, target records out/s), sources first."""
    by_id = {v.vertex_id: v for v in observation.vertices}
    targets: dict[str, tuple[float, float]] = {}
    for vertex_id in _topological(observation.vertices):
        vertex = by_id[vertex_id]
        observed_in = vertex.records_in_per_s or 0.0
        observed_out = vertex.records_out_per_s or 0.0
        target_in = sum(targets[i][1] for i in vertex.inputs if i in targets)
        if vertex.is_source or vertex.pending_records is not None:
            demand = observed_out + (vertex.pending_growth_per_s or 0.0)
            if vertex.forecast_records_per_s is not None:
                demand = max(demand, vertex.forecast_records_per_s)
            backlog = max(vertex.pending_records or 0.0, 0.0)
            target_out = max(demand, 0.0) + backlog / settings.catch_up_s
            targets[vertex_id] = (target_in or observed_in, target_out)
            continue
        selectivity = observed_out / observed_in if observed_in > 0 else 1.0
        targets[vertex_id] = (target_in, target_in * selectivity)
    return targets


def _vertex(
    observation: Observation,
    vertex: VertexObservation,
    targets: Mapping[str, tuple[float, float]],
    memory: VertexMemory,
    settings: AutoscalerSettings,
) -> tuple[VertexDecision, VertexMemory | None]:
    """The vertex's decision and its memory afterwards (None: nothing to remember)."""
    target_in, target_out = targets[vertex.vertex_id]
    if settings.excludes(vertex):
        return _keep(vertex, "excluded from scaling", target=target_in), None
    assert vertex.busy_ms_per_s is not None
    rate = vertex.records_out_per_s if vertex.is_source else vertex.records_in_per_s
    target = target_out if vertex.is_source else target_in
    busy = min(max(vertex.busy_ms_per_s, 0.0), 1000.0) / 1000.0
    if not rate or busy <= 0.0:
        return _keep(vertex, "no records processed in the window", target=target), None
    true_rate = rate / vertex.parallelism / busy
    utilisation = target / (true_rate * vertex.parallelism)
    low = settings.target_utilisation - settings.utilisation_boundary
    high = settings.target_utilisation + settings.utilisation_boundary
    reasons = [
        f"true rate {true_rate:.1f} rec/s per subtask (busy {busy * 1000:.0f} ms/s), "
        f"target {target:.1f} rec/s, utilisation {utilisation:.2f}"
    ]
    ideal = math.ceil(target / (true_rate * settings.target_utilisation) - 1e-9)
    ideal = _clamp(vertex, ideal, reasons, settings)
    if low <= utilisation <= high:
        ideal = vertex.parallelism
        reasons.append(f"within {low:.2f}–{high:.2f}: keep")
    memory = replace(memory, ideals=(*memory.ideals, ideal)[-settings.stable_observations :])
    proposed = ideal
    if proposed != vertex.parallelism:
        proposed, memory = _guard(observation.time_s, vertex, memory, proposed, reasons, settings)
    else:
        memory = replace(memory, scale_down_since_s=None)
    decision = VertexDecision(
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
    return decision, memory


def _clamp(
    vertex: VertexObservation, ideal: int, reasons: list[str], settings: AutoscalerSettings
) -> int:
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
    now: float,
    vertex: VertexObservation,
    memory: VertexMemory,
    proposed: int,
    reasons: list[str],
    settings: AutoscalerSettings,
) -> tuple[int, VertexMemory]:
    """The parallelism the guard rails allow for a proposed change, and the memory after."""
    if len(memory.ideals) < settings.stable_observations or len(set(memory.ideals)) > 1:
        reasons.append(
            f"waiting for stable metrics: last proposals {list(memory.ideals)}, need "
            f"{settings.stable_observations} equal"
        )
        return vertex.parallelism, memory
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
        return vertex.parallelism, memory
    if direction < 0:
        since = now if memory.scale_down_since_s is None else memory.scale_down_since_s
        memory = replace(memory, scale_down_since_s=since)
        waited = now - since
        if waited < settings.scale_down_delay_s:
            reasons.append(
                f"scale-down to {proposed} deferred: proposed for {waited:.0f} s, "
                f"needs {settings.scale_down_delay_s:.0f} s"
            )
            return vertex.parallelism, memory
    else:
        memory = replace(memory, scale_down_since_s=None)
    reasons.append(f"scale {'up' if direction > 0 else 'down'} to {proposed}")
    return proposed, memory


def _fit_slots(
    observation: Observation, decisions: list[VertexDecision]
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
    spare = capacity - len(groups)  # every group keeps at least one slot
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
