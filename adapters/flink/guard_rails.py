"""The autoscaler's guard rails and what they remember of a job between decisions.

A proposed parallelism becomes a rescale only when ``stable_observations`` consecutive
observations proposed a change in the same direction (the smallest of those changes is
made), when it does not reverse the vertex's last rescale within
``oscillation_window_s``, and — for a scale-down — when it has been proposed for
``scale_down_delay_s``. :class:`GuardRailMemory` is immutable: each decision returns
the memory for the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kubesage.adapters.flink.autoscaler_settings import AutoscalerSettings
from kubesage.adapters.flink.observation import VertexObservation


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


def guard(
    now: float,
    vertex: VertexObservation,
    memory: VertexMemory,
    proposed: int,
    reasons: list[str],
    settings: AutoscalerSettings,
) -> tuple[int, VertexMemory]:
    """The parallelism the guard rails allow for a proposed change, and the memory after."""
    sides = {(ideal > vertex.parallelism) - (ideal < vertex.parallelism) for ideal in memory.ideals}
    if len(memory.ideals) < settings.stable_observations or len(sides) > 1:
        reasons.append(
            f"waiting for stable metrics: last proposals {list(memory.ideals)}, need "
            f"{settings.stable_observations} on the same side of {vertex.parallelism}"
        )
        return vertex.parallelism, memory
    # Proposals that agree on the direction but not the size (a probe beside a
    # measurement, noise): the smallest change they all support.
    agreed = min(memory.ideals) if proposed > vertex.parallelism else max(memory.ideals)
    if agreed != proposed:
        reasons.append(f"last proposals {list(memory.ideals)}: the smallest change, {agreed}")
        proposed = agreed
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
