"""Backpressure-driven parallelism for Flink jobs (DS2's rule, with guard rails).

The decision is a pure function, :func:`decide`: it takes an
:class:`~kubesage.adapters.flink.observation.Observation` — the job's topology and, per
vertex, rates measured over a window — and the :class:`GuardRailMemory` of earlier
decisions, and returns a :class:`ScalingDecision` whose reasons say why, with the
memory to pass to the next call. It does no I/O and reads no clock. Per vertex ``v``:

- *true processing rate* per subtask = records in/s per subtask ÷ busy fraction, where
  the busy fraction is ``busyTimeMsPerSecond / 1000`` taken as the max over subtasks
  (the slowest subtask bounds the vertex); sources use records out;
- *target rates* (:mod:`~kubesage.adapters.flink.demand`), in topological order from
  the sources: a source's target is its demand — the observed (or, with a forecaster,
  the forecast) output rate plus the growth of its backlog (``pendingRecords``) — plus
  ``backlog / catch_up_s``; every other vertex receives the sum of its inputs' targets
  and passes on ``target × (out / in)``;
- *parallelism* = ``ceil(target / true rate per subtask / target utilisation)``, clamped
  to ``[min_parallelism, max parallelism]`` and, for a vertex behind a hash (keyBy)
  edge, raised to a divisor of its max parallelism so key groups spread evenly.

Missing metrics hold only the vertex that lacks them, as Flink's operator autoscaler
does: a vertex without busy time or without its record counts keeps its parallelism
(a source: "held"), the others are still scaled from their own busy time and the
records they receive, and the reasons say what was missing and what was assumed. A
vertex that counted no records, is not busy (below ``BUSY_WITHOUT_RECORDS_MS``) and
owes nothing is idle: it goes to ``min_parallelism`` (after the scale-down delay); one
that is busy without counting records (a source chained into its sink has no network
input or output) is held. Records flowing at busy time 0 is an unbounded true rate, as
Flink's operator autoscaler reads it: ``min_parallelism`` too. A FINISHED vertex (a
bounded input that has ended) keeps its parallelism and emits nothing more; the rest of
the job is scaled without it.

A *saturated* source — no backlog metric, backpressured — emits only what the
bottleneck takes, so its demand is only a lower bound. Then a vertex busier than the
target utilisation is scaled up by ``saturated_step`` per rescale (bounded, re-measured
after each: once the backpressure lifts the demand shows itself and the ordinary rule
takes over), and nothing downstream of it is scaled down on that figure (not even an
idle or unboundedly fast vertex).

Guard rails: no decision while the job is not RUNNING or within ``settle_s`` of its
last (re)start or over a window shorter than ``min_window_s``; a change must be
proposed, in the same direction, by ``stable_observations`` consecutive observations
(the smallest of those changes is made); a vertex whose utilisation is within
``target ± boundary`` keeps its parallelism; scale-downs wait ``scale_down_delay_s``;
no vertex reverses a rescale within ``oscillation_window_s``; and a plan that needs
more task slots than the cluster has is capped to the slots there are, split among the
slot-sharing groups by water-filling (:mod:`~kubesage.adapters.flink.slot_sharing`),
saying so.

:class:`Autoscaler` keeps the memory between calls for callers that want an object;
the control loop is :func:`~kubesage.adapters.flink.autoscale_loop.run_autoscaler`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from kubesage.adapters.flink.autoscaler_settings import AutoscalerSettings
from kubesage.adapters.flink.demand import JobDemand, VertexDemand, job_demand
from kubesage.adapters.flink.guard_rails import GuardRailMemory, VertexMemory, guard
from kubesage.adapters.flink.observation import (
    SETTLED_STATUSES,
    Observation,
    VertexObservation,
)
from kubesage.adapters.flink.slot_sharing import GroupNeed, share_slots

BUSY_WITHOUT_RECORDS_MS = 100.0
"""Busy ms/s from which a vertex that counts no records is working on records the
counters do not see (a source chained into its sink has no network input or output):
the top of Flink's "ok" level (10 %). Below it, no records and no demand is idleness."""

__all__ = [
    "Autoscaler",
    "AutoscalerSettings",
    "GuardRailMemory",
    "ScalingDecision",
    "VertexDecision",
    "decide",
]


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


def decide(
    observation: Observation,
    memory: GuardRailMemory | None = None,
    settings: AutoscalerSettings | None = None,
) -> tuple[ScalingDecision, GuardRailMemory]:
    """The scaling decision for ``observation`` and the memory for the next call.

    Pure: the same observation, memory and settings always give the same answer, and
    ``memory`` itself is never changed. A skipped observation (nothing measured) makes
    the memory forget its pending proposals, as a vertex held for a missing metric does:
    the stability rule and the scale-down delay count observations back to back.
    """
    memory = memory or GuardRailMemory()
    settings = settings or AutoscalerSettings()
    skip = _skip_reason(observation, settings)
    if skip:
        kept = tuple(_keep(v, skip) for v in observation.vertices)
        skipped = ScalingDecision(observation.job_id, observation.time_s, "skip", kept, (skip,))
        return skipped, GuardRailMemory(
            {vertex_id: _forget(vertex) for vertex_id, vertex in memory.vertices.items()}
        )
    demand = job_demand(observation, settings.catch_up_s)
    remembered = dict(memory.vertices)
    decisions = []
    for vertex in observation.vertices:
        vertex_decision, vertex_memory = _vertex(
            observation, vertex, demand.of(vertex.vertex_id), memory.of(vertex.vertex_id), settings
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
    reasons.extend(_job_notes(observation, demand, settings))
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
    not_running = [v.name for v in observation.vertices if v.status not in SETTLED_STATUSES]
    if not_running:
        return f"vertices not RUNNING yet: {', '.join(not_running)}"
    active = [v for v in observation.vertices if not v.finished]
    if not active:
        return "every vertex is FINISHED: nothing left to scale"
    since = observation.since_restart_s
    if since < settings.settle_s:
        return f"job (re)started {since:.0f} s ago; metrics count after {settings.settle_s:.0f} s"
    if observation.window_s <= 0:
        return "no measurement window yet (rates need two samples)"
    if observation.window_s < settings.min_window_s:
        return (
            f"measurement window {observation.window_s:.0f} s; decisions need "
            f"{settings.min_window_s:.0f} s"
        )
    window_start = observation.since_restart_s - observation.window_s
    if window_start < settings.settle_s:
        return (
            f"the measurement window starts {window_start:.0f} s after the (re)start; "
            f"it must start after {settings.settle_s:.0f} s"
        )
    if all(_missing(v) for v in active):
        return "no vertex reports busy time and record counts yet"
    return None


def _missing(vertex: VertexObservation) -> list[str]:
    """The metrics the rule needs that this vertex did not report, in Flink's names."""
    missing = []
    if vertex.busy_ms_per_s is None:
        missing.append("busy time (busyTimeMsPerSecond)")
    if vertex.is_source and vertex.records_out_per_s is None:
        missing.append("records out (numRecordsOut)")
    if not vertex.is_source and vertex.records_in_per_s is None:
        missing.append("records in (numRecordsIn)")
    return missing


def _job_notes(
    observation: Observation, demand: JobDemand, settings: AutoscalerSettings
) -> list[str]:
    """The job-wide modes the decision ran in: finished vertices, saturated sources,
    vertices held for missing metrics."""
    notes = []
    finished = [v.name for v in observation.vertices if v.finished]
    if finished:
        notes.append(
            f"FINISHED (input ended), kept at their parallelism: {', '.join(finished)}; "
            "the rest is scaled without them"
        )
    if demand.held_back:
        notes.append(
            f"saturated: {', '.join(demand.held_back)} (no backlog metric, no room to emit "
            f"more): demand is a lower bound; bottlenecks grow ×{settings.saturated_step:g} "
            "per rescale and are re-measured after each; no scale-down on that figure"
        )
    own = [name for name in demand.saturated if name not in demand.held_back]
    if own:
        notes.append(
            f"saturated by its own busy time: {', '.join(own)} (no backlog metric): its "
            f"demand is a lower bound and it grows ×{settings.saturated_step:g} per rescale; "
            "its consumers receive all it emits, so their demand is exact"
        )
    missing = {
        v.name: _missing(v)
        for v in observation.vertices
        if not settings.excludes(v) and not v.finished
    }
    held = [f"{name} ({', '.join(metrics)})" for name, metrics in missing.items() if metrics]
    if held:
        notes.append(f"metrics missing, held: {'; '.join(held)}")
    return notes


def _vertex(
    observation: Observation,
    vertex: VertexObservation,
    demand: VertexDemand,
    memory: VertexMemory,
    settings: AutoscalerSettings,
) -> tuple[VertexDecision, VertexMemory | None]:
    """The vertex's decision and its memory afterwards (None: nothing to remember)."""
    target = demand.target_out if vertex.is_source else demand.target_in
    if vertex.finished:
        return _keep(vertex, "FINISHED: its input has ended; keeps its parallelism"), None
    if settings.excludes(vertex):
        return _keep(vertex, "excluded from scaling", target=target), None
    # A vertex held for want of a measurement forgets its pending proposals: the
    # stability rule and the scale-down delay count observations back to back, and a
    # gap in them is not a proposal kept.
    unmeasured = _forget(memory)
    missing = _missing(vertex)
    if missing:
        role = "source held" if vertex.is_source else "held"
        return _keep(
            vertex, f"{' and '.join(missing)} not reported: {role}", *demand.notes, target=target
        ), unmeasured
    if target is None:
        return _keep(vertex, "demand unknown: held", *demand.notes, target=target), unmeasured
    assert vertex.busy_ms_per_s is not None
    rate = vertex.records_out_per_s if vertex.is_source else vertex.records_in_per_s
    assert rate is not None
    busy_ms = min(max(vertex.busy_ms_per_s, 0.0), 1000.0)
    reasons = list(demand.notes)
    if rate <= 0.0:
        owed = f" (demand {target:.1f} rec/s)" if target > 0.0 else ""
        if busy_ms >= BUSY_WITHOUT_RECORDS_MS:
            # Working on something the record counters do not see: no rate to scale on.
            return _keep(
                vertex,
                f"busy {busy_ms:.0f} ms/s but no records counted in the window{owed}: held",
                *demand.notes,
                target=target,
            ), unmeasured
        if target > 0.0:
            return _keep(
                vertex, f"no records processed in the window{owed}", *demand.notes, target=target
            ), unmeasured
        true_rate, utilisation = None, 0.0
        reasons.append(f"idle: no records in the window and no demand (busy {busy_ms:.0f} ms/s)")
        ideal = _clamp(vertex, settings.min_parallelism, reasons, settings)
        ideal = _within_boundary(vertex, ideal, utilisation, demand, reasons, settings)
    elif busy_ms <= 0.0:
        # Records flow and no busy time registers: Flink's operator autoscaler reads this
        # as an unbounded true rate, so the smallest parallelism takes the demand.
        true_rate, utilisation = None, 0.0
        reasons.append(
            f"busy 0 ms/s at {rate:.1f} rec/s: true rate unbounded (as Flink's operator "
            f"autoscaler reads it), so target {target:.1f} rec/s needs the minimum"
        )
        ideal = _clamp(vertex, settings.min_parallelism, reasons, settings)
        ideal = _within_boundary(vertex, ideal, utilisation, demand, reasons, settings)
    else:
        busy = busy_ms / 1000.0
        true_rate = rate / vertex.parallelism / busy
        utilisation = target / (true_rate * vertex.parallelism)
        reasons.append(
            f"true rate {true_rate:.1f} rec/s per subtask (busy {busy_ms:.0f} ms/s), "
            f"target {target:.1f} rec/s, utilisation {utilisation:.2f}"
        )
        ideal = math.ceil(target / (true_rate * settings.target_utilisation) - 1e-9)
        ideal = _clamp(vertex, ideal, reasons, settings)
        ideal = _within_boundary(vertex, ideal, utilisation, demand, reasons, settings)
    memory = replace(memory, ideals=(*memory.ideals, ideal)[-settings.stable_observations :])
    proposed = ideal
    if proposed != vertex.parallelism:
        proposed, memory = guard(observation.time_s, vertex, memory, proposed, reasons, settings)
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


def _within_boundary(
    vertex: VertexObservation,
    ideal: int,
    utilisation: float,
    demand: VertexDemand,
    reasons: list[str],
    settings: AutoscalerSettings,
) -> int:
    """The rule's ideal after the utilisation boundary and, when the demand is only a
    lower bound (a saturated source upstream), after bounded probing."""
    if demand.lower_bound:
        if utilisation > settings.target_utilisation:
            probe = _clamp(
                vertex,
                math.ceil(vertex.parallelism * settings.saturated_step - 1e-9),
                reasons,
                settings,
            )
            grown = max(probe, ideal)
            reasons.append(
                f"demand is a lower bound (saturated source): ×{settings.saturated_step:g} "
                f"to {grown}, re-measured after the rescale"
            )
            return grown
        if ideal < vertex.parallelism:
            reasons.append("demand is a lower bound (saturated source): no scale-down")
        return max(ideal, vertex.parallelism)
    low = settings.target_utilisation - settings.utilisation_boundary
    high = settings.target_utilisation + settings.utilisation_boundary
    if low <= utilisation <= high:
        reasons.append(f"within {low:.2f}–{high:.2f}: keep")
        return vertex.parallelism
    return ideal


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
        aligned = _divisor_at_least(clamped, vertex.max_parallelism, upper)
        if aligned != clamped:
            reasons.append(
                f"{clamped} raised to {aligned}, a divisor of max parallelism "
                f"{vertex.max_parallelism} (hash input: even key groups)"
            )
            clamped = aligned
    return clamped


def _fit_slots(
    observation: Observation, decisions: list[VertexDecision]
) -> tuple[list[VertexDecision], str | None]:
    """Caps the plan to the slots that exist; vertices of one slot-sharing group share,
    and the groups split the slots by water-filling (:mod:`slot_sharing`)."""
    groups: dict[str, list[int]] = {}
    by_id = {v.vertex_id: v for v in observation.vertices}
    for index, decision in enumerate(decisions):
        groups.setdefault(by_id[decision.vertex_id].slot_sharing_group, []).append(index)
    needs = {
        name: GroupNeed(
            held=max(decisions[i].current for i in members),
            wanted=max(decisions[i].proposed for i in members),
        )
        for name, members in groups.items()
    }
    capacity = observation.slots_free + sum(need.held for need in needs.values())
    needed = sum(need.wanted for need in needs.values())
    if needed <= capacity:
        return decisions, None
    allowed = share_slots(needs, capacity)
    capped = list(decisions)
    for name, members in groups.items():
        for i in members:
            decision = capped[i]
            if decision.proposed > allowed[name] and decision.proposed > decision.current:
                limit = max(allowed[name], decision.current)
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


def _keep(
    vertex: VertexObservation, reason: str, *notes: str, target: float | None = None
) -> VertexDecision:
    return VertexDecision(
        vertex.vertex_id,
        vertex.name,
        vertex.parallelism,
        vertex.parallelism,
        None,
        target,
        None,
        None,
        (reason, *notes),
    )


def _forget(memory: VertexMemory) -> VertexMemory:
    """``memory`` without its pending proposals (the last rescale is kept)."""
    return replace(memory, ideals=(), scale_down_since_s=None)


def _divisor_at_least(parallelism: int, max_parallelism: int, upper: int) -> int:
    """The smallest divisor of ``max_parallelism`` ≥ ``parallelism`` and ≤ ``upper`` (the
    clamp's bound), up to half of ``max_parallelism``; ``parallelism`` when none is."""
    for candidate in range(parallelism, min(upper, max_parallelism // 2) + 1):
        if max_parallelism % candidate == 0:
            return candidate
    return parallelism
