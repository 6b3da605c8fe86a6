"""Rules for choosing the GPUs inside a chosen node.

Whole-GPU requests always take the lowest-index wholly free GPUs (what the NVIDIA
device plugin and the FGD paper's simulator do). The rules differ for GPU-sharing
pods only.
"""

from __future__ import annotations

import numpy as np

from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import GPU_MILLI_PER_GPU, PodRequest


def lowest_index_gpus(state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
    """First fit: the lowest-index GPUs with room (for whole GPUs, wholly free ones)."""
    if request.num_gpu == 0:
        return ()
    free = state.gpu_free_milli[node, : state.gpu_count[node]]
    if request.gpu_milli >= GPU_MILLI_PER_GPU:
        candidates = np.flatnonzero(free == GPU_MILLI_PER_GPU)
    else:
        candidates = np.flatnonzero(free >= request.gpu_milli)
    return tuple(int(g) for g in candidates[: request.num_gpu])


def tightest_gpu(state: ClusterState, node: int, request: PodRequest) -> tuple[int, ...]:
    """Best fit for a sharing pod: the GPU with the least free milli that still fits."""
    if not request.is_gpu_sharing:
        return lowest_index_gpus(state, node, request)
    free = state.gpu_free_milli[node, : state.gpu_count[node]]
    room = np.where(free >= request.gpu_milli, free, GPU_MILLI_PER_GPU + 1)
    return (int(room.argmin()),)  # argmin keeps the lowest index among equals


def random_gpu(
    state: ClusterState, node: int, request: PodRequest, rng: np.random.Generator
) -> tuple[int, ...]:
    """A sharing pod goes to a uniformly random GPU with room."""
    if not request.is_gpu_sharing:
        return lowest_index_gpus(state, node, request)
    return (int(rng.choice(state.gpus_that_fit(node, request))),)
