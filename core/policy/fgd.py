"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23).

A node's score is how little the placement grows its expected GPU fragmentation
(:mod:`kubesage.core.state.fragmentation`) — ``floor(100 · sigmoid(ΔF / 1000))`` with
``ΔF = F(before) − F(after)`` in milli-GPU, exactly as the paper's simulator scores
it, integer truncation included (it decides which nodes tie). A GPU-sharing pod
tries every GPU with room and keeps the best one (the lowest index among equals);
whole-GPU pods take the lowest-index free GPUs, which all leave F the same.

A node's score depends only on that node's state and the request's shape, so the
scores of each recent shape are cached per node, stamped with the node's version
(per-node stamps in ClusterState). A call recomputes only the nodes it asks about
whose stamp is out of date — never the rest of the cluster: a scheduler extender
asked about 500 candidates of 10,000 nodes pays for at most those 500. That keeps
FGD's cost per placement near the number of nodes touched, not the cluster size.
A node's fragmentation before the placement does not depend on the shape at all, so
it is cached once per node (same stamps) and shared by every shape.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.policy.base import PolicyContext, ScoringPolicy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fragmentation import (
    DEFAULT_COVERAGE,
    FragmentationMeasure,
    typical_pods,
)
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

ShapeKey = tuple[int, int, int, tuple[str, ...]]

CACHED_SHAPES = 256
"""Request shapes whose per-node scores are kept (least recently used dropped first)."""

_NO_GPU = -1


@dataclass
class _ShapeScores:
    lineage: int
    stamp: IntArray
    score: npt.NDArray[np.float32]
    gpu: npt.NDArray[np.int8]


@dataclass
class _Fragments:
    """Each node's fragmentation as of its stamp (shape-independent)."""

    lineage: int
    stamp: IntArray
    value: FloatArray


def shape_key(request: PodRequest) -> ShapeKey:
    """What FGD's scores depend on in a request: requests alike here score alike."""
    return (request.cpu_milli, request.num_gpu, request.gpu_milli, request.gpu_models)


def fgd_score(fragment_before: FloatArray, fragment_after: FloatArray) -> FloatArray:
    """``floor(100 · sigmoid((before − after) / 1000))``; equal fragments score exactly 50."""
    # Rounding the difference keeps float noise from turning "no change" into 49.
    # The same IEEE operations as ``floor(100 / (1 + exp(-round(d, 6) / 1000)))``, in
    # one array: the extender's prioritize scores a node or two per call, where each
    # temporary and Python-level wrapper costs more than the arithmetic.
    score: FloatArray = np.subtract(fragment_before, fragment_after, dtype=np.float64)
    score.round(6, out=score)
    score /= -1000.0
    np.exp(score, out=score)
    score += 1.0
    np.divide(100.0, score, out=score)
    return np.floor(score, out=score)


class FgdPolicy(ScoringPolicy):
    """Place where the expected GPU fragmentation grows least."""

    name = "fgd"

    def __init__(self, context: PolicyContext, *, coverage: float = DEFAULT_COVERAGE):
        super().__init__(context)
        if not context.workload:
            raise InputError("the fgd policy needs the workload to derive its typical pods")
        self.typical = typical_pods(context.workload, coverage=coverage)
        self._measure: FragmentationMeasure | None = None
        self._cache: OrderedDict[ShapeKey, _ShapeScores] = OrderedDict()
        self._fragments: _Fragments | None = None

    def measure(self, state: ClusterState) -> FragmentationMeasure:
        """The fragmentation measure bound to ``state``'s GPU models."""
        if self._measure is None or self._measure.gpu_models != state.gpu_models:
            self._measure = FragmentationMeasure(self.typical, state.gpu_models)
            self._cache.clear()
            self._fragments = None
        return self._measure

    def score(self, state: ClusterState, request: PodRequest, nodes: IntArray) -> FloatArray:
        return self._scores_for(state, request, nodes).score[nodes].astype(np.float64)

    def choose_gpus(self, state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
        if request.is_gpu_sharing:
            only = np.array([node], dtype=np.int64)
            return (int(self._scores_for(state, request, only).gpu[node]),)
        return super().choose_gpus(state, node, request)

    def _scores_for(
        self, state: ClusterState, request: PodRequest, nodes: IntArray
    ) -> _ShapeScores:
        """The shape's cached scores, brought up to date for ``nodes`` (only those)."""
        measure = self.measure(state)
        key = shape_key(request)
        entry = self._cache.get(key)
        if entry is None or entry.lineage != state.lineage:
            entry = _ShapeScores(
                lineage=state.lineage,
                stamp=np.full(state.num_nodes, -1, dtype=np.int64),
                score=np.zeros(state.num_nodes, dtype=np.float32),
                gpu=np.full(state.num_nodes, _NO_GPU, dtype=np.int8),
            )
            self._cache[key] = entry
            if len(self._cache) > CACHED_SHAPES:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        nodes = np.asarray(nodes, dtype=np.int64)
        dirty = nodes[entry.stamp[nodes] != state.node_version[nodes]]
        if dirty.size:
            before = self._fragments_before(measure, state, dirty)
            score, gpu = self._compute(measure, state, request, dirty, before)
            entry.score[dirty] = score
            entry.gpu[dirty] = gpu
            entry.stamp[dirty] = state.node_version[dirty]
        return entry

    def fragments(self, state: ClusterState, nodes: IntArray) -> FloatArray:
        """The current fragmentation of ``nodes`` (from the per-node cache scoring fills)."""
        return self._fragments_before(self.measure(state), state, nodes)

    def _fragments_before(
        self, measure: FragmentationMeasure, state: ClusterState, nodes: IntArray
    ) -> FloatArray:
        """The current fragmentation of ``nodes``, computed only where out of date."""
        cache = self._fragments
        if cache is None or cache.lineage != state.lineage:
            cache = self._fragments = _Fragments(
                lineage=state.lineage,
                stamp=np.full(state.num_nodes, -1, dtype=np.int64),
                value=np.zeros(state.num_nodes, dtype=np.float64),
            )
        stamps = state.node_version[nodes]
        stale = nodes[cache.stamp[nodes] != stamps]
        if stale.size:
            cache.value[stale] = measure.node_fragment(
                state.cpu_free_milli[stale],
                state.gpu_free_milli[stale],
                state.gpu_model_index[stale],
            )
            cache.stamp[stale] = state.node_version[stale]
        return cache.value[nodes]

    @staticmethod
    def _compute(
        measure: FragmentationMeasure,
        state: ClusterState,
        request: PodRequest,
        nodes: IntArray,
        before: FloatArray,
    ) -> tuple[FloatArray, IntArray]:
        """The shape's scores on ``nodes`` (and the GPU a share goes to), given each
        node's current fragmentation ``before``."""
        cpu = state.cpu_free_milli[nodes]
        gpu = state.gpu_free_milli[nodes]
        model = state.gpu_model_index[nodes]
        if request.is_gpu_sharing:
            count, width = gpu.shape
            # One hypothetical state per (node, GPU): the share taken from that GPU only.
            after_gpu = np.repeat(gpu[:, None, :], width, axis=1)  # (K, G, G)
            diagonal = np.arange(width)
            after_gpu[:, diagonal, diagonal] -= request.gpu_milli
            after = measure.node_fragment(
                np.repeat(cpu - request.cpu_milli, width),
                after_gpu.reshape(count * width, width),
                np.repeat(model, width),
            ).reshape(count, width)
            scores = fgd_score(before[:, None], after)
            scores[gpu < request.gpu_milli] = -1.0
            best_gpu = scores.argmax(axis=1)  # first index among equal scores
            best = scores[np.arange(count), best_gpu]
            return best, np.where(best >= 0, best_gpu, _NO_GPU).astype(np.int64)
        after_gpu = gpu
        if request.num_gpu:
            whole = gpu == GPU_MILLI_PER_GPU
            taken = whole & (np.cumsum(whole, axis=1) <= request.num_gpu)
            after_gpu = np.where(taken, 0, gpu)
        after = measure.node_fragment(cpu - request.cpu_milli, after_gpu, model)
        return fgd_score(before, after), np.full(nodes.size, _NO_GPU, dtype=np.int64)
