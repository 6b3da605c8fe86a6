"""What a reconciler sees on one tick: an immutable view of the world model.

The loop builds one :class:`WorldView` per tick from its collectors' snapshots and its
world model, and gives every reconciler the same view (plus that reconciler's own
memory from its previous tick). Nothing in a view may be changed: ``state`` is a copy
of the loop's ClusterState made for this tick — a reconciler that wants a what-if
(place these pods elsewhere, then see whether that one fits) copies it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from kubesage.core.loop.actions import ObjectRef, PodRef
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import Placement, PodRequest


@dataclass(frozen=True)
class PodInfo:
    """A pod the loop knows: its request and, when running, where it is."""

    ref: PodRef
    request: PodRequest
    placement: Placement | None = None
    """None while the pod is pending."""
    owner: ObjectRef | None = None
    """The workload that owns it (Job, PyTorchJob, FlinkDeployment …), when known."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    terminating: bool = False
    """Its deletion has begun (``metadata.deletionTimestamp``): it still holds its room
    until its containers stop, and moving it would do nothing."""
    gang: str | None = None
    """The named gang (PodGroup) the pod belongs to, as the secondary scheduler reads its
    annotations; None for a lone pod. Gangs are placed whole (``gpu-gang``), never by
    the reconcilers that place lone pods."""
    loop_places: bool = False
    """True when no other scheduler places this pod while it is pending, so the loop's
    reconcilers bind it (the embedded cluster, the simulator)."""
    claimable: bool = False
    """True when the pending pod names kubesage's scheduler: the secondary scheduler
    places it unless a reconciler claims it
    (:class:`~kubesage.core.loop.reconciler.ClaimsPods`), and then the loop does. A pod
    of kube-scheduler's is neither ``loop_places`` nor ``claimable``: no reconciler
    places it, except ``gpu-defrag`` binding it to the room its migration made. That
    bind and the one kube-scheduler asks of the extender go through the same bind path
    in the same process (kube-scheduler delegates GPU pods' binding to the extender), so
    one wins and the other is refused — never two binds."""
    nominated: bool = False
    """True for a pending pod that kube-scheduler's preemption nominated to a node
    (``status.nominatedNodeName``): room was freed for it there and it is about to be
    bound, so no migration is planned for it (its room is held in the loop's view)."""

    eligible_nodes: frozenset[str] | None = None
    """The only nodes this pod may use by kube-scheduler's node filters beyond resources
    — cordons, taints against its tolerations, ``nodeSelector``, required node affinity —
    as the secondary scheduler applies them (:mod:`kubesage.core.k8s.node_eligibility`):
    where a pending pod may be bound, and where a running GPU pod may be moved to; None
    when every node may take it, or when the cluster has no Node objects to tell (the
    embedded cluster, the simulator)."""

    @property
    def pending(self) -> bool:
        return self.placement is None

    def may_use(self, node: str) -> bool:
        """Whether ``node`` passes this pod's node filters (:attr:`eligible_nodes`)."""
        return self.eligible_nodes is None or node in self.eligible_nodes


def eligible_for_all(pods: Iterable[PodInfo]) -> frozenset[str] | None:
    """The nodes every one of ``pods`` may use (:attr:`PodInfo.eligible_nodes`), for a
    group placed together (a gang, a Spark application); None when none is ruled out."""
    sets = [pod.eligible_nodes for pod in pods if pod.eligible_nodes is not None]
    return frozenset.intersection(*sets) if sets else None


class Forecasts(Protocol):
    """The rolling forecast panel: a metric of an entity ``horizon_steps`` ahead."""

    @property
    def source(self) -> str:
        """Which forecaster produced the values (``stgcn``, or ``last-value`` in cold start)."""
        ...

    @property
    def horizon_steps(self) -> int: ...

    @property
    def version(self) -> int:
        """Changes whenever the predictions may have changed (what caches key on)."""
        ...

    def predict(self, entity: str, metric: str) -> float | None:
        """The forecast for ``entity`` (a node or pod name) and ``metric``; None if unknown."""
        ...


@dataclass(frozen=True)
class WorldView:
    """One tick's view of the world (immutable; see the module docstring)."""

    tick: int
    """Tick number, from 1."""
    now_s: float
    """The loop's clock (wall or simulated) at the start of the tick, in seconds."""
    state: ClusterState
    """A copy of the cluster state for this tick: running pods accounted, pending not."""
    pods: Mapping[str, PodInfo]
    """Every pod the loop knows, by ``namespace/name``."""
    topology: DRTG | None
    """The live DRTG (its dynamic indicators observed up to this tick), when configured."""
    forecasts: Forecasts
    snapshots: Mapping[str, Snapshot[Any]]
    """The latest snapshot of each collector, by collector name (stale ones marked)."""
    data_age_s: float
    """Age of the oldest snapshot a decision may use; the loop acts on nothing older
    than its configured maximum (reconcilers need not check)."""
    memory: Mapping[str, Any] = field(default_factory=dict)
    """This reconciler's memory, as it returned it on its previous tick."""
    refused: Mapping[str, float] = field(default_factory=dict)
    """``kind:target`` (``evict:ns/name``) → when the world last refused an action on it
    (a PodDisruptionBudget, a conflict), within the last few minutes and not done since
    (:meth:`~kubesage.core.loop.audit.AuditLog.refused`; the audit file carries it
    across leaders): a reconciler asking again at once would be refused again."""

    # Worked out once per view (a view never changes): every reconciler asks, several
    # times a tick, and a large cluster has tens of thousands of pods.
    @cached_property
    def pending(self) -> list[PodInfo]:
        """Pending pods, in name order (deterministic)."""
        pods = self.pods  # sorting the names, not (name, pod) pairs: 2 × fewer objects
        return [pods[name] for name in sorted(pods) if pods[name].pending]

    @cached_property
    def running(self) -> dict[str, PodInfo]:
        """Running pods by ``namespace/name``."""
        return {name: pod for name, pod in self.pods.items() if not pod.pending}
