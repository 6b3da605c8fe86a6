"""The Kubernetes scheduler's own resource scoring, as baselines.

* k8s-default: NodeResourcesFit with the LeastAllocated strategy plus
  NodeResourcesBalancedAllocation, both over CPU and memory with weight 1 — what a
  stock kube-scheduler scores. It does not look at GPUs beyond the fit check; the
  device plugin hands out the lowest-index GPUs with room.
* mostallocated: NodeResourcesFit with the MostAllocated strategy over CPU, memory
  and GPU (``nvidia.com/gpu`` as an extended resource, weight 1 each) — the usual
  bin-packing configuration for GPU clusters.

Each plugin score is an integer 0..100 as in kube-scheduler
(``pkg/scheduler/framework/plugins/noderesources``); requested amounts include the
incoming pod.
"""

from __future__ import annotations

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.policy.base import ScoringPolicy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import PodRequest

MAX_NODE_SCORE = 100


def _requested_fraction(capacity: np.ndarray, free: np.ndarray, request: int) -> FloatArray:
    """(already requested + incoming) / capacity, 0 where capacity is 0."""
    requested = (capacity - free + request).astype(np.float64)
    out = np.zeros(capacity.shape, dtype=np.float64)
    np.divide(requested, capacity, out=out, where=capacity > 0)
    return out


class KubernetesDefaultPolicy(ScoringPolicy):
    """LeastAllocated + BalancedAllocation over CPU and memory."""

    name = "k8s-default"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        cpu = _requested_fraction(
            state.cpu_capacity_milli[nodes], state.cpu_free_milli[nodes], request.cpu_milli
        )
        memory = _requested_fraction(
            state.memory_capacity_mib[nodes], state.memory_free_mib[nodes], request.memory_mib
        )
        least_allocated = np.trunc(((1 - cpu) * MAX_NODE_SCORE + (1 - memory) * MAX_NODE_SCORE) / 2)
        # BalancedAllocation: 1 - standard deviation of the fractions (|a-b|/2 for two).
        balanced = np.trunc((1 - np.abs(cpu - memory) / 2) * MAX_NODE_SCORE)
        return least_allocated + balanced


class MostAllocatedPolicy(ScoringPolicy):
    """MostAllocated over CPU, memory and GPU."""

    name = "mostallocated"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        fractions = [
            _requested_fraction(
                state.cpu_capacity_milli[nodes], state.cpu_free_milli[nodes], request.cpu_milli
            ),
            _requested_fraction(
                state.memory_capacity_mib[nodes], state.memory_free_mib[nodes], request.memory_mib
            ),
        ]
        gpu_capacity = state.gpu_count[nodes] * 1000
        has_gpu = gpu_capacity > 0
        gpu = _requested_fraction(
            gpu_capacity, state.gpu_free_milli_node[nodes], request.total_gpu_milli
        )
        # Extended resources only count on nodes that have them (as kube-scheduler does).
        total = (fractions[0] + fractions[1] + np.where(has_gpu, gpu, 0.0)) * MAX_NODE_SCORE
        weight = 2 + has_gpu.astype(np.float64)
        return np.trunc(total / weight)
