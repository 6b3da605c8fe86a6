"""The baselines of the FGD paper, scored as its simulator scores them.

Each score is the simulator's integer score (Go's truncating arithmetic), because
truncation decides which nodes tie and ties decide placements. Resource vectors
are ``[CPU, total GPU]`` normalised by the largest node spec the simulator assumes
(128 cores, 8 GPUs). Memory is checked by the fit test only, as in the simulator.

* random: a uniformly random feasible node; a sharing pod takes a random GPU.
* dotprod: Tetris-style alignment; the *smallest* dot product of free and requested
  resources wins, ``floor(100 · (1 − (free·request)/2))``.
* gpuclustering: keep pods of one GPU shape together: ``25·(8000 − free)/8000``
  plus 75 (node runs only this shape), 50 (this shape among others), 25 (no GPU pods
  yet) or 0 (only other shapes). CPU-only pods score 0 everywhere.
* gpupacking: prefer partly used GPUs, then partly used nodes, then empty nodes
  with few GPUs.
* bestfit: least leftover weighted CPU and GPU after placement, min-max normalised
  to 0..100 over the feasible nodes.

All but random take the tightest-fitting GPU for a sharing pod.
"""

from __future__ import annotations

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.policy.base import ScoringPolicy
from kubesage.core.policy.gpu_choice import mig_slot_losses, random_gpu, tightest_gpu
from kubesage.core.state.cluster_state import ClusterState, gpu_pod_kind
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

MAX_SPEC_CPU_MILLI = 128_000
"""CPU normaliser of the simulator's resource vectors (128 cores)."""
MAX_SPEC_GPU_MILLI = 8_000
"""GPU normaliser of the simulator's resource vectors (8 GPUs)."""
MAX_NODE_SCORE = 100


class RandomPolicy(ScoringPolicy):
    """A uniformly random feasible node."""

    name = "random"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        scores = np.zeros(nodes.size)
        scores[self.rng.integers(nodes.size)] = MAX_NODE_SCORE
        return scores

    def choose_gpus(self, state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
        return random_gpu(state, node, request, self.rng)


class _TightestGpuPolicy(ScoringPolicy):
    def choose_gpus(self, state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
        return tightest_gpu(state, node, request)


class DotProductPolicy(_TightestGpuPolicy):
    """Smallest normalised dot product of free and requested [CPU, GPU]."""

    name = "dotprod"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        free_cpu = state.cpu_free_milli[nodes] / MAX_SPEC_CPU_MILLI
        free_gpu = state.gpu_free_milli_node[nodes] / MAX_SPEC_GPU_MILLI
        dot = free_cpu * (request.cpu_milli / MAX_SPEC_CPU_MILLI) + free_gpu * (
            request.total_gpu_milli / MAX_SPEC_GPU_MILLI
        )
        scores: FloatArray = np.trunc(100.0 * (1.0 - dot / 2.0))
        return scores


class GpuClusteringPolicy(_TightestGpuPolicy):
    """Put pods of the same GPU shape together."""

    name = "gpuclustering"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        if request.num_gpu == 0:
            return np.zeros(nodes.size)
        used = MAX_SPEC_GPU_MILLI - state.gpu_free_milli_node[nodes]
        base = (MAX_NODE_SCORE // 4) * used // MAX_SPEC_GPU_MILLI
        same = state.gpu_pod_count[nodes, gpu_pod_kind(request)] > 0
        kinds_present = state.gpu_pod_kinds[nodes]
        bonus = np.select(
            [same & (kinds_present == 1), same, kinds_present == 0],
            [75, 50, 25],
            default=0,
        )
        scores: FloatArray = (bonus + base).astype(np.float64)
        return scores


class GpuPackingPolicy(_TightestGpuPolicy):
    """Prefer partly used GPUs, then partly used nodes, then small empty nodes."""

    name = "gpupacking"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        if request.num_gpu == 0:
            return np.zeros(nodes.size)
        whole_free = state.gpu_whole_free_count[nodes]
        empty_node = whole_free == state.gpu_count[nodes]
        if request.is_gpu_sharing:
            free = state.gpu_free_milli[nodes]
            tightest = np.where(free >= request.gpu_milli, free, GPU_MILLI_PER_GPU + 1).min(axis=1)
            on_partial_gpu = np.maximum(
                MAX_NODE_SCORE - (tightest * 100 // GPU_MILLI_PER_GPU) // 10, 50
            )
            # The tightest fitting GPU is wholly free: the pod opens one new GPU.
            opens_gpus = max(50 - 1, 33)
            partial = np.where(tightest == GPU_MILLI_PER_GPU, opens_gpus, on_partial_gpu)
        else:
            partial = np.full(nodes.size, max(50 - request.num_gpu, 33))
        on_empty_node = np.maximum(33 - whole_free, whole_free)
        scores: FloatArray = np.where(empty_node, on_empty_node, partial).astype(np.float64)
        return scores


class BestFitPolicy(_TightestGpuPolicy):
    """Least weighted CPU and GPU left over after placement."""

    name = "bestfit"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        cpu_left = (state.cpu_free_milli[nodes] - request.cpu_milli) / MAX_SPEC_CPU_MILLI
        gpu_left = (state.gpu_free_milli_node[nodes] - request.total_gpu_milli) / MAX_SPEC_GPU_MILLI
        raw = np.trunc((1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * 100.0)
        high, low = raw.max(), raw.min()
        if high == low:
            return np.zeros(nodes.size)
        scores: FloatArray = np.trunc((raw - low) * MAX_NODE_SCORE / (high - low))
        return scores


class MigPackingPolicy(BestFitPolicy):
    """MIG requests go where they cost the least MIG capability; others as BestFit.

    A node's score for a MIG request is minus the smallest capability loss of any
    of its slots (:func:`kubesage.core.policy.gpu_choice.mig_slot_losses`), so
    instances fill partly used GPUs before breaking empty ones and each GPU keeps
    the largest aligned free block it can.
    """

    name = "migpacking"

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        if request.mig is None:
            return super().score(state, request, nodes)
        losses = mig_slot_losses(state, nodes, request)
        scores: FloatArray = -losses.reshape(nodes.size, -1).min(axis=1)
        return scores
