"""What each pod holds in the live ClusterState: bound pods where they run, assumed ones
where kubesage is binding them; and, for kubesage's own placements only, pending pods
nominated to a node.

:class:`~kubesage.core.k8s.informer.ClusterSync` keeps the Node and Pod objects; this
module turns them into allocations. The state is one node per Node object; a node
added, removed or changed in what the core sees rebuilds it (node indices change) and
every bound pod is allocated again.

Which GPUs a bound pod holds is not in the Pod object: the device plugin picks them
on the node. Mapping, most faithful first:

0. a pod whose GPUs come through DRA holds the devices of its claims' allocation
   (:meth:`~kubesage.core.k8s.claim_cache.ClaimCache.held`), whoever allocated them;
1. pods that kubesage bound carry the GPUs it chose (annotations written through the
   Binding, see :mod:`kubesage.core.k8s.binder`), used when they still fit;
2. otherwise the lowest-index GPUs that fit (for whole GPUs, the lowest-index wholly
   free ones: the NVIDIA device plugin's order), for MIG the first free slot;
3. a pod kubesage cannot model (its request cannot be read: two MIG instances, say) or
   that fits nowhere on its node (the view and the node disagree) is *counted
   conservatively* (:class:`Approximation`), kept in ``unaccounted`` with the reason
   and retried when something is released or at the next rebuild. It takes its
   effective requests' CPU and memory (:func:`~kubesage.core.k8s.schedulable.usage_of`),
   capped by what is free on the node (then counted again in full when something
   there is released), and keeps GPUs out of placement (their free room hidden with
   :meth:`~kubesage.core.state.cluster_state.ClusterState.cordon_gpu`) until it goes:
   the GPUs its claims hold when known; else one per GPU, MIG instance or GPU share it
   asks for (capped by the node's GPUs; those with room first, lowest index first);
   else, when that cannot be told, every GPU of the node. A change on such a node
   gives them back first and hides them again after (:meth:`PodAccounting._opened`).
   Nothing is counted for a pod whose node is not in the state, and no CPU or memory
   for one whose quantities cannot be parsed.

Pods kubesage is binding are *assumed* until the watch shows them bound, so the next
decision already sees them, as kube-scheduler's cache does. An assumption never
expires while its bind is in flight: its time to live starts when the bind is reported
finished (:meth:`PodAccounting.finish_binding`, kube-scheduler's FinishBinding).

Pending pods nominated to a node (``status.nominatedNodeName``: kube-scheduler evicted
pods there to make room for them) hold nothing in the live state, which the extender
filters kube-scheduler's own preemptor on; :meth:`PodAccounting.reserving`, the state
kubesage's own placements are decided on, lets them hold their requests there, as
kube-scheduler's ``addNominatedPods`` does. :class:`PodAccounting` does no locking:
its owner calls it under its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from kubesage.core.errors import CapacityError
from kubesage.core.k8s.binder import parse_gpu_indices
from kubesage.core.k8s.claim_cache import Held
from kubesage.core.k8s.schedulable import Usage
from kubesage.core.policy.gpu_choice import best_mig_slot, lowest_index_gpus
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)


@dataclass
class Assumed:
    """A pod accounted before the watch shows it bound; it expires at ``expires_at``
    (clock time), None while its bind is in flight (it never expires then)."""

    request: PodRequest
    placement: Placement
    expires_at: float | None = None


@dataclass(frozen=True)
class BoundPod:
    """A pod on a node (where it runs, or where it is nominated) as the accounting needs
    it: its cache key, request and node."""

    key: str
    request: PodRequest | None
    """None when its requests cannot be read (it is then counted by ``usage``)."""
    node: str
    annotations: Mapping[str, str]
    """The Pod's annotations (the GPUs kubesage bound it to, when it did)."""
    held: Held | None = None
    """``(GPU indices, MIG start)`` its ResourceClaims' allocation holds, if any."""
    usage: Usage | None = None
    """What it holds at least when ``request`` is None
    (:func:`~kubesage.core.k8s.schedulable.usage_of`)."""


@dataclass(frozen=True)
class Approximation:
    """A bound pod counted conservatively (the module docstring's rule 3)."""

    pod: BoundPod
    request: PodRequest
    """The CPU and memory taken (no GPUs)."""
    placement: Placement
    gpus: frozenset[int]
    """The node's GPUs kept out of placement for it."""
    short: bool
    """Less CPU or memory taken than it holds (all that was free): counted again in
    full when something on its node is released."""


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
        self.approximated: dict[str, Approximation] = {}
        """Bound pods counted conservatively, by key (also in ``unaccounted``)."""
        self.assumed: dict[str, Assumed] = {}
        self.unaccounted: dict[str, str] = {}
        """Bound pods not allocated exactly, with why and what is counted instead."""
        self.nominated: dict[str, BoundPod] = {}
        """Pending pods nominated to a node (``node``), by key (see :meth:`reserving`)."""
        self.rebuilds = 0
        """Times the state was rebuilt (node set or node spec changed)."""
        self._cordons: dict[int, list[int]] = {}
        """The GPUs this accounting keeps out of placement now, by node index."""

    # -- the whole state -----------------------------------------------------------------

    def rebuild(
        self, specs: Iterable[NodeSpec], bound: Iterable[BoundPod], live: Container[str]
    ) -> None:
        """A fresh state from ``specs`` (in node order) with every ``bound`` pod allocated
        again, and the assumptions of pods still ``live`` that have not expired."""
        self.rebuilds += 1
        self.placed, self.approximated, self.unaccounted, self._cordons = {}, {}, {}, {}
        ordered = list(specs)
        if not ordered:
            self.state = None
            self.node_names = []
            return
        self.state = ClusterState(ordered)
        self.node_names = list(self.state.node_names)
        now = self._clock()
        assumed, self.assumed = self.assumed, {}
        left: list[tuple[BoundPod, str]] = []
        for pod in bound:
            assumed.pop(pod.key, None)
            reason = self._place_exactly(pod)
            if reason is not None:
                left.append((pod, reason))
        for key, entry in assumed.items():
            if (entry.expires_at is not None and entry.expires_at < now) or key not in live:
                continue
            index = self.state.node_index.get(entry.placement.node)
            if index is None:
                continue
            placement = entry.placement.model_copy(update={"node_index": index})
            try:
                self._allocate(entry.request, placement)
            except CapacityError:
                continue
            self.assumed[key] = Assumed(entry.request, placement, entry.expires_at)
        for pod, reason in left:  # after the exact ones: they take what they really hold
            self._approximate(pod, reason)
        self.last_good = self.state

    # -- one pod -------------------------------------------------------------------------

    def place(self, pod: BoundPod) -> None:
        """Allocate a bound pod where it runs (see the module docstring for the GPUs),
        or count it conservatively."""
        assert self.state is not None
        old = self.approximated.get(pod.key)
        if old is not None:
            if old.pod == pod and pod.request is None and not old.short:
                return  # counted in full already, and it cannot be placed exactly
            self.release(pod.key)
        reason = self._place_exactly(pod)
        if reason is not None:
            self._approximate(pod, reason)

    def _place_exactly(self, pod: BoundPod) -> str | None:
        """Allocate ``pod`` on the devices it holds; else say why not."""
        assert self.state is not None
        index = self.state.node_index.get(pod.node)
        if index is None:
            return f"node {pod.node} is not in the state"
        if pod.request is None:
            return "its requests cannot be read"
        for placement in _candidate_placements(self.state, index, pod.request, pod):
            try:
                self._allocate(pod.request, placement)
            except CapacityError:
                continue
            self.placed[pod.key] = (pod.request, placement)
            self.unaccounted.pop(pod.key, None)
            return None
        if pod.key not in self.unaccounted:
            log.warning(
                "pod %s bound to %s does not fit there in kubesage's view; counted conservatively",
                pod.request.name,
                pod.node,
            )
        return f"does not fit on {pod.node} in kubesage's view"

    def _approximate(self, pod: BoundPod, reason: str) -> None:
        """Count ``pod`` conservatively (the module docstring's rule 3)."""
        assert self.state is not None
        index = self.state.node_index.get(pod.node)
        if index is None:
            self.unaccounted[pod.key] = f"{reason}; nothing counted"
            return
        taken = frozenset(
            gpu
            for other in self.approximated.values()
            if other.placement.node_index == index
            for gpu in other.gpus
        )
        request, placement, gpus, short = _conservative(self.state, index, pod, taken)
        with self._opened(index) as state:
            state.allocate(request, placement)  # never more than is free
            self.approximated[pod.key] = Approximation(pod, request, placement, gpus, short)
        usage = _usage(pod)
        counted = (
            f"CPU and memory not counted ({usage.unread})"
            if usage.unread
            else f"{request.cpu_milli}m CPU and {request.memory_mib}Mi memory counted"
        )
        held = ",".join(str(gpu) for gpu in sorted(gpus)) or "none"
        self.unaccounted[pod.key] = f"{reason}; {counted}, GPUs held out of placement: {held}"

    def seen_bound(self, pod: BoundPod) -> None:
        """The watch shows ``pod`` bound: confirm its assumption, or (re)place it."""
        self.nominated.pop(pod.key, None)
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
            self._release(assumed.request, assumed.placement)
        self.place(pod)

    def remove(self, key: str) -> bool:
        """Forget a pod that is gone; True when that freed resources."""
        self.unaccounted.pop(key, None)
        self.nominated.pop(key, None)
        released = self.release(key)
        self.assumed.pop(key, None)
        return released

    def release(self, key: str) -> bool:
        """Give back what the pod with ``key`` holds (bound, approximated or assumed);
        True if it held any."""
        placed = self.placed.pop(key, None)
        if placed is None:
            assumed = self.assumed.pop(key, None)
            placed = (assumed.request, assumed.placement) if assumed else None
        approximation = self.approximated.get(key) if placed is None else None
        if self.state is None or (placed is None and approximation is None):
            return False
        if placed is not None:
            self._release(*placed)
            return True
        assert approximation is not None
        with self._opened(approximation.placement.node_index) as state:
            del self.approximated[key]
            state.release(approximation.request, approximation.placement)
        return True

    # -- assumptions ---------------------------------------------------------------------

    def assume(self, key: str, request: PodRequest, placement: Placement) -> bool:
        """Allocate a pod kubesage is binding (CapacityError if it does not fit); False
        when the pod is already accounted. It never expires before
        :meth:`finish_binding`."""
        assert self.state is not None
        if key in self.placed or key in self.assumed:
            return False
        self._allocate(request, placement)
        self.assumed[key] = Assumed(request, placement)
        return True

    def finish_binding(self, key: str, ttl_s: float) -> bool:
        """The bind of the pod with ``key`` finished: its assumption expires ``ttl_s``
        from now unless the watch confirms it first; False when it has none."""
        assumed = self.assumed.get(key)
        if assumed is None:
            return False
        assumed.expires_at = self._clock() + ttl_s
        return True

    def forget(self, key: str) -> bool:
        """Undo :meth:`assume` (the bind failed); True when there was one."""
        assumed = self.assumed.pop(key, None)
        if assumed is None or self.state is None:
            return False
        self._release(assumed.request, assumed.placement)
        return True

    def expire(self) -> int:
        """Drop the assumptions whose bind finished more than their time to live ago and
        that the watch never confirmed; how many."""
        now = self._clock()
        expired = [
            key
            for key, entry in self.assumed.items()
            if entry.expires_at is not None and entry.expires_at < now
        ]
        for key in expired:
            self.release(key)
        return len(expired)

    def placement_of(self, key: str) -> Placement | None:
        """Where the pod with ``key`` is accounted exactly (bound or assumed), if anywhere."""
        placed = self.placed.get(key)
        if placed is not None:
            return placed[1]
        assumed = self.assumed.get(key)
        return assumed.placement if assumed else None

    # -- nominated pods ------------------------------------------------------------------

    def nominate(self, key: str, pod: BoundPod | None) -> None:
        """Note where a pending pod is nominated (``pod.node``); None: it is not."""
        if pod is None:
            self.nominated.pop(key, None)
        else:
            self.nominated[key] = pod

    def reserving(self, priority: int, placing: Container[str] = ()) -> ClusterState:
        """A copy of the state in which every nominated pod of at least ``priority`` (and
        every one whose request cannot be read), not assumed nor among the keys
        ``placing``, holds its request on its nominated node: exactly where it fits, else
        conservatively (rule 3)."""
        assert self.state is not None
        state = self.state.copy()
        for pod in self.nominated.values():
            index = state.node_index.get(pod.node)
            if index is None or pod.key in self.assumed or pod.key in placing:
                continue
            if pod.request is not None:
                if pod.request.priority < priority:
                    continue
                if _allocate_first(
                    state, pod.request, _candidate_placements(state, index, pod.request, pod)
                ):
                    continue
            request, placement, gpus, _ = _conservative(state, index, pod, frozenset())
            state.allocate(request, placement)
            for gpu in sorted(gpus):
                if _has_free(state, index, gpu):
                    state.cordon_gpu(index, gpu)
        return state

    # -- changes to the live state -------------------------------------------------------

    def _allocate(self, request: PodRequest, placement: Placement) -> None:
        assert self.state is not None
        if not request.num_gpu:
            self.state.allocate(request, placement)
            return
        with self._opened(placement.node_index) as state:
            state.allocate(request, placement)

    def _release(self, request: PodRequest, placement: Placement) -> None:
        assert self.state is not None
        if not request.num_gpu:
            self.state.release(request, placement)
            return
        with self._opened(placement.node_index) as state:
            state.release(request, placement)

    @contextmanager
    def _opened(self, node: int) -> Iterator[ClusterState]:
        """The state with the GPUs held out of placement on ``node`` given back, for a
        change there; held out again afterwards, as the approximations then say (only
        those with room: hiding nothing is not needed)."""
        state = self.state
        assert state is not None
        for gpu in self._cordons.pop(node, ()):
            state.uncordon_gpu(node, gpu)
        try:
            yield state
        finally:
            wanted: set[int] = set()
            for approximation in self.approximated.values():
                if approximation.placement.node_index == node:
                    wanted |= approximation.gpus
            cordons = [gpu for gpu in sorted(wanted) if _has_free(state, node, gpu)]
            for gpu in cordons:
                state.cordon_gpu(node, gpu)
            if cordons:
                self._cordons[node] = cordons


def _usage(pod: BoundPod) -> Usage:
    """What ``pod`` holds at least: its request when it has one, else its ``usage``."""
    if pod.request is not None:
        return Usage(pod.request.cpu_milli, pod.request.memory_mib, pod.request.num_gpu)
    return pod.usage or Usage(0, 0, None, unread="nothing was read")


def _conservative(
    state: ClusterState, node: int, pod: BoundPod, taken: frozenset[int]
) -> tuple[PodRequest, Placement, frozenset[int], bool]:
    """What counting ``pod`` conservatively on ``node`` takes: ``(CPU and memory request,
    its placement, GPUs to hold out of placement, whether less than it holds)``;
    ``taken``: the GPUs other pods hold out there already (chosen last)."""
    usage = _usage(pod)
    cpu = min(usage.cpu_milli, int(state.cpu_free_milli[node]))
    memory = min(usage.memory_mib, int(state.memory_free_mib[node]))
    name = pod.request.name if pod.request is not None else pod.key
    request = PodRequest(name=name, cpu_milli=cpu, memory_mib=memory)
    count = int(state.gpu_count[node])
    if pod.held is not None and pod.held[0]:
        gpus = frozenset(gpu for gpu in pod.held[0] if gpu < count)
    elif usage.gpus is None:
        gpus = frozenset(range(count))
    else:
        order = sorted(
            range(count), key=lambda gpu: (gpu in taken, not _has_free(state, node, gpu), gpu)
        )
        gpus = frozenset(order[: usage.gpus])
    short = cpu < usage.cpu_milli or memory < usage.memory_mib
    return request, state.placement(node, (), request), gpus, short


def _has_free(state: ClusterState, node: int, gpu: int) -> bool:
    """Something on GPU ``gpu`` of ``node`` could still be placed (milli-GPU or MIG)."""
    return bool(
        state.gpu_free_milli[node, gpu] > 0
        or state.mig_free_slices[node, gpu] != 0
        or state.mig_free_compute[node, gpu] > 0
    )


def _allocate_first(
    state: ClusterState, request: PodRequest, placements: Iterable[Placement]
) -> bool:
    """Allocate ``request`` at the first of ``placements`` that fits; False if none does."""
    for placement in placements:
        try:
            state.allocate(request, placement)
        except CapacityError:
            continue
        return True
    return False


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
