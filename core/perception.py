"""What a control loop reads the world through: the :class:`Collector` protocol and the
:class:`Snapshot` it returns.

It sits at the core's top level, owned by neither the Kubernetes layer
(:class:`~kubesage.core.k8s.collector.KubernetesCollector`) nor the telemetry sources
(:mod:`kubesage.core.telemetry`), so a loop, and the simulator that drives it, use
collectors without importing either.

A collector reads one outside source (the Kubernetes API, Prometheus, NVML, Flink's
REST API) and returns a :class:`Snapshot` of typed data. When its source fails it does
not raise into the decision path: it returns the last good snapshot marked ``stale``
(with the reason) and counts the failure, so the scheduler keeps deciding on slightly
old data instead of none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[T_co]):
    """What a collector saw, when (unix seconds), and whether it is a stale fallback."""

    data: T_co
    taken_at: float
    stale: bool = False
    reason: str | None = None  # why it is stale; None when fresh


@runtime_checkable
class Collector(Protocol[T_co]):
    """A source of snapshots. ``collect`` never raises for a failing source once a good
    snapshot exists; before the first good one it raises a ``DependencyError``."""

    @property
    def name(self) -> str: ...

    @property
    def failures(self) -> int:
        """How many collections failed and fell back (a counter, exported as a metric)."""
        ...

    def collect(self) -> Snapshot[T_co]: ...
