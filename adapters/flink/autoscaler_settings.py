"""How the Flink autoscaler is tuned: :class:`AutoscalerSettings`, validated once.

Read by the decision (:mod:`~kubesage.adapters.flink.autoscaler`) and its guard rails
(:mod:`~kubesage.adapters.flink.guard_rails`); the CLI and the control loop build it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesage.adapters.flink.observation import VertexObservation
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
    """Consecutive observations that must propose a change in the same direction."""
    min_window_s: float = 5.0
    """Rates over a shorter window (the first seconds after a restart) decide nothing;
    keep it below the collector's window (``window_s``, 20 s by default)."""
    scale_down_delay_s: float = 300.0
    """A scale-down must be proposed this long before it happens."""
    oscillation_window_s: float = 600.0
    """No vertex reverses the direction of its last rescale within this window."""
    catch_up_s: float = 300.0
    """A backlog is planned to drain within this time."""
    saturated_step: float = 2.0
    """Factor a bottleneck grows by per rescale while its source is saturated (no backlog
    metric, backpressured): bounded probing rather than a guess at a demand nobody can read."""
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
        if self.min_window_s < 0:
            raise ConfigError("must be ≥ 0", field="min_window_s")
        if self.min_parallelism < 1:
            raise ConfigError("must be ≥ 1", field="min_parallelism")
        if self.max_parallelism is not None and self.max_parallelism < self.min_parallelism:
            raise ConfigError(
                f"must be ≥ min_parallelism ({self.min_parallelism}), got {self.max_parallelism}",
                field="max_parallelism",
            )
        if self.catch_up_s <= 0:
            raise ConfigError("must be > 0", field="catch_up_s")
        if self.saturated_step <= 1.0:
            raise ConfigError("must be > 1", field="saturated_step")

    def excludes(self, vertex: VertexObservation) -> bool:
        return vertex.vertex_id in self.exclude or vertex.name in self.exclude
