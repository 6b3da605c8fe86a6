"""Defragmentation: the cheapest migrations that let a large GPU request fit.

For a whole-GPU request (one 80 GB GPU, an 8-GPU gang) that no node can host, each
node with enough GPUs of an allowed model is a candidate: free its ``k`` GPUs that
are cheapest to empty (fewest pods, best-effort before latency-sensitive; a GPU
holding a pod that must not move is not a choice), check its CPU and memory, then
re-place every evicted pod elsewhere with the scheduling policy on a copy of the
cluster where the request's GPUs are already reserved. The candidate with the
lowest cost within the migration budget wins.

Cost of moving a pod: ``1`` for best-effort (``BE``), ``2`` for latency-sensitive
(``LS`` and others); ``Guaranteed`` pods and pods with priority above
``max_priority`` never move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import CapacityError
from kubesage.core.policy.base import Policy
from kubesage.core.sim.engine import Migration
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Placement, PodRequest

IMMOVABLE_QOS = ("Guaranteed",)


def move_cost(pod: PodRequest, max_priority: int) -> float:
    """What moving ``pod`` costs (inf when it must not move)."""
    if pod.qos in IMMOVABLE_QOS or pod.priority > max_priority:
        return float("inf")
    return 1.0 if pod.qos == "BE" else 2.0


@dataclass
class Defragmenter:
    """Plans migrations for whole-GPU requests that do not fit (see the module docstring)."""

    policy: Policy
    budget: int = 8
    """Most pods moved for one request."""
    max_priority: int = 0
    """Pods above this priority never move."""

    def plan(
        self,
        state: ClusterState,
        running: Mapping[str, tuple[PodRequest, Placement]],
        request: PodRequest,
    ) -> list[Migration] | None:
        if request.num_gpu == 0 or request.is_gpu_sharing or request.mig is not None:
            return None  # only whole-GPU requests are worth moving pods for
        by_node: dict[int, list[tuple[PodRequest, Placement]]] = {}
        for pod, placement in running.values():
            by_node.setdefault(placement.node_index, []).append((pod, placement))
        candidates = np.flatnonzero(
            state.gpu_model_mask(request.gpu_models)
            & ~state.node_mig_enabled
            & (state.gpu_count >= request.num_gpu)
            & (state.cpu_capacity_milli >= request.cpu_milli)
            & (state.memory_capacity_mib >= request.memory_mib)
        )
        best: tuple[float, list[Migration]] | None = None
        for node in candidates:
            plan = self._plan_on(state, by_node.get(int(node), []), int(node), request)
            if plan is not None and (best is None or plan[0] < best[0]):
                best = plan
        return best[1] if best is not None else None

    def _plan_on(
        self,
        state: ClusterState,
        pods: list[tuple[PodRequest, Placement]],
        node: int,
        request: PodRequest,
    ) -> tuple[float, list[Migration]] | None:
        gpus = int(state.gpu_count[node])
        on_gpu: list[list[tuple[PodRequest, Placement]]] = [[] for _ in range(gpus)]
        cost = np.zeros(gpus)
        for pod, placement in pods:
            for gpu in placement.gpu_indices:
                on_gpu[gpu].append((pod, placement))
                cost[gpu] += move_cost(pod, self.max_priority)
        order = np.argsort(cost, kind="stable")[: request.num_gpu]
        if not np.isfinite(cost[order]).all():
            return None
        evicted: dict[str, tuple[PodRequest, Placement]] = {}
        for gpu in order:
            for pod, placement in on_gpu[int(gpu)]:
                evicted[pod.name] = (pod, placement)
        if not evicted or len(evicted) > self.budget:
            return None
        trial = state.copy()
        for pod, placement in evicted.values():
            trial.release(pod, placement)
        reserved = trial.placement(node, [int(g) for g in order], request)
        try:
            trial.allocate(request, reserved)
        except CapacityError:  # CPU or memory still short on this node
            return None
        moves: list[Migration] = []
        total = 0.0
        for pod, _ in sorted(evicted.values(), key=lambda item: -item[0].total_gpu_milli):
            decision = self.policy.decide(trial, pod)
            if decision.placement is None:
                return None
            trial.allocate(pod, decision.placement)
            moves.append((pod.name, decision.placement))
            total += move_cost(pod, self.max_priority)
        # The engine re-decides the request after the moves; make sure it then fits.
        trial.release(request, reserved)
        if trial.gpu_whole_free_count[node] < request.num_gpu:
            return None
        return total, moves
