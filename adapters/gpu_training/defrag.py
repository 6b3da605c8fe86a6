"""Defragmentation: the cheapest migrations that let a large GPU request fit.

For a request that no node can host — whole GPUs (one 80 GB GPU, an 8-GPU gang)
or a MIG instance (a 7g or 4g profile) — every way of making room is a candidate:

- whole GPUs: on each node with enough GPUs of an allowed model, empty the ``k``
  GPUs that are cheapest to empty;
- MIG: on each MIG-mode GPU of an allowed model and each start slot the profile
  may take, move the instances overlapping its memory slices (and, when compute
  slices are still short, the cheapest other instances on that GPU).

A GPU holding a pod that must not move is not a choice. Candidates are tried from
the cheapest: the request's room is reserved on a copy of the cluster and every
evicted pod is re-placed elsewhere by the scheduling policy (a MIG instance may
land on another slot of the same GPU: a re-layout). The first candidate whose
pods all find a place wins, so the plan is the cheapest that works, within
``budget`` pods and ``max_trials`` candidates.

Cost of moving a pod: ``1`` for best-effort (``BE``, or Kubernetes' ``BestEffort``),
``2`` for latency-sensitive (``LS`` and others, ``Burstable`` among them). Never moved:
``Guaranteed`` pods, pods with priority above ``max_priority``, gang members (a request
with a ``gang_id``: evicting one member stops the whole job) and the pods the caller
names in ``pinned`` (``gpu-defrag`` pins the pods nothing would re-create once evicted,
and the members of gangs and distributed jobs).

Candidates are pruned only by what is certain: the request must fit in the cluster's
free GPU. Whether the evicted pods then fit elsewhere is the re-placement's to find out
(the GPU they free is part of the request's room, so their size bounds nothing).

:func:`compact` is the background counterpart: without a pending request, it
empties the partly used GPUs that are cheapest to empty, moving their pods onto
GPUs already in use, so that whole GPUs (or whole MIG GPUs) are free when large
requests come.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import CapacityError
from kubesage.core.k8s.gang import names_a_gang
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import FitCheck, fit_report
from kubesage.core.types import (
    MIG_COMPUTE_SLICES,
    Migration,
    Placement,
    PodRequest,
)

GPU_FREE_REASONS = (FitCheck.GPU_SHARE, FitCheck.WHOLE_GPUS, FitCheck.MIG_SLOT)
"""Fit-rule reasons that moving pods can fix: the GPU is there, but not free in one place."""
IMMOVABLE_QOS = ("Guaranteed",)
BEST_EFFORT_QOS = ("BE", "BestEffort")
"""Cheapest to move: the traces' ``BE`` and Kubernetes' ``BestEffort`` QoS class."""

DISTRIBUTED_JOB_KEYS = (
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "volcano.sh/job-name",
    "scheduling.k8s.io/group-name",
)
"""Labels (or annotations) of a distributed job's pods (Kubeflow's training operator,
Volcano), gang-annotated or not."""

Running = tuple[PodRequest, Placement]


def job_member(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    """Whether a pod with these labels and annotations belongs to a gang (the gang
    annotations of :mod:`~kubesage.core.k8s.gang`) or a distributed job
    (:data:`DISTRIBUTED_JOB_KEYS`): evicting it would stop the whole job."""
    if not labels and not annotations:
        return False
    return names_a_gang(annotations, labels) or any(
        labels.get(key) or annotations.get(key) for key in DISTRIBUTED_JOB_KEYS
    )


def move_cost(pod: PodRequest, max_priority: int, pinned: Collection[str] = frozenset()) -> float:
    """What moving ``pod`` costs (inf when it must not move: ``Guaranteed``, above
    ``max_priority``, a gang member, or named in ``pinned``)."""
    if (
        pod.qos in IMMOVABLE_QOS
        or pod.priority > max_priority
        or pod.gang_id is not None
        or pod.name in pinned
    ):
        return float("inf")
    return 1.0 if pod.qos in BEST_EFFORT_QOS else 2.0


def only_fragmentation(
    state: ClusterState, request: PodRequest, allowed: Collection[str] | None = None
) -> bool:
    """Whether ``request`` is pending only because free GPU is scattered: none of the
    ``allowed`` nodes (its node constraints; all when None) fits it — a cordoned or
    tainted node's free GPU is no room for it; at least one of them fails the fit rule
    on free GPU alone (:data:`GPU_FREE_REASONS`: its CPU and memory checks come first
    and passed); and the free GPU of the nodes that could ever host it (no
    unresolvable reason) covers the request."""
    if request.num_gpu == 0:
        return False
    report = fit_report(state, request)
    mine = slice(None) if allowed is None else allowed_index(state, allowed)
    if report.fits[mine].any():
        return False
    gpu_free = np.isin(report.reasons, [int(reason) for reason in GPU_FREE_REASONS])
    if not gpu_free[mine].any():
        return False
    could_host = ~report.unresolvable
    return int(state.gpu_free_milli_node[could_host].sum()) >= request.total_gpu_milli


def allowed_index(state: ClusterState, allowed: Collection[str]) -> IntArray:
    """The sorted indices of the ``allowed`` nodes the state knows."""
    return np.array(
        sorted(state.node_index[n] for n in allowed if n in state.node_index), dtype=np.int64
    )


def place_within(
    policy: Policy, state: ClusterState, request: PodRequest, allowed: Collection[str] | None
) -> tuple[Placement, str] | None:
    """The policy's placement of ``request`` on one of the ``allowed`` nodes (any when
    None) and why, or None when none of them fits it."""
    if allowed is None:
        decision = policy.decide(state, request)
        return None if decision.placement is None else (decision.placement, decision.explanation)
    index = allowed_index(state, allowed)
    fits = index[state.feasible(request, index)] if index.size else index
    if fits.size == 0:
        return None
    best = int(fits[int(np.argmax(policy.score_nodes(state, request, fits)))])
    why = f"the best of the {fits.size} node(s) its node constraints allow that fit it"
    return policy.placement_on(state, best, request), why


def _slice_mask(pod: PodRequest, placement: Placement) -> int:
    assert pod.mig is not None and placement.mig_start is not None
    return ((1 << pod.mig.memory_slices) - 1) << placement.mig_start


@dataclass(frozen=True)
class _Candidate:
    cost: float
    node: int
    gpus: tuple[int, ...]
    mig_start: int | None
    evicted: tuple[Running, ...]


@dataclass
class Defragmenter:
    """Plans migrations for large requests that do not fit (see the module docstring)."""

    policy: Policy
    budget: int = 8
    """Most pods moved for one request."""
    max_priority: int = 0
    """Pods above this priority never move."""
    max_trials: int = 32
    """Most candidates re-placed on a copy of the cluster for one request."""
    pinned: frozenset[str] = field(default_factory=frozenset)
    """Names of running pods that never move, whatever their QoS (module docstring)."""
    allowed: Mapping[str, Collection[str]] = field(default_factory=dict)
    """The nodes a running pod's own constraints allow it onto, by name (a pod not
    named: any node): a moved pod is re-placed only there."""

    def plan(
        self,
        state: ClusterState,
        running: Mapping[str, Running],
        request: PodRequest,
        allowed: Collection[str] | None = None,
    ) -> list[Migration] | None:
        """Migrations after which ``request`` fits on one of the ``allowed`` nodes (any
        when None: the pod's node constraints rule none out), or None within budget."""
        if request.num_gpu == 0 or (request.is_gpu_sharing and request.mig is None):
            return None  # sharing pods fit in leftovers; not worth moving others for
        if state.gpu_free_milli_total < request.total_gpu_milli:
            return None  # no amount of moving makes room (the one certain bound)
        nodes = self._candidate_nodes(state, request)
        if allowed is not None:
            nodes = nodes[np.isin(np.asarray(state.node_names)[nodes], list(allowed))]
        if nodes.size == 0:
            return None
        by_node, gpu_cost, gpu_pods = self._index(state, running)
        if request.mig is None:
            nodes = self._cheapest_nodes(state, gpu_cost, gpu_pods, nodes, request)
        candidates = sorted(
            (
                c
                for c in self._candidates(state, nodes, by_node, request)
                # Whether the evicted pods fit elsewhere is _try's to find out: the GPU
                # they free is part of the request's room, so their size bounds nothing.
                if 0 < len(c.evicted) <= self.budget
            ),
            key=lambda c: (c.cost, len(c.evicted), c.node, c.gpus, c.mig_start or 0),
        )
        for candidate in candidates[: self.max_trials]:
            moves = self._try(state, candidate, request)
            if moves is not None:
                return moves
        return None

    @staticmethod
    def _candidate_nodes(state: ClusterState, request: PodRequest) -> IntArray:
        """Nodes that could host ``request`` once emptied enough (vectorised pruning).

        Nothing is asked of the cluster's free GPU per node: emptying ``k`` GPUs frees
        what their pods hold there, so those pods can fit elsewhere whenever ``k`` GPUs'
        worth is free in the cluster, which :meth:`plan` checked.
        """
        possible = (
            state.gpu_model_mask(request.gpu_models)
            & (state.node_mig_enabled if request.mig is not None else ~state.node_mig_enabled)
            & (state.gpu_count >= request.num_gpu)
            & (state.cpu_capacity_milli >= request.cpu_milli)
            & (state.memory_capacity_mib >= request.memory_mib)
        )
        return np.flatnonzero(possible)

    def _index(
        self, state: ClusterState, running: Mapping[str, Running]
    ) -> tuple[dict[int, list[Running]], FloatArray, IntArray]:
        """One pass over the running pods: pods by node, move cost and pod count per GPU."""
        by_node: dict[int, list[Running]] = {}
        nodes: list[int] = []
        gpus: list[int] = []
        prices: list[float] = []
        for pod, placement in running.values():
            node = placement.node_index
            by_node.setdefault(node, []).append((pod, placement))
            price = move_cost(pod, self.max_priority, self.pinned)
            for gpu, _ in placement.gpu_milli_by_index:
                nodes.append(node)
                gpus.append(gpu)
                prices.append(price)
        cost = np.zeros(state.gpu_free_milli.shape)
        count = np.zeros(state.gpu_free_milli.shape, dtype=np.int64)
        np.add.at(cost, (nodes, gpus), prices)
        np.add.at(count, (nodes, gpus), 1)
        return by_node, cost, count

    def _cheapest_nodes(
        self,
        state: ClusterState,
        gpu_cost: FloatArray,
        count: IntArray,
        nodes: IntArray,
        request: PodRequest,
    ) -> IntArray:
        """The ``max_trials`` nodes where emptying ``k`` GPUs costs least (vectorised).

        The pod count per node is an upper bound (a pod on two chosen GPUs counts
        twice), so no node within budget is dropped.
        """
        cost = np.where(state.gpu_capacity_milli > 0, gpu_cost, np.inf)[nodes]
        order = np.argsort(cost, axis=1, kind="stable")[:, : request.num_gpu]
        node_cost = np.take_along_axis(cost, order, axis=1).sum(axis=1)
        node_count = np.take_along_axis(count[nodes], order, axis=1).sum(axis=1)
        # A pod counted on all k GPUs is one pod: only a count above budget × k is
        # certainly over budget.
        keep = (
            np.isfinite(node_cost)
            & (node_count > 0)
            & (node_count <= self.budget * request.num_gpu)
        )
        ranked = np.lexsort((nodes, node_count, node_cost))
        return np.sort(nodes[ranked[keep[ranked]]][: self.max_trials])

    def _candidates(
        self,
        state: ClusterState,
        nodes: IntArray,
        by_node: Mapping[int, list[Running]],
        request: PodRequest,
    ) -> Iterator[_Candidate]:
        for node in nodes.tolist():
            pods = by_node.get(node, [])
            if request.mig is None:
                yield from self._whole_gpu_candidates(state, node, pods, request)
            else:
                yield from self._mig_candidates(state, node, pods, request)

    def _whole_gpu_candidates(
        self, state: ClusterState, node: int, pods: list[Running], request: PodRequest
    ) -> Iterator[_Candidate]:
        gpus = int(state.gpu_count[node])
        on_gpu: list[list[Running]] = [[] for _ in range(gpus)]
        cost = np.zeros(gpus)
        for pod, placement in pods:
            for gpu in placement.gpu_indices:
                on_gpu[gpu].append((pod, placement))
                cost[gpu] += move_cost(pod, self.max_priority, self.pinned)
        order = np.argsort(cost, kind="stable")[: request.num_gpu]
        if not np.isfinite(cost[order]).all():
            return
        evicted: dict[str, Running] = {}
        for gpu in order.tolist():
            for pod, placement in on_gpu[gpu]:
                evicted[pod.name] = (pod, placement)
        yield _Candidate(
            float(cost[order].sum()),
            node,
            tuple(sorted(order.tolist())),
            None,
            tuple(evicted.values()),
        )

    def _mig_candidates(
        self, state: ClusterState, node: int, pods: list[Running], request: PodRequest
    ) -> Iterator[_Candidate]:
        shape = request.mig
        assert shape is not None
        for gpu in range(int(state.gpu_count[node])):
            # CPU-only pods (a device plugin's, an exporter's) hold no GPU; a pod that
            # holds this GPU whole or shares it leaves no room for a MIG instance.
            here = [(p, pl) for p, pl in pods if gpu in pl.gpu_indices]
            if any(p.mig is None for p, _ in here):
                continue
            for start in shape.starts:
                want = ((1 << shape.memory_slices) - 1) << start

                evicted = [(p, pl) for p, pl in here if _slice_mask(p, pl) & want]
                staying = sorted(
                    ((p, pl) for p, pl in here if not _slice_mask(p, pl) & want),
                    key=lambda item: move_cost(item[0], self.max_priority, self.pinned),
                )
                compute_used = sum(p.mig.compute_slices for p, _ in staying if p.mig)
                while compute_used + shape.compute_slices > MIG_COMPUTE_SLICES and staying:
                    pod, placement = staying.pop(0)
                    evicted.append((pod, placement))
                    compute_used -= pod.mig.compute_slices if pod.mig else 0
                cost = sum(move_cost(p, self.max_priority, self.pinned) for p, _ in evicted)
                if np.isfinite(cost):
                    yield _Candidate(cost, node, (gpu,), start, tuple(evicted))

    def _try(
        self, state: ClusterState, candidate: _Candidate, request: PodRequest
    ) -> list[Migration] | None:
        trial = state.copy()
        for pod, placement in candidate.evicted:
            trial.release(pod, placement)
        if request.mig is None:
            reserved = trial.placement(candidate.node, candidate.gpus, request)
        else:
            reserved = trial.placement(
                candidate.node, candidate.gpus, request, mig_start=candidate.mig_start
            )
        try:
            trial.allocate(request, reserved)
        except CapacityError:  # CPU or memory still short on this node
            return None
        moves = replace_pods(
            self.policy, trial, [pod for pod, _ in candidate.evicted], self.allowed
        )
        if moves is None:
            return None
        # The engine re-decides the request after the moves; make sure it then fits.
        trial.release(request, reserved)
        if not trial.feasible(request)[candidate.node]:
            return None
        return moves


def replace_pods(
    policy: Policy,
    trial: ClusterState,
    pods: Sequence[PodRequest],
    allowed: Mapping[str, Collection[str]],
) -> list[Migration] | None:
    """Place ``pods`` (largest first) on ``trial`` with ``policy``, each on a node its own
    constraints allow (``allowed``, by pod name: any node for a pod not named there);
    None when one fails."""
    moves: list[Migration] = []
    for pod in sorted(pods, key=lambda p: -p.total_gpu_milli):
        placed = place_within(policy, trial, pod, allowed.get(pod.name))
        if placed is None:
            return None
        trial.allocate(pod, placed[0])
        moves.append((pod.name, placed[0]))
    return moves
