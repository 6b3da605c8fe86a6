"""The control loop's inputs, as ``kubesage serve`` and ``kubesage loop`` wire them: the
cluster collectors (the embedded cluster's, and the live one over ClusterSync), the
Prometheus collector of ``--prometheus`` and the DRTG of ``--topology``.

Each returns a :class:`~kubesage.core.loop.world.ClusterObservation` (a copy of the
ClusterState and the pods it accounts, bound and pending), so the loop's world model
knows which pod is where. They live with the wiring, not in the loop: the loop imports
no Kubernetes code.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.k8s.binding import NodeObjects
from kubesage.core.k8s.embedded import BoundPod, EmbeddedCluster, PendingPod
from kubesage.core.k8s.existing_anti_affinity import RepelIndex
from kubesage.core.k8s.gang import GangAnnotationError, gang_of
from kubesage.core.k8s.informer import ClusterNotReadyError, ClusterSync, pod_key
from kubesage.core.k8s.node_eligibility import EligibilityCache
from kubesage.core.k8s.scheduling_policy import NamespaceLabels
from kubesage.core.k8s.translate import pod_request
from kubesage.core.k8s.unsupported_constraints import claimed_volumes, unsupported_constraints
from kubesage.core.loop.actions import ObjectRef, PodRef
from kubesage.core.loop.settings import LoopSettings
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import ClusterObservation
from kubesage.core.perception import Collector, Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.examples import topology_file
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import Placement

DEFAULT_SCHEDULER = "default-scheduler"
_NONE = object()


class _KeptInfos:
    """Each pod's PodInfo from the last collect, reused while the pod is unchanged.

    A collect runs every tick over every pod; a cluster of tens of thousands of pods
    would otherwise rebuild (and, for a live cluster, translate) each of them every
    tick, and those objects live through the tick — enough to set the cyclic garbage
    collector scanning the whole heap, which pauses the extender's thread too. So
    nothing here allocates per pod while it is unchanged. Only the pods of the latest
    collect are kept.
    """

    def __init__(self) -> None:
        self._versions: dict[str, object] = {}
        self._infos: dict[str, PodInfo | None] = {}
        self._seen_versions: dict[str, object] = {}
        self._seen_infos: dict[str, PodInfo | None] = {}

    def kept(self, key: str, version: object, placement: Placement | None) -> PodInfo | None:
        """Pod ``key``'s record from the last collect if it is still at ``version`` and
        ``placement``; None when it must be built (call :meth:`keep` either way)."""
        info = self._infos.get(key)
        if info is None:
            return None
        kept = self._versions.get(key, _NONE)
        if not (kept is version or kept == version):
            return None
        if not (info.placement is placement or info.placement == placement):
            return None
        return info

    def keep(self, key: str, version: object, info: PodInfo | None) -> None:
        """What this collect saw of pod ``key``."""
        self._seen_versions[key] = version
        self._seen_infos[key] = info

    def done(self) -> None:
        """End of a collect: keep what it saw, forget the pods that are gone."""
        self._versions, self._seen_versions = self._seen_versions, {}
        self._infos, self._seen_infos = self._seen_infos, {}


class EmbeddedClusterCollector:
    """The embedded cluster's state, bound pods and pending pods (evicted ones, or ones
    added to it); no other scheduler runs there, so the loop places its pending pods."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self._infos = _KeptInfos()

    @property
    def name(self) -> str:
        return "embedded"

    @property
    def failures(self) -> int:
        return 0  # in memory: it cannot fail

    def collect(self) -> Snapshot[ClusterObservation]:
        pods: dict[str, PodInfo] = {}
        with self.cluster.locked() as (state, _):
            copy = state.copy()
            for key, bound in self.cluster.bound.items():
                info = self._infos.kept(key, bound, bound.placement) or _bound_info(key, bound)
                self._infos.keep(key, bound, info)
                pods[str(info.ref)] = info
            for key, pending in self.cluster.pending.items():
                info = self._infos.kept(key, pending, None) or _pending_info(key, pending)
                self._infos.keep(key, pending, info)
                pods[str(info.ref)] = info
        self._infos.done()
        return Snapshot(ClusterObservation(copy, pods), time.time())


def _bound_info(key: str, bound: BoundPod) -> PodInfo:
    """A bound pod's record, with what it was submitted with (a gang's bound members
    count as such)."""
    metadata = {
        "namespace": bound.namespace,
        "name": bound.name,
        "labels": dict(bound.labels),
        "annotations": dict(bound.annotations),
    }
    return PodInfo(
        _ref(key, bound.namespace, bound.name),
        bound.request,
        bound.placement,
        labels=dict(bound.labels),
        annotations=dict(bound.annotations),
        gang=_gang({"metadata": metadata}),
    )


def _pending_info(key: str, pending: PendingPod) -> PodInfo:
    return PodInfo(
        _ref(key, pending.namespace, pending.name),
        pending.request,
        gang=_gang({"metadata": _metadata(pending)}),
        labels=dict(pending.labels),
        annotations=dict(pending.annotations),
        loop_places=True,
        claimable=True,
    )


def _metadata(pending: PendingPod) -> dict[str, Any]:
    return {
        "namespace": pending.namespace,
        "name": pending.name,
        "labels": dict(pending.labels),
        "annotations": dict(pending.annotations),
    }


def _gang(pod: Mapping[str, Any]) -> str | None:
    """The pod's named gang, as the secondary scheduler reads it (None: a lone pod, or a
    bad annotation — the secondary scheduler reports that on the pod)."""
    try:
        gang = gang_of(pod)
    except GangAnnotationError:
        return None
    return gang.key if gang.named else None


def _ref(key: str, namespace: str, name: str) -> PodRef:
    """The pod's reference from its cache key (a UID, or ``namespace/name``)."""
    if namespace and name:
        return PodRef(namespace, name, "" if key == f"{namespace}/{name}" else key)
    namespace, _, name = key.rpartition("/")
    return PodRef(namespace or "default", name)


class LiveClusterCollector:
    """The ClusterSync's state with its bound pods and the pending pods of
    ``scheduler_names`` (each pending pod, and each running GPU pod, with the nodes its
    spec lets it use); stale while list/watch fails (ClusterSync's fallback).
    ``namespace_labels``: the namespaces' labels, for the placed pods' anti-affinity
    terms that select namespaces by label."""

    def __init__(
        self,
        sync: ClusterSync,
        scheduler_names: Iterable[str] = (),
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        self.sync = sync
        self.namespace_labels = namespace_labels
        self.scheduler_names = tuple(dict.fromkeys((DEFAULT_SCHEDULER, *scheduler_names)))
        self._infos = _KeptInfos()
        self._movable: dict[str, tuple[object, frozenset[str] | None]] = {}
        """A running GPU pod's nodes, by key, with its resourceVersion: worked out again
        when it or a Node object changes, not every tick for every pod."""
        self._nodes_seen: object = None

    @property
    def name(self) -> str:
        return "kubernetes"

    @property
    def failures(self) -> int:
        return self.sync.failures

    def collect(self) -> Snapshot[ClusterObservation]:
        pending = {
            scheduler: self.sync.pending_pods(scheduler) for scheduler in self.scheduler_names
        }
        # The pods the loop may place: kubesage's, and kube-scheduler's that a migration
        # makes room for (never a nominated one: its room is held, and it is not moved for).
        placing = [
            pod
            for scheduler, pods in pending.items()
            for pod in pods
            if scheduler != DEFAULT_SCHEDULER or not _nominated(pod)
        ]
        snapshot = self._state(placing)
        bound = self.sync.bound_pods()  # a copy of every bound pod: once per collect
        eligible = _Eligibility(self.sync, snapshot.data.node_names, bound, self.namespace_labels)
        nodes = eligible.version()
        nodes_changed = nodes != self._nodes_seen
        movable: dict[str, tuple[object, frozenset[str] | None]] = {}
        pods: dict[str, PodInfo] = {}
        for pod in bound:
            key = pod_key(pod)
            placement = self.sync.placement_of(key)
            version = _resource_version(pod)
            info = self._infos.kept(key, version, placement) or pod_info(pod, placement)
            if info is not None and info.request.total_gpu_milli:  # where gpu-defrag may move it
                kept = self._movable.get(key)
                if kept is None or kept[0] != version or nodes_changed:
                    kept = (version, eligible.nodes_of(pod))
                movable[key] = kept
                if info.eligible_nodes is not kept[1]:  # (identity: sets of 10,000 names)
                    info = dataclasses.replace(info, eligible_nodes=kept[1])
            self._infos.keep(key, version, info)
            if info is not None and info.placement is not None:
                pods[str(info.ref)] = info
        for scheduler, waiting in pending.items():
            ours = scheduler != DEFAULT_SCHEDULER
            for pod in waiting:
                key, version = pod_key(pod), _resource_version(pod)
                info = self._infos.kept(key, version, None) or _pending(pod, ours)
                if info is not None:
                    info = eligible.of(pod, info)
                self._infos.keep(key, version, info)
                if info is not None:
                    pods[str(info.ref)] = info
        self._infos.done()
        self._movable, self._nodes_seen = movable, nodes
        observation = ClusterObservation(snapshot.data, pods)
        return Snapshot(observation, snapshot.taken_at, snapshot.stale, snapshot.reason)

    def _state(self, placing: Sequence[dict[str, Any]]) -> Snapshot[ClusterState]:
        """The cluster's state in which each pod nominated to a node (kube-scheduler's
        preemption freed room there for it) holds that room against the pods the loop
        may place (``placing``), as it does for the secondary scheduler's
        (:meth:`~kubesage.core.k8s.informer.ClusterSync.locked_placing`); ClusterSync's
        last good state as it is."""
        snapshot = self.sync.collect()
        try:
            with self.sync.locked_placing(placing) as (state, _):
                return Snapshot(state, snapshot.taken_at, snapshot.stale, snapshot.reason)
        except ClusterNotReadyError:
            return snapshot


class _Eligibility:
    """The nodes each pending pod, and each running GPU pod, may use
    (:attr:`PodInfo.eligible_nodes`), for one collect: the secondary scheduler's node
    filters (:class:`~kubesage.core.k8s.node_eligibility.EligibilityCache`) over the Node
    objects the source keeps, worked out once per distinct set of constraints and only
    when asked. A source without Node objects rules no node out."""

    def __init__(
        self,
        source: object,
        node_names: Sequence[str],
        placed: Sequence[Mapping[str, Any]] = (),
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        self._source = source if isinstance(source, NodeObjects) else None
        self._namespace_labels = namespace_labels
        self._node_names = node_names
        self._placed = placed
        """The pods already placed: their required anti-affinity keeps others off."""
        self._cache: EligibilityCache | None = None
        self._repel: RepelIndex | None = None
        self._sets: dict[int, frozenset[str]] = {}

    def of(self, pod: Mapping[str, Any], info: PodInfo) -> PodInfo:
        """``info`` with the nodes ``pod`` may use now (the same object when unchanged)."""
        eligible = self.nodes_of(pod)
        if info.eligible_nodes == eligible:
            return info
        return dataclasses.replace(info, eligible_nodes=eligible)

    def version(self) -> object:
        """What tells one state of the Node objects from the next (their names and
        resourceVersions), of the placed pods' anti-affinity and of the namespaces' labels
        it reads; None for a source without Node objects."""
        if self._source is None:
            return None
        nodes = tuple(
            (name, (node.get("metadata") or {}).get("resourceVersion"))
            for name, node in self._source.nodes().items()
        )
        # a placed pod's anti-affinity that comes or goes changes where others may go, and
        # so does a namespace relabelled into (or out of) a term's namespaceSelector
        labels = getattr(self._namespace_labels, "generation", None)
        return nodes, self._repelled(self._source).repellers, labels

    def _repelled(self, source: NodeObjects) -> RepelIndex:
        """The placed pods' required anti-affinity, read once per collect."""
        if self._repel is None:
            self._repel = RepelIndex(
                self._placed, source.nodes(), self._node_names, self._namespace_labels
            )
        return self._repel

    def nodes_of(self, pod: Mapping[str, Any]) -> frozenset[str] | None:
        """The nodes ``pod`` may use now (None: every node). None at all for a pod with
        constraints kubesage does not check: the loop neither binds nor moves it."""
        if unsupported_constraints(pod):
            return frozenset()  # kube-scheduler's to place (the bind path's rule, too)
        if claimed_volumes(pod):
            # its volume's reach (a zonal disk, a local PV, WaitForFirstConsumer) is not
            # known here: moved or bound by the loop, it could land where the volume
            # cannot follow; kube-scheduler's VolumeBinding places it
            return frozenset()
        if self._source is None:
            return None
        if self._cache is None:
            self._cache = EligibilityCache(self._source.nodes(), self._node_names)
        mask = self._repelled(self._source).narrow(self._cache.eligible(pod), pod)
        if mask is None:
            return None
        names = self._sets.get(id(mask))  # the cache shares one mask per constraint set
        if names is None:
            names = frozenset(n for n, ok in zip(self._node_names, mask, strict=True) if ok)
            self._sets[id(mask)] = names
        return names


def _resource_version(pod: Mapping[str, Any]) -> object:
    """What tells one state of a pod from the next: its resourceVersion (a pod without one,
    never seen from an API server, is never taken as unchanged)."""
    version = (pod.get("metadata") or {}).get("resourceVersion")
    return version if version else object()


def _pending(pod: Mapping[str, Any], claimable: bool) -> PodInfo | None:
    info = pod_info(pod, None)
    if info is None:
        return None
    return dataclasses.replace(info, claimable=claimable, nominated=_nominated(pod))


def _nominated(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler's preemption nominated the pending ``pod`` to a node."""
    return bool((pod.get("status") or {}).get("nominatedNodeName"))


def pod_info(pod: Mapping[str, Any], placement: Any = None) -> PodInfo | None:
    """A v1 Pod as the loop sees it (pending unless ``placement``); None for one whose
    requests cannot be read."""
    try:
        request = pod_request(pod)
    except InputError:
        return None
    metadata = pod.get("metadata") or {}
    ref = PodRef(
        str(metadata.get("namespace") or "default"),
        str(metadata.get("name")),
        str(metadata.get("uid") or ""),
    )
    # The controller (the one reference marked so) re-creates the pod; another owner
    # (a garbage-collection parent) does not.
    owners = metadata.get("ownerReferences") or []
    controller = next(
        (o for o in owners if isinstance(o, Mapping) and o.get("controller") is True), None
    )
    owner = None
    if controller is not None:
        owner = ObjectRef(
            str(controller.get("apiVersion", "")),
            str(controller.get("kind", "")),
            ref.namespace,
            str(controller.get("name", "")),
        )
    return PodInfo(
        ref,
        request,
        placement,
        gang=_gang(pod),
        owner=owner,
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        terminating=bool(metadata.get("deletionTimestamp")),
    )


def loop_topology(settings: LoopSettings) -> DRTG | None:
    """The DRTG of ``settings.topology`` (a file, or a shipped example's name), if any."""
    if settings.topology is None:
        return None
    return DRTG.from_yaml(topology_file(settings.topology))


PROMETHEUS_FIRST_WAIT_S = 12.0
"""How long the loop's first tick waits for the first Prometheus reading: the
collector's worst case (two tries of its 5 s timeout, with the backoff between)."""
PROMETHEUS_WAIT_SHARE = 0.5
"""The share of a tick a later tick waits for its Prometheus reading (at most)."""


def telemetry_collectors(settings: LoopSettings) -> list[Collector[Any]]:
    """The Prometheus collector of ``settings.prometheus`` over ``settings.metric_map``
    (the shipped map by default; its node and GPU columns feed the forecast panel), if a
    URL is set; each tick waits
    for it at most half a tick, so a slow Prometheus never holds the tick
    (:class:`~kubesage.core.bounded_collector.BoundedCollector`)."""
    if settings.prometheus is None:
        return []
    from kubesage.core.bounded_collector import BoundedCollector
    from kubesage.core.telemetry.metric_map import load_metric_map
    from kubesage.core.telemetry.prometheus import PrometheusCollector

    source = PrometheusCollector(settings.prometheus, load_metric_map(settings.metric_map))
    return [
        BoundedCollector(
            source,
            wait_s=PROMETHEUS_WAIT_SHARE * settings.tick_s,
            first_wait_s=PROMETHEUS_FIRST_WAIT_S,
        )
    ]
