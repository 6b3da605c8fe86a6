"""kube-scheduler's NodeResourcesFit and NodePorts for what the core's resource model
(CPU, memory, ``nvidia.com/gpu``, ``nvidia.com/mig-*``) leaves out, which the kubelet's
admission checks too (a pod it refuses ends ``Failed``: ``OutOfpods``, a host-port
conflict). A pod fits a node's *extras* when, as kube-scheduler decides:

- for every other resource it requests (extended resources such as
  ``rdma/hca_shared_devices_a``, ``hugepages-*``, ``ephemeral-storage``) what the pods
  on the node request plus its own request is at most the node's allocatable (a
  resource the node does not publish has none; a request of 0 is not checked);
- one more pod stays within the node's allocatable ``pods`` (when the node publishes it);
- none of its host ports is in use there: same protocol and port, and the same host IP
  or either side's ``0.0.0.0`` (or empty), which takes the port on every IP. A
  ``hostNetwork`` pod's port with no ``hostPort`` takes its ``containerPort``, as the
  API server defaults it. Ports of app containers and of sidecars (restartable init
  containers) count.

A pod's request is its effective request, the rule the core uses for CPU
(:func:`~kubesage.core.k8s.translate.effective_requests`), rounded up to a whole unit
as kube-scheduler does; a node's allocatable is rounded down. The pods on a node are
the bound pods the informer keeps (every scheduler's, terminating ones included, as
kube-scheduler counts them) and the pods kubesage placed there that the watch does not
show bound yet (:class:`~kubesage.core.k8s.extras_ledger.ExtrasLedger`). A refused
node's reasons are kube-scheduler's words, ``node(s) didn't have free ports for the
requested pod ports`` (NodePorts, asked first), ``Too many pods`` and ``Insufficient
<resource>``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.k8s.gang import GangOutcome, place_all
from kubesage.core.k8s.translate import (
    MIG_RESOURCE_PREFIX,
    TranslateError,
    effective_requests,
    parse_quantity,
)
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_report
from kubesage.core.topology.discovery import GPU_RESOURCE
from kubesage.core.types import Decision, Placement, PodRequest

Obj = Mapping[str, Any]

CORE_RESOURCES = frozenset({"cpu", "memory", "pods", GPU_RESOURCE})
"""Resources the core's model counts (with ``nvidia.com/mig-*``), and ``pods``, which no
pod requests (the pod count is checked apart)."""
EPHEMERAL_STORAGE = "ephemeral-storage"
WILDCARD_IP = "0.0.0.0"
"""kube-scheduler's ``DefaultBindAllHostIP``: a port on it is taken on every IP."""
PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"
PODS_REASON = "Too many pods"

_LIMIT = 2**53
"""Amounts are counted up to this (a node's allocatable is capped here, a request
above it fits nowhere); sums stay within int64."""
_CAP = 2**62


def is_extra(resource: str) -> bool:
    """Whether ``resource`` is checked here rather than by the core's model."""
    return resource not in CORE_RESOURCES and not resource.startswith(MIG_RESOURCE_PREFIX)


class HostPort(NamedTuple):
    """A host port a pod takes."""

    protocol: str
    ip: str
    """The host IP, :data:`WILDCARD_IP` for every IP."""
    port: int


@dataclass(frozen=True)
class PodExtras:
    """What a pod asks for of the extras (:func:`pod_extras`)."""

    resources: tuple[tuple[str, int], ...] = ()
    """``(resource, amount)`` of every extra resource requested, ephemeral storage first."""
    ports: tuple[HostPort, ...] = ()


NO_EXTRAS = PodExtras()


def pod_extras(pod: Obj) -> PodExtras:
    """The extras ``pod`` asks for (TranslateError when its requests cannot be read)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    requests = effective_requests(spec)
    resources = sorted(
        (name, min(math.ceil(value), _LIMIT + 1))
        for name, value in requests.items()
        if is_extra(name) and value > 0
    )
    resources.sort(key=lambda item: item[0] != EPHEMERAL_STORAGE)  # kube-scheduler's order
    return PodExtras(tuple(resources), host_ports(spec))


def host_ports(spec: Obj) -> tuple[HostPort, ...]:
    """The host ports a pod spec takes (see the module docstring)."""
    host_network = spec.get("hostNetwork") is True
    containers = [c for c in _list(spec.get("containers")) if isinstance(c, Mapping)]
    containers += [
        c
        for c in _list(spec.get("initContainers"))
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    found: set[HostPort] = set()
    for container in containers:
        for entry in _list(container.get("ports")):
            if not isinstance(entry, Mapping):
                continue
            port = entry.get("hostPort")
            if not port and host_network:
                port = entry.get("containerPort")
            if isinstance(port, bool) or not isinstance(port, int) or port <= 0:
                continue
            protocol = str(entry.get("protocol") or "TCP")
            found.add(HostPort(protocol, str(entry.get("hostIP") or WILDCARD_IP), port))
    return tuple(sorted(found))


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _allocatable(node: Obj, resource: str) -> int | None:
    """The node's allocatable ``resource`` rounded down (None when not published; 0
    when unreadable)."""
    status = node.get("status")
    status = status if isinstance(status, Mapping) else {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(allocatable, Mapping) or resource not in allocatable:
        return None
    try:
        value = parse_quantity(allocatable[resource])
    except TranslateError:
        return 0
    return max(0, min(math.floor(value), _LIMIT))


class NodeExtras:
    """What the pods on each of ``node_names`` use of the extras, and which nodes still
    fit a pod's (:meth:`mask`). Placements are added with :meth:`add` and taken back to
    a :meth:`mark` with :meth:`rollback`."""

    def __init__(self, nodes: Mapping[str, Obj], node_names: Sequence[str]) -> None:
        self.node_names = node_names
        """The node list the masks index (the state's: a rebuild makes a new list)."""
        self._index = {name: index for index, name in enumerate(node_names)}
        self._nodes = [nodes.get(name) or {} for name in node_names]
        pods = (_allocatable(node, "pods") for node in self._nodes)
        self._pods_free: IntArray = np.array(
            [_CAP if value is None else value for value in pods], dtype=np.int64
        )
        self._allocatable: dict[str, IntArray] = {}
        self._used: dict[str, IntArray] = {}
        self._ports: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        self._journal: list[tuple[int, PodExtras]] = []

    # -- counting -----------------------------------------------------------------------

    def count(self, node: str, extras: PodExtras) -> None:
        """A pod on ``node`` (ignored when not one of the names)."""
        index = self._index.get(node)
        if index is not None:
            self._apply(index, extras, 1)

    def count_all(self, pods: Iterable[tuple[str, PodExtras]]) -> None:
        """:meth:`count` of each ``(node, extras)``."""
        plain = [0] * len(self._nodes)  # pods that ask for nothing extra: most
        for node, extras in pods:
            index = self._index.get(node)
            if index is None:
                continue
            if extras.resources or extras.ports:
                self._apply(index, extras, 1)
            else:
                plain[index] += 1
        self._pods_free -= np.array(plain, dtype=np.int64)

    def add(self, node: str, extras: PodExtras) -> None:
        """:meth:`count`, undone by a :meth:`rollback` to a mark taken before."""
        index = self._index.get(node)
        if index is not None:
            self._apply(index, extras, 1)
            self._journal.append((index, extras))

    def remove(self, node: str, extras: PodExtras) -> None:
        """Take back a pod counted or added on ``node`` (its bind failed)."""
        index = self._index.get(node)
        if index is not None:
            self._apply(index, extras, -1)

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Take back what :meth:`add` added since ``mark``."""
        while len(self._journal) > mark:
            index, extras = self._journal.pop()
            self._apply(index, extras, -1)

    def _apply(self, index: int, extras: PodExtras, sign: int) -> None:
        self._pods_free[index] -= sign
        for name, amount in extras.resources:
            used = self._used.get(name)
            if used is None:
                used = self._used[name] = np.zeros(len(self._nodes), dtype=np.int64)
            used[index] = min(int(used[index]) + sign * amount, _CAP)
        for port in extras.ports:
            ips = self._ports.setdefault((port.protocol, port.port), {}).setdefault(
                index, Counter()
            )
            ips[port.ip] += sign
            if ips[port.ip] <= 0:
                del ips[port.ip]

    # -- fitting ------------------------------------------------------------------------

    def mask(self, extras: PodExtras) -> BoolArray | None:
        """Nodes whose extras fit a pod asking ``extras`` (None: every node)."""
        ok: BoolArray = self._pods_free > 0
        for name, amount in extras.resources:
            ok &= self._free(name) >= amount
        for index in self._port_conflicts(extras.ports):
            ok[index] = False
        return None if bool(ok.all()) else ok

    def reasons(self, extras: PodExtras, index: int) -> list[str]:
        """Why the node at ``index`` refuses ``extras`` (empty when it fits them)."""
        if index in self._port_conflicts(extras.ports):
            return [PORTS_REASON]
        reasons = [PODS_REASON] if self._pods_free[index] <= 0 else []
        for name, amount in extras.resources:
            if self._free(name)[index] < amount:
                reasons.append(f"Insufficient {name}")
        return reasons

    def summary(self, extras: PodExtras, nodes: Iterable[int]) -> str:
        """The reasons of ``nodes`` with their node counts, most common first."""
        counts: Counter[str] = Counter()
        for index in nodes:
            counts.update(self.reasons(extras, int(index)))
        return "; ".join(
            f"{reason} ({count} node{'' if count == 1 else 's'})"
            for reason, count in counts.most_common()
        )

    def refusal(self, extras: PodExtras, node: str) -> str | None:
        """Why ``node`` refuses ``extras``, naming the filter; None when it fits them."""
        index = self._index.get(node)
        reasons = [] if index is None else self.reasons(extras, index)
        if not reasons:
            return None
        plugin = "NodePorts" if reasons == [PORTS_REASON] else "NodeResourcesFit"
        return f"{plugin}: {', '.join(reasons)}"

    def _free(self, name: str) -> IntArray:
        allocatable = self._allocatable.get(name)
        if allocatable is None:
            values = (_allocatable(node, name) for node in self._nodes)
            allocatable = np.array([value or 0 for value in values], dtype=np.int64)
            self._allocatable[name] = allocatable
        used = self._used.get(name)
        return allocatable if used is None else allocatable - used

    def _port_conflicts(self, ports: Iterable[HostPort]) -> set[int]:
        nodes: set[int] = set()
        for port in ports:
            for index, ips in self._ports.get((port.protocol, port.port), {}).items():
                if ips and (port.ip == WILDCARD_IP or WILDCARD_IP in ips or port.ip in ips):
                    nodes.add(index)
        return nodes


# -- placing members -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExtrasMember:
    """A member to place: its request, the nodes its spec allows (None: all), its extras."""

    request: PodRequest
    eligible: BoolArray | None
    extras: PodExtras


def place_with_extras(
    state: ClusterState, members: Sequence[ExtrasMember], policy: Policy, use: NodeExtras
) -> GangOutcome:
    """:func:`~kubesage.core.k8s.gang.place_all` (on ``state``, mutated), each member also
    kept off the nodes whose extras do not fit it with the members placed before it
    counted. Placed: they stay added to ``use``; else ``use`` is as it was. A member no
    node fits is explained with the extras' reasons counted apart."""
    mark = use.mark()
    steps = _Steps(members, use)
    outcome = place_all(state, steps, _Noting(policy, steps))
    if outcome.placements is None:
        use.rollback(mark)
    return outcome


Step = tuple[PodRequest, BoolArray | None]


class _Steps(Sequence[Step]):
    """The members as place_all takes them: each one's nodes are worked out when
    place_all comes to it, after it placed the ones before (their node: ``last``)."""

    def __init__(self, members: Sequence[ExtrasMember], use: NodeExtras) -> None:
        self.members = members
        self.use = use
        self.current: tuple[ExtrasMember, BoolArray | None] | None = None
        self.last: Placement | None = None

    def __len__(self) -> int:
        return len(self.members)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | Sequence[Step]:
        if isinstance(index, slice):
            return [self._step(member) for member in self.members[index]]
        return self._step(self.members[index])

    def _step(self, member: ExtrasMember) -> Step:
        fits = self.use.mask(member.extras)
        self.current = (member, fits)
        if fits is None or member.eligible is None:
            return member.request, member.eligible if fits is None else fits
        return member.request, member.eligible & fits

    def __iter__(self) -> Iterator[Step]:
        for member in self.members:
            self.last = None
            yield self._step(member)
            # place_all goes on only once the member is placed, where the policy said.
            assert self.last is not None
            self.use.add(self.last.node, member.extras)


class _Noting:
    """The policy, noting each placement for :class:`_Steps`, and counting the nodes the
    extras refused by their own reasons when no node fits."""

    def __init__(self, policy: Policy, steps: _Steps) -> None:
        self._policy = policy
        self._steps = steps

    @property
    def name(self) -> str:
        return self._policy.name

    def score_nodes(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        return self._policy.score_nodes(state, request, nodes)

    def placement_on(self, state: ClusterState, node: int, request: PodRequest) -> Placement:
        return self._policy.placement_on(state, node, request)

    def decide(self, state: ClusterState, request: PodRequest) -> Decision:
        decision = self._policy.decide(state, request)
        if decision.placement is not None:
            self._steps.last = decision.placement
            return decision
        member, fits = self._steps.current or (None, None)
        if member is None:
            return decision
        # Nodes the pod's own filters leave out are hidden from the policy (no CPU fits
        # there), so the fit rule's words would say "CPU": they are named apart.
        left_out = np.zeros(state.num_nodes, dtype=bool)
        if member.eligible is not None:
            left_out = ~member.eligible
        refused = np.zeros(state.num_nodes, dtype=bool) if fits is None else ~fits & ~left_out
        if not left_out.any() and not refused.any():
            return decision
        others = np.flatnonzero(~refused & ~left_out)
        core = fit_report(state, request, others).summary() if others.size else ""
        extras = self._steps.use.summary(member.extras, np.flatnonzero(refused))
        count = int(left_out.sum())
        filtered = (
            "left out by the pod's node filters (nodeSelector, affinity, taints, cordons, "
            f"GPUs or MIG instances not advertised) ({count} node{'' if count == 1 else 's'})"
            if count
            else ""
        )
        words = "; ".join(part for part in (core, extras, filtered) if part)
        return decision.model_copy(update={"explanation": f"no node fits: {words}"})
