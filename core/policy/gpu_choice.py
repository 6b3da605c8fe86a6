"""Rules for choosing the GPUs inside a chosen node.

Whole-GPU requests always take the lowest-index wholly free GPUs (what the NVIDIA
device plugin and the FGD paper's simulator do). The rules differ for GPU-sharing
pods; MIG requests take the slot that costs the least MIG capability, whatever the
policy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import GPU_MILLI_PER_GPU, Placement, PodRequest


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


def _largest_aligned_block(mask: int) -> int:
    """Largest k in 8, 4, 2, 1 with a free block of k slices starting at a multiple of k."""
    for size in (8, 4, 2, 1):
        block = (1 << size) - 1
        if any((mask >> start) & block == block for start in range(0, 8, size)):
            return size
    return 0


LARGEST_BLOCK = np.array([_largest_aligned_block(m) for m in range(256)], dtype=np.int64)
"""For each 8-slice free mask, the largest aligned free block: what big MIG profiles need."""
FREE_SLICES = np.array([m.bit_count() for m in range(256)], dtype=np.int64)
"""For each 8-slice free mask, how many slices are free."""


def mig_slot_losses(state: ClusterState, nodes: IntArray, request: PodRequest) -> FloatArray:
    """``(K, G, S)``: how much MIG capability each possible slot would cost (inf if impossible).

    Capability of a GPU is the square of its largest aligned free block, so breaking
    an empty GPU (8 → 4: 64 → 16) costs far more than filling a partly used one: each
    GPU stays able to host the largest profiles still likely to come. At equal cost,
    partly used GPUs go first, then the highest start slot.
    """
    assert request.mig is not None
    shape = request.mig
    slots = state.mig_slots(shape, nodes)
    free = state.mig_free_slices[nodes]
    masks = np.array([((1 << shape.memory_slices) - 1) << s for s in shape.starts])
    after = free[:, :, None] & ~masks
    loss = (LARGEST_BLOCK[free][:, :, None] ** 2 - LARGEST_BLOCK[after] ** 2).astype(np.float64)
    loss += 1e-3 * FREE_SLICES[free][:, :, None]
    # Then the highest start: large profiles start low (7g, 4g at 0; 3g at 0/4; 2g at
    # 0/2/4), so small instances packed from the top leave the low slices to them.
    loss -= 1e-6 * np.asarray(shape.starts, dtype=np.float64)[None, None, :]
    return np.where(slots, loss, np.inf)


def best_mig_slot(state: ClusterState, node: int, request: PodRequest) -> tuple[int, int]:
    """``(gpu, start)`` on ``node`` that costs the least MIG capability."""
    assert request.mig is not None
    losses = mig_slot_losses(state, np.array([node], dtype=np.int64), request)[0]
    gpu, slot = np.unravel_index(int(np.argmin(losses)), losses.shape)
    if not np.isfinite(losses[gpu, slot]):
        raise ValueError(f"no free {request.mig.profile} slot on node {node}")
    return int(gpu), int(request.mig.starts[int(slot)])


GpuChooser = Callable[[ClusterState, int, PodRequest], tuple[int, ...]]


def placement_on(
    state: ClusterState, node: int, request: PodRequest, choose: GpuChooser = lowest_index_gpus
) -> Placement:
    """``request`` on ``node``: the MIG slot that costs least, or the GPUs ``choose`` picks."""
    if request.mig is not None:
        gpu, mig_start = best_mig_slot(state, node, request)
        return state.placement(node, (gpu,), request, mig_start=mig_start)
    return state.placement(node, choose(state, node, request), request)
