"""ClusterSync: the live cluster as a :class:`ClusterState`, kept in sync by list + watch.

Four reflectors (:class:`~kubesage.core.k8s.watch_stream.ListWatch`), for nodes, pods,
the GPU driver's ResourceSlices and ResourceClaims, each on its own thread, do what
client-go's reflector does: list (remembering the list's ``resourceVersion``), then
watch from it with bookmarks; a watch that ends (server timeout) resumes from the last
version seen; a ``410 Gone`` (the version was compacted away; sent as an ``ERROR``
event or as an HTTP status) relists; any other failure is logged, counted and retried
after an exponential backoff; every ``resync_s`` a full relist heals any drift. Pods
are listed with kube-scheduler's field selector (``status.phase`` neither
``Succeeded`` nor ``Failed``): a pod that terminates leaves the selection and so
arrives as DELETED, releasing what it held.

The caches hold the Node and Pod objects, each node's spec
(:func:`~kubesage.core.k8s.translate.node_spec`; a node that publishes GPUs through
Dynamic Resource Allocation takes their count, model and MIG mode from its
ResourceSlices, :mod:`~kubesage.core.k8s.slice_cache`, and on a cluster without
``resource.k8s.io/v1`` the extended resources stay the source) and each pod's request
(:func:`~kubesage.core.k8s.translate.pod_request` with the GPUs its ResourceClaims ask
for, :mod:`~kubesage.core.k8s.claim_cache`; read once per ``resourceVersion`` and set
of claims). A pod whose claims are allocated is accounted on their devices; a claim
event re-accounts the pods it is reserved for. The state is one node per Node object
with every bound, non-terminal pod allocated where it runs (a pod kubesage cannot model
counted conservatively); which GPUs a pod holds, how a rebuild re-places pods, the
assumptions of pods kubesage is binding (:meth:`ClusterSync.assume`, expiring
``assume_ttl_s`` after :meth:`ClusterSync.finish_binding`) and the room pending pods
nominated to a node hold for kubesage's own placements
(:meth:`ClusterSync.locked_placing`) are :mod:`kubesage.core.k8s.accounting`'s.

Readers and writers take :meth:`ClusterSync.locked`. When the API server fails, the
caches keep their last content: :meth:`ClusterSync.collect` returns it marked stale
with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Unpack

from kubesage.core.dra.nodes import NodeDevices
from kubesage.core.errors import DependencyError
from kubesage.core.k8s.accounting import BoundPod, PodAccounting
from kubesage.core.k8s.apiclient import ApiClient, CoreV1Api
from kubesage.core.k8s.claim_cache import ClaimCache
from kubesage.core.k8s.dra_requests import ClaimsPendingError
from kubesage.core.k8s.schedulable import (
    awaits_scheduler,
    bound_node,
    is_terminal,
    nominated_node,
    usage_of,
)
from kubesage.core.k8s.schedulable import pod_key as pod_key  # re-exported
from kubesage.core.k8s.slice_cache import SliceCache
from kubesage.core.k8s.translate import TranslateError, node_spec
from kubesage.core.k8s.watch_stream import ReflectedCache, Reflectors, WatchOptions
from kubesage.core.observability import metrics
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL, topology_from_nodes
from kubesage.core.topology.spec import TopologySpec
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)

Obj = dict[str, Any]

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
"""kube-scheduler's pod selection: terminal pods hold no resources."""


class ClusterNotReadyError(DependencyError):
    """The state is not available yet (first list not done, or no nodes)."""


class ClusterSync(ReflectedCache):
    """List + watch of nodes and pods into a ClusterState (see the module docstring).

    Also a :class:`~kubesage.core.perception.Collector` of ClusterState.
    """

    name = "kubernetes"

    def __init__(
        self,
        api: ApiClient,
        *,
        assume_ttl_s: float = 30.0,
        rack_label: str = DEFAULT_RACK_LABEL,
        clock: Callable[[], float] = time.monotonic,
        **options: Unpack[WatchOptions],
    ) -> None:
        """``options``: how the reflectors pace their calls (:class:`WatchOptions`)."""
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._core: Any = CoreV1Api(api)
        self.assume_ttl_s = assume_ttl_s
        self.rack_label = rack_label
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._nodes: dict[str, Obj] = {}
        self._specs: dict[str, NodeSpec] = {}
        self._pods: dict[str, Obj] = {}
        self._requests: dict[str, tuple[str, PodRequest | None]] = {}
        self._accounts = PodAccounting(clock)
        self.generation = 0
        """Bumped on every change a scheduler must see (not on node heartbeats); waiters
        use :meth:`wait_for_change`."""
        self.untranslatable = 0
        """Node or pod objects the core could not read (skipped; logged)."""
        self._reflectors = Reflectors("ClusterSync", self._changed, clock=clock, options=options)
        self._watch("nodes", self._core.list_node, self._replace_nodes, self._apply_node)
        self._watch("pods", self._list_pods, self._replace_pods, self._apply_pod)
        self._slices = SliceCache(api)
        self._watch(
            "resourceslices", self._slices.list_call, self._replace_slices, self._apply_slice
        )
        self._claims = ClaimCache(api)
        self._watch(
            "resourceclaims", self._claims.list_call, self._replace_claims, self._apply_claim
        )

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
            if self._accounts.assumed:
                self.expire_assumed()
            state = self._accounts.state
            if state is None:
                raise ClusterNotReadyError(
                    "the cluster state is not ready: "
                    + ("no schedulable nodes" if self.ready else "nodes and pods not listed yet")
                )
            yield state, self._accounts.node_names

    @contextmanager
    def locked_placing(self, pods: Iterable[Obj]) -> Iterator[tuple[ClusterState, list[str]]]:
        """:meth:`locked` for kubesage's own placement of ``pods``: a copy in which pending
        pods nominated to a node hold their requests there (:meth:`PodAccounting.reserving`
        at the lowest priority of ``pods``, 0 if unreadable); account via :meth:`assume`."""
        with self.locked() as (_, names):
            keys = {pod_key(pod): pod for pod in pods}
            requests = [self._request(key, pod) for key, pod in keys.items()]
            priority = min((r.priority if r else 0 for r in requests), default=0)
            yield self._accounts.reserving(priority, keys), names

    def collect(self) -> Snapshot[ClusterState]:
        """A copy of the state; stale (with the reason) while list/watch is failing."""
        with self._lock:
            loops = self._reflectors.loops.items()
            errors = [f"{kind}: {loop.error}" for kind, loop in loops if loop.error]
            state, last_good = self._accounts.state, self._accounts.last_good
            if state is None:
                if last_good is None:
                    raise ClusterNotReadyError(
                        "no cluster state yet" + (f" ({'; '.join(errors)})" if errors else "")
                    )
                return Snapshot(last_good.copy(), time.time(), stale=True, reason="no nodes listed")
            reason = "; ".join(errors) if errors else None
            return Snapshot(state.copy(), time.time(), stale=reason is not None, reason=reason)

    def nodes(self) -> dict[str, Obj]:
        """The Node objects by name (treat as read-only)."""
        with self._lock:
            return dict(self._nodes)

    def pending_pods(self, scheduler_name: str) -> list[Obj]:
        """Pods naming ``scheduler_name`` that a bind could take now (unbound, not being
        deleted, no scheduling gates: :func:`awaits_scheduler`), not assumed, oldest first."""
        with self._lock:
            pods = [
                pod
                for key, pod in self._pods.items()
                if key not in self._accounts.assumed and awaits_scheduler(pod, scheduler_name)
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
            return [pod for pod in self._pods.values() if bound_node(pod) is not None]

    def placement_of(self, key: str) -> Placement | None:
        """Where the pod with this key is accounted (bound or assumed), if anywhere."""
        with self._lock:
            return self._accounts.placement_of(key)

    @property
    def unaccounted(self) -> dict[str, str]:
        """Bound pods not accounted exactly, with why and what is counted instead."""
        with self._lock:
            return dict(self._accounts.unaccounted)

    @property
    def rebuilds(self) -> int:
        """Times the ClusterState was rebuilt (node set or node spec changed)."""
        return self._accounts.rebuilds

    def topology(self) -> TopologySpec:
        """The DRTG topology of the current nodes from their labels and ResourceSlices
        (InputError if unreadable)."""
        with self._lock:
            nodes = list(self._nodes.values())
            devices = dict(self._slices.devices)
        return topology_from_nodes(nodes, rack_label=self.rack_label, devices=devices)

    def node_devices(self) -> dict[str, NodeDevices]:
        """The GPUs, MIG devices and partitions each node publishes through DRA."""
        with self._lock:
            return dict(self._slices.devices)

    def resource_slices(self) -> list[Obj]:
        """The GPU driver's ResourceSlice objects (treat as read-only)."""
        with self._lock:
            return self._slices.slices()

    def request_of(self, pod: Mapping[str, Any]) -> PodRequest:
        """``pod``'s request with the GPUs its ResourceClaims ask for, from the cache
        (TranslateError; :class:`~kubesage.core.k8s.dra_requests.ClaimsPendingError`
        while a claim it names is not created yet)."""
        with self._lock:
            return self._claims.request(pod)

    @property
    def dra_served(self) -> bool | None:
        """Whether the cluster serves ``resource.k8s.io/v1`` (None until first listed)."""
        return self._slices.served

    # -- writes ------------------------------------------------------------------------------

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        """Account ``pod`` at ``placement`` while kubesage binds it (CapacityError if it
        does not fit), until the watch shows it bound or it expires (:meth:`finish_binding`)."""
        with self._changed:
            if self._accounts.state is None:
                raise ClusterNotReadyError("cannot assume a pod: no cluster state")
            if self._accounts.assume(pod_key(pod), request, placement):
                self._bump()

    def finish_binding(self, pod: Mapping[str, Any]) -> None:
        """The bind of an assumed ``pod`` finished: its assumption, which never expires
        before, expires ``assume_ttl_s`` from now (kube-scheduler's FinishBinding)."""
        with self._lock:
            self._accounts.finish_binding(pod_key(pod), self.assume_ttl_s)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Undo :meth:`assume` (the bind failed)."""
        with self._changed:
            if self._accounts.forget(pod_key(pod)):
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
            return self._slices.node_spec(node_spec(node, rack_label=self.rack_label))
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

    # -- resource slices ---------------------------------------------------------------------

    def _replace_slices(self, items: list[Obj]) -> None:
        self._respec(self._slices.replace(items))

    def _apply_slice(self, kind: str, obj: Obj) -> bool:
        return self._respec(self._slices.apply(kind, obj))

    def _respec(self, nodes: set[str]) -> bool:
        """Read again the specs of ``nodes`` (their devices changed); rebuild if any did."""
        changed = False
        for name in nodes & set(self._nodes):
            spec = self._spec(self._nodes[name])
            if spec == self._specs.get(name):
                continue
            changed = True
            if spec is None:
                self._specs.pop(name, None)
            else:
                self._specs[name] = spec
        if changed:
            self._rebuild()
        return changed

    # -- resource claims ---------------------------------------------------------------------

    def _replace_claims(self, items: list[Obj]) -> None:
        self._reaccount(self._claims.replace(items))

    def _apply_claim(self, kind: str, obj: Obj) -> bool:
        """A claim changed: its pods are accounted again; pending ones may fit now."""
        self._reaccount(self._claims.apply(kind, obj))
        return True

    def _reaccount(self, keys: set[str]) -> None:
        """Account again the bound pods with these keys (what their claims hold changed),
        and those not accounted yet (a claim they waited for may have come)."""
        if self._accounts.state is None:
            return
        for key in keys:
            pod = self._pods.get(key)
            if pod is not None:
                self._track(key, pod)
        self._retry_unaccounted()

    # -- pods --------------------------------------------------------------------------------------

    def _request(self, key: str, pod: Obj) -> PodRequest | None:
        """The pod's request, cached per resourceVersion and claims (None when it cannot
        be read, or while its claims are not known)."""
        version = f"{pod['metadata'].get('resourceVersion') or ''}/{self._claims.fingerprint(pod)}"
        cached = self._requests.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            request: PodRequest | None = self._claims.request(pod)
        except ClaimsPendingError:
            return None  # not cached: the claim's event accounts the pod
        except TranslateError as exc:
            if cached is None or cached[1] is not None:
                log.warning("pod counted conservatively: %s", exc)
            self.untranslatable += 1
            request = None
        self._requests[key] = (version, request)
        return request

    def _replace_pods(self, items: list[Obj]) -> None:
        self._pods = {pod_key(pod): pod for pod in items if not is_terminal(pod)}
        self._requests = {k: v for k, v in self._requests.items() if k in self._pods}
        nominated = ((k, self._on(k, pod, nominated_node(pod))) for k, pod in self._pods.items())
        self._accounts.nominated = {key: view for key, view in nominated if view is not None}
        self._rebuild()

    def _apply_pod(self, kind: str, pod: Obj) -> bool:
        """Apply a pod event; any may change what is pending or held, so waiters wake."""
        key = pod_key(pod)
        if kind == "DELETED" or is_terminal(pod):
            self._pods.pop(key, None)
            self._requests.pop(key, None)
            if self._accounts.remove(key):
                self._retry_unaccounted()
        else:
            self._pods[key] = pod
            self._track(key, pod)
        return True

    def _track(self, key: str, pod: Obj) -> None:
        """Account a bound pod where it runs; note where a pending one is nominated."""
        bound = self._on(key, pod, bound_node(pod))
        if bound is not None:
            self._accounts.seen_bound(bound)
        else:
            self._accounts.nominate(key, self._on(key, pod, nominated_node(pod)))

    def _on(self, key: str, pod: Obj, node: str | None) -> BoundPod | None:
        """The pod as the accounting sees it on ``node`` (None: on no node)."""
        if node is None:
            return None
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        held = self._claims.held(pod, self._slices.devices.get(node))
        request = self._request(key, pod)
        usage = usage_of(pod) if request is None else None
        return BoundPod(key, request, node, annotations, held, usage)

    def _retry_unaccounted(self) -> None:
        """Place again the pods that did not fit (something was just released)."""
        for key in list(self._accounts.unaccounted):
            pod = self._pods.get(key)
            bound = self._on(key, pod, bound_node(pod)) if pod else None
            if bound is None or self._accounts.state is None:
                self._accounts.remove(key)
                continue
            self._accounts.place(bound)

    def _rebuild(self) -> None:
        """A fresh ClusterState from the node specs, with every bound pod allocated again."""
        bound = (self._on(key, pod, bound_node(pod)) for key, pod in self._pods.items())
        self._accounts.rebuild(
            [self._specs[name] for name in sorted(self._specs)],
            (pod for pod in bound if pod is not None),
            self._pods,
        )

    def expire_assumed(self) -> int:
        """Drop the assumptions the watch never confirmed ``assume_ttl_s`` after their bind
        finished (:meth:`finish_binding`)."""
        with self._changed:
            expired = self._accounts.expire()
            if expired:
                self._bump()
            return expired
