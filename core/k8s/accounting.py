"""What each pod holds in the live ClusterState: bound pods where they run, assumed ones
where kubesage just bound them.

:class:`~kubesage.core.k8s.informer.ClusterSync` keeps the Node and Pod objects; this
module turns them into allocations. The state is one node per Node object; a node
added, removed or changed in what the core sees rebuilds it (node indices change) and
every bound pod is allocated again.

Which GPUs a bound pod holds is not in the Pod object: the device plugin picks them
on the node. Mapping, most faithful first:

0. a pod whose GPUs come through DRA holds the devices of its claims' allocation
   (:meth:`~kubesage.core.k8s.claim_cache.ClaimCache.held`): what the kubelet hands it,
   whoever allocated them;
1. pods that kubesage bound carry the GPUs it chose (annotations written through the
   Binding, see :mod:`kubesage.core.k8s.binder`), used when they still fit;
2. otherwise the lowest-index GPUs that fit (for whole GPUs, the lowest-index wholly
   free ones: the NVIDIA device plugin's order), for MIG the first free slot;
3. a pod that fits nowhere on its node (the view and the node disagree, e.g. the
   node's allocatable shrank) is not allocated; it is logged, kept in ``unaccounted``
   with the reason and retried when something is released or at the next rebuild.

Pods kubesage has just bound are *assumed* until the watch shows them bound, so the
next decision already sees them, as kube-scheduler's cache does; an assumption the
watch never confirms expires. :class:`PodAccounting` does no locking: its owner calls
it under its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass

from kubesage.core.errors import CapacityError
from kubesage.core.k8s.binder import parse_gpu_indices
from kubesage.core.policy.gpu_choice import best_mig_slot, lowest_index_gpus
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)


@dataclass
class Assumed:
    """A pod accounted before the watch shows it bound, until ``expires_at`` (clock time)."""

    request: PodRequest
    placement: Placement
    expires_at: float


@dataclass(frozen=True)
class BoundPod:
    """A bound pod as the accounting needs it: its cache key, request and node."""

    key: str
    request: PodRequest | None
    """None when its requests cannot be read (it is then unaccounted)."""
    node: str
    annotations: Mapping[str, str]
    """The Pod's annotations (the GPUs kubesage bound it to, when it did)."""
    held: tuple[tuple[int, ...], int | None] | None = None
    """``(GPU indices, MIG start)`` its ResourceClaims' allocation holds, if any."""


class PodAccounting:
    """The ClusterState of the current node specs with every known pod allocated."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.state: ClusterState | None = None
        """None while no node is schedulable."""
        self.node_names: list[str] = []
        self.last_good: ClusterState | None = None
        """The last state built with nodes (the stale fallback while there are none)."""
        self.placed: dict[str, tuple[PodRequest, Placement]] = {}
        """Bound pods allocated in the state, by key."""
        self.assumed: dict[str, Assumed] = {}
        self.unaccounted: dict[str, str] = {}
        """Bound pods not allocated, with why."""
        self.rebuilds = 0
        """Times the state was rebuilt (node set or node spec changed)."""

    # -- the whole state -----------------------------------------------------------------

    def rebuild(
        self, specs: Iterable[NodeSpec], bound: Iterable[BoundPod], live: Container[str]
    ) -> None:
        """A fresh state from ``specs`` (in node order) with every ``bound`` pod allocated
        again, and the assumptions of pods still ``live`` that have not expired."""
        self.rebuilds += 1
        self.placed = {}
        self.unaccounted = {}
        ordered = list(specs)
        if not ordered:
            self.state = None
            self.node_names = []
            return
        self.state = ClusterState(ordered)
        self.node_names = list(self.state.node_names)
        now = self._clock()
        assumed, self.assumed = self.assumed, {}
        for pod in bound:
            assumed.pop(pod.key, None)
            self.place(pod)
        for key, entry in assumed.items():
            if entry.expires_at < now or key not in live:
                continue
            index = self.state.node_index.get(entry.placement.node)
            if index is None:
                continue
            placement = entry.placement.model_copy(update={"node_index": index})
            try:
                self.state.allocate(entry.request, placement)
            except CapacityError:
                continue
            self.assumed[key] = Assumed(entry.request, placement, entry.expires_at)
        self.last_good = self.state

    # -- one pod -------------------------------------------------------------------------

    def place(self, pod: BoundPod) -> None:
        """Allocate a bound pod where it runs (see the module docstring for the GPUs)."""
        assert self.state is not None
        state = self.state
        if pod.request is None:
            self.unaccounted[pod.key] = "its requests cannot be read"
            return
        index = state.node_index.get(pod.node)
        if index is None:
            self.unaccounted[pod.key] = f"node {pod.node} is not in the state"
            return
        for placement in _candidate_placements(state, index, pod.request, pod):
            try:
                state.allocate(pod.request, placement)
            except CapacityError:
                continue
            self.placed[pod.key] = (pod.request, placement)
            self.unaccounted.pop(pod.key, None)
            return
        if pod.key not in self.unaccounted:
            log.warning(
                "pod %s bound to %s does not fit there in kubesage's view; not accounted",
                pod.request.name,
                pod.node,
            )
        self.unaccounted[pod.key] = f"does not fit on {pod.node} in kubesage's view"

    def seen_bound(self, pod: BoundPod) -> None:
        """The watch shows ``pod`` bound: confirm its assumption, or (re)place it."""
        placed = self.placed.get(pod.key)
        if placed is not None:
            if pod.request == placed[0] and _agrees(placed[1], pod):
                return
            self.release(pod.key)
        assumed = self.assumed.pop(pod.key, None)
        if self.state is None:
            self.unaccounted[pod.key] = "no cluster state"
            return
        if assumed is not None:
            if pod.request == assumed.request and _agrees(assumed.placement, pod):
                self.placed[pod.key] = (assumed.request, assumed.placement)  # confirmed
                return
            self.state.release(assumed.request, assumed.placement)
        self.place(pod)

    def remove(self, key: str) -> bool:
        """Forget a pod that is gone; True when that freed resources."""
        self.unaccounted.pop(key, None)
        released = self.release(key)
        self.assumed.pop(key, None)
        return released

    def release(self, key: str) -> bool:
        """Give back what the pod with ``key`` holds (bound or assumed); True if it held any."""
        placed = self.placed.pop(key, None)
        if placed is None:
            assumed = self.assumed.pop(key, None)
            if assumed is None or self.state is None:
                return False
            placed = (assumed.request, assumed.placement)
        if self.state is not None:
            self.state.release(*placed)
        return True

    # -- assumptions ---------------------------------------------------------------------

    def assume(self, key: str, request: PodRequest, placement: Placement, ttl_s: float) -> bool:
        """Allocate a pod just bound by kubesage (CapacityError if it does not fit); False
        when the pod is already accounted."""
        assert self.state is not None
        if key in self.placed or key in self.assumed:
            return False
        self.state.allocate(request, placement)
        self.assumed[key] = Assumed(request, placement, self._clock() + ttl_s)
        return True

    def forget(self, key: str) -> bool:
        """Undo :meth:`assume` (the bind failed); True when there was one."""
        assumed = self.assumed.pop(key, None)
        if assumed is None or self.state is None:
            return False
        self.state.release(assumed.request, assumed.placement)
        return True

    def expire(self) -> int:
        """Drop assumptions past their time that the watch never confirmed; how many."""
        now = self._clock()
        expired = [key for key, entry in self.assumed.items() if entry.expires_at < now]
        for key in expired:
            self.release(key)
        return len(expired)

    def placement_of(self, key: str) -> Placement | None:
        """Where the pod with ``key`` is accounted (bound or assumed), if anywhere."""
        placed = self.placed.get(key)
        if placed is not None:
            return placed[1]
        assumed = self.assumed.get(key)
        return assumed.placement if assumed else None


def _agrees(placement: Placement, pod: BoundPod) -> bool:
    """``placement`` is where ``pod`` runs, on the devices its claims hold (if known)."""
    if placement.node != pod.node:
        return False
    return pod.held is None or (placement.gpu_indices, placement.mig_start) == pod.held


def _candidate_placements(
    state: ClusterState, node: int, request: PodRequest, pod: BoundPod
) -> Iterator[Placement]:
    """Placements to try for a bound pod, most faithful first."""
    if request.num_gpu == 0:
        yield state.placement(node, (), request)
        return
    for recorded in (pod.held, parse_gpu_indices(dict(pod.annotations))):
        if recorded is None or len(recorded[0]) != request.num_gpu:
            continue
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
