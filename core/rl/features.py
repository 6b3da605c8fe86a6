"""What the PPO policy sees: up to 64 candidate nodes for the arriving pod, and the cluster.

Candidates are the feasible nodes (the fit rule of :mod:`kubesage.core.state.fit`)
ranked by FGD's score (ties broken by FGD's own seeded order) and cut to
``MAX_CANDIDATES``, so candidate 0 is exactly FGD's choice and the policy can
always do as well as picking the first. Per candidate
(``CANDIDATE_FEATURES``): FGD's score and its gap to the best, the rank, free CPU,
memory and GPU left after the placement (shares of capacity), the largest free
GPU share before, whole GPUs left, GPUs on the node, and whether the placement
fills the node's GPUs exactly.

The request (``REQUEST_FEATURES``): CPU and memory (shares of the largest node),
GPU share per GPU, GPU count, whether it shares a GPU.

The cluster (``GLOBAL_RAW``): for each of four per-node monitoring series over
the GPU nodes — free GPU share, free CPU share, free memory share, share of
whole free GPUs — its 64 quantiles (:mod:`kubesage.core.rl.cluster_summary`, which
also keeps them up to date across decisions). The network compresses these 256
numbers to 128 with a PCA fitted on states seen in training
(:mod:`kubesage.core.rl.network`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import BoolArray, Float32Array, FloatArray, IntArray
from kubesage.core.policy.fgd import FgdPolicy
from kubesage.core.rl.cluster_summary import (
    GLOBAL_RAW,
    GLOBAL_SERIES,
    QUANTILES,
    ClusterSummary,
    global_raw,
    share,
)
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import fit_mask
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest

"""Features are float32, the network's dtype."""

MAX_CANDIDATES = 64
CANDIDATE_FEATURES = (
    "fgd_score",
    "fgd_gap_to_best",
    "rank",
    "cpu_free_after",
    "memory_free_after",
    "gpu_free_after",
    "gpu_largest_free_before",
    "gpu_whole_free_after",
    "gpu_count",
    "fills_gpus_exactly",
)
REQUEST_FEATURES = ("cpu", "memory", "gpu_share", "gpu_count", "is_sharing")
__all__ = [
    "CANDIDATE_FEATURES",
    "GLOBAL_RAW",
    "GLOBAL_SERIES",
    "MAX_CANDIDATES",
    "QUANTILES",
    "REQUEST_FEATURES",
    "Observation",
    "candidate_nodes",
    "global_raw",
    "observe",
    "request_features",
]


@dataclass(frozen=True)
class Observation:
    candidates: Float32Array
    """``(MAX_CANDIDATES, len(CANDIDATE_FEATURES))``; zero rows for padding."""
    mask: BoolArray
    """True for real candidates."""
    request: Float32Array
    global_raw: Float32Array
    nodes: IntArray
    """The node index of each real candidate, in rank order."""
    positions: IntArray
    """Each real candidate's position in the nodes it was drawn from (``among`` of
    :func:`observe`; its node index when drawn from the whole cluster)."""


def candidate_nodes(
    state: ClusterState,
    request: PodRequest,
    ranker: FgdPolicy,
    nodes: IntArray | None = None,
    scored: FloatArray | None = None,
) -> tuple[IntArray, Float32Array, IntArray]:
    """Feasible nodes (of ``nodes`` when given, else of the cluster) ranked best first
    by FGD (its tie order), cut to MAX_CANDIDATES: their indices, FGD's scores and
    their positions in ``nodes`` (their indices again when drawn from the cluster).
    ``scored``, when given, is FGD's scores of ``nodes``, every one of which fits: the
    fit check and the scoring are not done again."""
    if nodes is None:
        feasible = np.flatnonzero(fit_mask(state, request)).astype(np.int64)
        positions = feasible
    elif scored is not None:
        feasible = np.asarray(nodes, dtype=np.int64)
        positions = np.arange(feasible.size)
    else:
        nodes = np.asarray(nodes, dtype=np.int64)
        positions = np.flatnonzero(fit_mask(state, request, nodes))
        feasible = nodes[positions]
    if feasible.size == 0:
        return feasible, np.zeros(0, dtype=np.float32), positions
    scores = ranker.score(state, request, feasible) if scored is None else scored
    ties = ranker.tie_rank(state)[feasible]
    if feasible.size > MAX_CANDIDATES:
        # Only the best K need sorting: pick them in linear time first. Scores are
        # FGD's integers 0..100, so (101 − score, tie rank) packs into one key.
        key = (101 - scores.astype(np.int64)) * state.num_nodes + ties
        top = np.argpartition(key, MAX_CANDIDATES - 1)[:MAX_CANDIDATES]
        feasible, scores, ties, positions = feasible[top], scores[top], ties[top], positions[top]
    order = np.lexsort((ties, -scores))
    return feasible[order], scores[order].astype(np.float32), positions[order]


def request_features(state: ClusterState, request: PodRequest) -> Float32Array:
    return np.array(
        [
            request.cpu_milli / max(1, state.cpu_capacity_milli_max),
            request.memory_mib / max(1, state.memory_capacity_mib_max),
            request.gpu_milli / GPU_MILLI_PER_GPU,
            request.num_gpu / 8.0,
            float(request.is_gpu_sharing),
        ],
        dtype=np.float32,
    )


def observe(
    state: ClusterState,
    request: PodRequest,
    ranker: FgdPolicy,
    among: IntArray | None = None,
    summary: ClusterSummary | None = None,
    scored: FloatArray | None = None,
) -> Observation:
    """Candidates and state for ``request`` (no candidates when nothing fits); the
    candidates are drawn from ``among`` when given, else from the whole cluster
    (``scored``: see :func:`candidate_nodes`). The cluster's vector comes from
    ``summary`` when given (the same numbers, kept up to date across calls), else is
    computed afresh."""
    nodes, scores, positions = candidate_nodes(state, request, ranker, among, scored)
    table = np.zeros((MAX_CANDIDATES, len(CANDIDATE_FEATURES)), dtype=np.float32)
    mask = np.zeros(MAX_CANDIDATES, dtype=bool)
    count = nodes.size
    if count:
        gpus = state.gpu_count[nodes]
        gpu_capacity = gpus * GPU_MILLI_PER_GPU
        gpu_after = state.gpu_free_milli_node[nodes] - request.total_gpu_milli
        whole_after = state.gpu_whole_free_count[nodes] - (
            0 if request.is_gpu_sharing else request.num_gpu
        )
        rows = table[:count]  # column by column: each cast to float32 as a stack would be
        rows[:, 0] = scores / 100.0
        rows[:, 1] = (scores - scores[0]) / 100.0
        rows[:, 2] = np.arange(count) / MAX_CANDIDATES
        rows[:, 3] = share(
            state.cpu_free_milli[nodes] - request.cpu_milli, state.cpu_capacity_milli[nodes]
        )
        rows[:, 4] = share(
            state.memory_free_mib[nodes] - request.memory_mib, state.memory_capacity_mib[nodes]
        )
        rows[:, 5] = share(gpu_after, gpu_capacity)
        rows[:, 6] = state.gpu_max_free_milli[nodes] / GPU_MILLI_PER_GPU
        rows[:, 7] = share(np.maximum(whole_after, 0), gpus)
        rows[:, 8] = gpus / 8.0
        rows[:, 9] = (gpu_after == 0) & (gpus > 0)
        mask[:count] = True
    return Observation(
        candidates=table,
        mask=mask,
        request=request_features(state, request),
        global_raw=summary.of(state) if summary is not None else global_raw(state),
        nodes=nodes,
        positions=positions,
    )
