"""ClusterSync: the live cluster as a :class:`ClusterState`, kept in sync by list + watch.

Two reflectors (:class:`~kubesage.core.k8s.watch_stream.ListWatch`), one for nodes
and one for pods, each on its own thread, do what client-go's reflector does:
list (remembering the list's ``resourceVersion``), then watch from it with bookmarks;
a watch that ends (server timeout) resumes from the last version seen; a ``410 Gone``
(the version was compacted away; sent as an ``ERROR`` event or as an HTTP status)
relists; any other failure is logged, counted and retried after an exponential
backoff; every ``resync_s`` a full relist heals any drift. Pods are listed with
kube-scheduler's field selector (``status.phase`` neither ``Succeeded`` nor
``Failed``): a pod that terminates leaves the selection and so arrives as DELETED,
releasing what it held.

The state: one node per Node object (:func:`~kubesage.core.k8s.translate.node_spec`),
and every bound, non-terminal pod allocated where it runs
(:func:`~kubesage.core.k8s.translate.pod_request`). A node added, removed or changed
in what the core sees rebuilds the state from the caches (node indices change).

Which GPUs a bound pod holds is not in the Pod object: the device plugin picks them
on the node. Mapping, most faithful first:

1. pods that kubesage bound carry the GPUs it chose (annotations written through the
   Binding, see :mod:`kubesage.core.k8s.binder`), used when they still fit;
2. otherwise the lowest-index GPUs that fit (for whole GPUs, the lowest-index wholly
   free ones: the NVIDIA device plugin's order), for MIG the first free slot;
3. a pod that fits nowhere on its node (the view and the node disagree, e.g. the
   node's allocatable shrank) is not allocated; it is logged, counted in
   ``unaccounted`` and retried at the next rebuild.

Pods kubesage has just bound are *assumed* (:meth:`ClusterSync.assume`) until the
watch shows them bound, so the next decision already sees them, as kube-scheduler's
cache does; an assumption the watch never confirms expires after ``assume_ttl_s``.

Readers and writers take :meth:`ClusterSync.locked`. When the API server fails, the
caches keep their last content: :meth:`ClusterSync.collect` returns it marked stale
with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Unpack

from kubernetes import client as k8s_client

from kubesage.core.errors import CapacityError, DependencyError
from kubesage.core.k8s import metrics
from kubesage.core.k8s.binder import parse_gpu_indices
from kubesage.core.k8s.translate import TranslateError, node_spec, pod_request
from kubesage.core.k8s.watch_stream import ReflectedCache, Reflectors, WatchOptions
from kubesage.core.policy.gpu_choice import best_mig_slot, lowest_index_gpus
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.telemetry.protocol import Snapshot
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL, topology_from_nodes
from kubesage.core.topology.spec import TopologySpec
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)

Obj = dict[str, Any]

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
"""kube-scheduler's pod selection: terminal pods hold no resources."""


class ClusterNotReadyError(DependencyError):
    """The state is not available yet (first list not done, or no nodes)."""


@dataclass
class _Assumed:
    request: PodRequest
    placement: Placement
    expires_at: float


def pod_key(pod: Mapping[str, Any]) -> str:
    """A pod's key in the caches: its UID (``namespace/name`` when it has none)."""
    metadata = pod.get("metadata") or {}
    uid = metadata.get("uid")
    if uid:
        return str(uid)
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def _is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _bound_node(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


class ClusterSync(ReflectedCache):
    """List + watch of nodes and pods into a ClusterState (see the module docstring).

    Also a :class:`~kubesage.core.telemetry.protocol.Collector` of ClusterState.
    """

    name = "kubernetes"

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        assume_ttl_s: float = 30.0,
        rack_label: str = DEFAULT_RACK_LABEL,
        clock: Callable[[], float] = time.monotonic,
        **options: Unpack[WatchOptions],
    ) -> None:
        """``options``: how the reflectors pace their calls (:class:`WatchOptions`)."""
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._core: Any = k8s_client.CoreV1Api(api)
        self.assume_ttl_s = assume_ttl_s
        self.rack_label = rack_label
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._nodes: dict[str, Obj] = {}
        self._specs: dict[str, NodeSpec] = {}
        self._pods: dict[str, Obj] = {}
        self._requests: dict[str, tuple[str, PodRequest | None]] = {}
        self._placed: dict[str, tuple[PodRequest, Placement]] = {}
        self._assumed: dict[str, _Assumed] = {}
        self._unaccounted: dict[str, str] = {}
        self._state: ClusterState | None = None
        self._node_names: list[str] = []
        self._last_good: ClusterState | None = None
        self.generation = 0
        """Bumped on every change a scheduler must see (not on node heartbeats); waiters
        use :meth:`wait_for_change`."""
        self.rebuilds = 0
        """Times the ClusterState was rebuilt (node set or node spec changed)."""
        self.untranslatable = 0
        """Node or pod objects the core could not read (skipped; logged)."""
        self._reflectors = Reflectors("ClusterSync", self._changed, clock=clock, options=options)
        self._watch("nodes", self._core.list_node, self._replace_nodes, self._apply_node)
        self._watch("pods", self._list_pods, self._replace_pods, self._apply_pod)

    # -- lifecycle (start, stop and `with` come from ReflectedCache) ---------------------

    @property
    def ready(self) -> bool:
        """True once nodes and pods have both been listed."""
        return self._reflectors.listed

    def wait_until_ready(self, timeout_s: float) -> bool:
        return self._reflectors.wait(lambda: self.ready, timeout_s)

    def wait_for_change(self, since: int, timeout_s: float) -> int:
        """Block until :attr:`generation` differs from ``since`` (or timeout); return it."""
        self._reflectors.wait(lambda: self.generation != since, timeout_s)
        return self.generation

    # -- reads -------------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[tuple[ClusterState, list[str]]]:
        """The live state and its node names, held still; ClusterNotReadyError without one.

        Write through :meth:`assume`/:meth:`forget`, not ``state.allocate``: the watch
        would otherwise count the same pod twice. Expired assumptions are dropped here.
        """
        with self._lock:
            if self._assumed:
                self.expire_assumed()
            if self._state is None:
                raise ClusterNotReadyError(
                    "the cluster state is not ready: "
                    + ("no schedulable nodes" if self.ready else "nodes and pods not listed yet")
                )
            yield self._state, self._node_names

    def collect(self) -> Snapshot[ClusterState]:
        """A copy of the state; stale (with the reason) while list/watch is failing."""
        with self._lock:
            loops = self._reflectors.loops.items()
            errors = [f"{kind}: {loop.error}" for kind, loop in loops if loop.error]
            state = self._state
            if state is None:
                if self._last_good is None:
                    raise ClusterNotReadyError(
                        "no cluster state yet" + (f" ({'; '.join(errors)})" if errors else "")
                    )
                return Snapshot(
                    self._last_good.copy(), time.time(), stale=True, reason="no nodes listed"
                )
            reason = "; ".join(errors) if errors else None
            return Snapshot(state.copy(), time.time(), stale=reason is not None, reason=reason)

    def nodes(self) -> dict[str, Obj]:
        """The Node objects by name (treat as read-only)."""
        with self._lock:
            return dict(self._nodes)

    def pending_pods(self, scheduler_name: str) -> list[Obj]:
        """Unbound, live pods naming ``scheduler_name``, not assumed, oldest first."""
        with self._lock:
            pods = [
                pod
                for key, pod in self._pods.items()
                if key not in self._assumed
                and _bound_node(pod) is None
                and not (pod.get("metadata") or {}).get("deletionTimestamp")
                and (pod.get("spec") or {}).get("schedulerName") == scheduler_name
            ]
        return sorted(
            pods,
            key=lambda p: (
                str(p["metadata"].get("creationTimestamp") or ""),
                str(p["metadata"].get("namespace")),
                str(p["metadata"].get("name")),
            ),
        )

    def bound_pods(self) -> list[Obj]:
        """Bound, live pods (treat as read-only)."""
        with self._lock:
            return [pod for pod in self._pods.values() if _bound_node(pod) is not None]

    def placement_of(self, key: str) -> Placement | None:
        """Where the pod with this key is accounted (bound or assumed), if anywhere."""
        with self._lock:
            placed = self._placed.get(key)
            if placed is not None:
                return placed[1]
            assumed = self._assumed.get(key)
            return assumed.placement if assumed else None

    @property
    def unaccounted(self) -> dict[str, str]:
        """Bound pods not allocated in the state, with why (see the module docstring)."""
        with self._lock:
            return dict(self._unaccounted)

    def topology(self) -> TopologySpec:
        """The DRTG topology of the current nodes from their labels (InputError if unreadable)."""
        with self._lock:
            nodes = list(self._nodes.values())
        return topology_from_nodes(nodes, rack_label=self.rack_label)

    # -- writes ------------------------------------------------------------------------------

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        """Account ``pod`` at ``placement`` before the watch shows it bound (CapacityError
        if it does not fit)."""
        key = pod_key(pod)
        with self._changed:
            if self._state is None:
                raise ClusterNotReadyError("cannot assume a pod: no cluster state")
            if key in self._placed or key in self._assumed:
                return
            self._state.allocate(request, placement)
            self._assumed[key] = _Assumed(request, placement, self._clock() + self.assume_ttl_s)
            self._bump()

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Undo :meth:`assume` (the bind failed)."""
        key = pod_key(pod)
        with self._changed:
            assumed = self._assumed.pop(key, None)
            if assumed is not None and self._state is not None:
                self._state.release(assumed.request, assumed.placement)
                self._bump()

    # -- reflector ------------------------------------------------------------------------------

    def _list_pods(self, **kwargs: Any) -> Any:
        return self._core.list_pod_for_all_namespaces(field_selector=POD_FIELD_SELECTOR, **kwargs)

    def _watch(
        self,
        kind: str,
        list_call: Callable[..., Any],
        replace: Callable[[list[Obj]], None],
        apply: Callable[[str, Obj], bool],
    ) -> None:
        """A reflector of ``kind`` into the caches (``apply`` says whether to wake)."""

        def on_list(items: list[Obj]) -> None:
            replace(items)
            self._bump()

        def on_event(event: str, obj: Obj) -> None:
            if apply(event, obj):
                self._bump()

        self._reflectors.add(
            kind,
            list_call,
            thread_name=f"clustersync-{kind}",
            on_list=on_list,
            on_event=on_event,
            on_failure=metrics.COLLECTOR_FAILURES.labels(self.name).inc,
        )

    @property
    def resource_versions(self) -> dict[str, str | None]:
        """The resourceVersion each reflector has reached (``nodes``, ``pods``)."""
        return {kind: loop.version for kind, loop in self._reflectors.loops.items()}

    def _bump(self) -> None:
        self.generation += 1
        self._changed.notify_all()

    # -- nodes -----------------------------------------------------------------------------------

    def _spec(self, node: Obj) -> NodeSpec | None:
        try:
            return node_spec(node, rack_label=self.rack_label)
        except TranslateError as exc:
            self.untranslatable += 1
            log.warning("skipping node: %s", exc)
            return None

    def _replace_nodes(self, items: list[Obj]) -> None:
        self._nodes = {str(item["metadata"]["name"]): item for item in items}
        self._specs = {}
        for name, node in self._nodes.items():
            spec = self._spec(node)
            if spec is not None:
                self._specs[name] = spec
        self._rebuild()

    def _apply_node(self, kind: str, node: Obj) -> bool:
        """Apply a node event; False when nothing a scheduler reads changed (heartbeats)."""
        name = str(node["metadata"]["name"])
        if kind == "DELETED":
            self._nodes.pop(name, None)
            if self._specs.pop(name, None) is not None:
                self._rebuild()
            return True
        previous = self._nodes.get(name)
        self._nodes[name] = node
        spec = self._spec(node)
        old = self._specs.get(name)
        if spec == old:
            # Taints and cordons do not change the state, but they change where pods go.
            return previous is None or previous.get("spec") != node.get("spec")
        if spec is None:
            self._specs.pop(name, None)
        else:
            self._specs[name] = spec
        self._rebuild()
        return True

    # -- pods --------------------------------------------------------------------------------------

    def _request(self, key: str, pod: Obj) -> PodRequest | None:
        """The pod's request, cached per resourceVersion (None when it cannot be read)."""
        version = str(pod["metadata"].get("resourceVersion") or "")
        cached = self._requests.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            request: PodRequest | None = pod_request(pod)
        except TranslateError as exc:
            if cached is None or cached[1] is not None:
                log.warning("pod not accounted: %s", exc)
            self.untranslatable += 1
            request = None
        self._requests[key] = (version, request)
        return request

    def _replace_pods(self, items: list[Obj]) -> None:
        self._pods = {pod_key(pod): pod for pod in items if not _is_terminal(pod)}
        self._requests = {k: v for k, v in self._requests.items() if k in self._pods}
        self._rebuild()

    def _apply_pod(self, kind: str, pod: Obj) -> bool:
        """Apply a pod event; any may change what is pending or held, so waiters wake."""
        self._apply_pod_event(kind, pod)
        return True

    def _apply_pod_event(self, kind: str, pod: Obj) -> None:
        key = pod_key(pod)
        if kind == "DELETED" or _is_terminal(pod):
            self._pods.pop(key, None)
            self._requests.pop(key, None)
            self._unaccounted.pop(key, None)
            released = self._release(key)
            self._assumed.pop(key, None)
            if released:
                self._retry_unaccounted()
            return
        self._pods[key] = pod
        node = _bound_node(pod)
        if node is None:
            return
        request = self._request(key, pod)
        placed = self._placed.get(key)
        if placed is not None:
            if request == placed[0] and placed[1].node == node:
                return
            self._release(key)
        assumed = self._assumed.pop(key, None)
        if self._state is None:
            self._unaccounted[key] = "no cluster state"
            return
        if assumed is not None:
            if request == assumed.request and assumed.placement.node == node:
                self._placed[key] = (assumed.request, assumed.placement)  # confirmed
                return
            self._state.release(assumed.request, assumed.placement)
        self._place(key, pod, request, node)

    def _release(self, key: str) -> bool:
        placed = self._placed.pop(key, None)
        if placed is None:
            assumed = self._assumed.pop(key, None)
            if assumed is None or self._state is None:
                return False
            placed = (assumed.request, assumed.placement)
        if self._state is not None:
            self._state.release(*placed)
        return True

    def _place(self, key: str, pod: Obj, request: PodRequest | None, node: str) -> None:
        """Allocate a bound pod where it runs (see the module docstring for the GPUs)."""
        assert self._state is not None
        state = self._state
        if request is None:
            self._unaccounted[key] = "its requests cannot be read"
            return
        index = state.node_index.get(node)
        if index is None:
            self._unaccounted[key] = f"node {node} is not in the state"
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        for placement in _candidate_placements(state, index, request, annotations):
            try:
                state.allocate(request, placement)
            except CapacityError:
                continue
            self._placed[key] = (request, placement)
            self._unaccounted.pop(key, None)
            return
        if key not in self._unaccounted:
            log.warning(
                "pod %s bound to %s does not fit there in kubesage's view; not accounted",
                request.name,
                node,
            )
        self._unaccounted[key] = f"does not fit on {node} in kubesage's view"

    def _retry_unaccounted(self) -> None:
        for key in list(self._unaccounted):
            pod = self._pods.get(key)
            node = _bound_node(pod) if pod else None
            if pod is None or node is None or self._state is None:
                self._unaccounted.pop(key, None)
                continue
            self._place(key, pod, self._request(key, pod), node)

    # -- rebuild ---------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """A fresh ClusterState from the node specs, with every bound pod allocated again."""
        self.rebuilds += 1
        self._placed = {}
        self._unaccounted = {}
        specs = [self._specs[name] for name in sorted(self._specs)]
        if not specs:
            self._state = None
            self._node_names = []
            return
        self._state = ClusterState(specs)
        self._node_names = list(self._state.node_names)
        now = self._clock()
        assumed, self._assumed = self._assumed, {}
        for key, pod in self._pods.items():
            node = _bound_node(pod)
            if node is not None:
                assumed.pop(key, None)
                self._place(key, pod, self._request(key, pod), node)
        for key, entry in assumed.items():
            if entry.expires_at < now or key not in self._pods:
                continue
            index = self._state.node_index.get(entry.placement.node)
            if index is None:
                continue
            placement = entry.placement.model_copy(update={"node_index": index})
            try:
                self._state.allocate(entry.request, placement)
            except CapacityError:
                continue
            self._assumed[key] = _Assumed(entry.request, placement, entry.expires_at)
        self._last_good = self._state

    def expire_assumed(self) -> int:
        """Drop assumptions older than ``assume_ttl_s`` that the watch never confirmed."""
        with self._changed:
            now = self._clock()
            expired = [key for key, entry in self._assumed.items() if entry.expires_at < now]
            for key in expired:
                self._release(key)
            if expired:
                self._bump()
            return len(expired)


def _candidate_placements(
    state: ClusterState, node: int, request: PodRequest, annotations: Mapping[str, str]
) -> Iterator[Placement]:
    """Placements to try for a bound pod, most faithful first."""
    recorded = parse_gpu_indices(dict(annotations))
    if request.num_gpu == 0:
        yield state.placement(node, (), request)
        return
    if recorded is not None:
        indices, mig_start = recorded
        recorded_placement: Placement | None = None
        with suppress(ValueError):  # pydantic rejects an impossible slot: fall through
            recorded_placement = state.placement(node, indices, request, mig_start=mig_start)
        if recorded_placement is not None:
            yield recorded_placement
    if request.mig is not None:
        if state.node_mig_enabled[node]:
            try:
                gpu, start = best_mig_slot(state, node, request)
            except ValueError:
                return
            yield state.placement(node, (gpu,), request, mig_start=start)
        return
    gpus = lowest_index_gpus(state, node, request)
    if len(gpus) == request.num_gpu:
        yield state.placement(node, gpus, request)
