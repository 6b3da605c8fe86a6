"""Background compaction: empty the cheapest partly used GPUs so whole GPUs appear
before a large request needs them (:func:`compact`; :class:`Compactor` runs it in the
simulator). It moves pods with the same rules as on-demand defragmentation
(:mod:`~kubesage.adapters.gpu_training.defrag`): what may move, and where each moved pod
may go."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from kubesage.adapters.gpu_training.defrag import Running, move_cost, replace_pods
from kubesage.core.arrays import BoolArray
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import GPU_MILLI_PER_GPU, MIG_MEMORY_SLICES, Migration


def compact(
    policy: Policy,
    state: ClusterState,
    running: Mapping[str, Running],
    *,
    budget: int,
    max_priority: int = 0,
    free_gpus_wanted: int | None = None,
    pinned: Collection[str] = frozenset(),
    allowed: Mapping[str, Collection[str]] | None = None,
) -> list[Migration]:
    """Background compaction: empty the cheapest partly used GPUs, at most ``budget`` moves.

    A GPU is partly used when some but not all of it is taken (a shared GPU, or a
    MIG GPU with some instances). Its pods move only onto GPUs already partly
    used — never onto an empty GPU, which would just move the fragment — and the
    GPU is emptied only when every one of its pods finds such a place. GPUs are
    tried from the cheapest to empty; each one emptied is one more whole GPU.
    With ``free_gpus_wanted``, nothing moves while at least that many GPUs are
    empty, and compaction stops once they are. A GPU holding a pod that must not move
    (:func:`move_cost`; ``pinned`` names some) is not emptied, nor one whose pods'
    own constraints (``allowed``, as :attr:`Defragmenter.allowed`) leave them no place.
    """
    empty_now = int(np.count_nonzero(_empty_mask(state)))
    if budget <= 0 or (free_gpus_wanted is not None and empty_now >= free_gpus_wanted):
        return []
    on_gpu: dict[tuple[int, int], list[Running]] = {}
    for pod, placement in running.values():
        for gpu in placement.gpu_indices:
            on_gpu.setdefault((placement.node_index, gpu), []).append((pod, placement))
    partial: list[tuple[float, int, tuple[int, int]]] = []
    for (node, gpu), pods in on_gpu.items():
        if any(p.num_gpu > 1 or not (p.is_gpu_sharing or p.mig) for p, _ in pods):
            continue  # a whole-GPU pod already uses the GPU fully
        if state.node_mig_enabled[node]:
            full = state.mig_free_slices[node, gpu] == 0
        else:
            full = state.gpu_free_milli[node, gpu] == 0
        cost = sum(move_cost(p, max_priority, pinned) for p, _ in pods)
        if not full and np.isfinite(cost):
            partial.append((cost, len(pods), (node, gpu)))
    partial.sort()
    trial = state.copy()
    moves: list[Migration] = []
    received: set[tuple[int, int]] = set()
    for _, count, (node, gpu) in partial:
        if len(moves) + count > budget or (node, gpu) in received:
            continue
        attempt = trial.copy()
        pods = on_gpu[(node, gpu)]
        for pod, placement in pods:
            attempt.release(pod, placement)
        # Nothing lands on an empty GPU: the one being emptied, those emptied before,
        # and those that were empty already.
        cordoned = _empty_gpus(attempt)
        for c_node, c_gpu in cordoned:
            attempt.cordon_gpu(c_node, c_gpu)
        placed = replace_pods(policy, attempt, [p for p, _ in pods], allowed or {})
        if placed is None:
            continue
        for c_node, c_gpu in cordoned:
            attempt.uncordon_gpu(c_node, c_gpu)
        trial = attempt
        moves += placed
        received.update((pl.node_index, g) for _, pl in placed for g in pl.gpu_indices)
        empty_now += 1
        if free_gpus_wanted is not None and empty_now >= free_gpus_wanted:
            break
    return moves


def _empty_mask(state: ClusterState) -> BoolArray:
    """``[node, gpu]``: the GPU has nothing on it."""
    empty: BoolArray = (state.gpu_free_milli == GPU_MILLI_PER_GPU) & np.where(
        state.node_mig_enabled[:, None],
        state.mig_free_slices == (1 << MIG_MEMORY_SLICES) - 1,
        True,
    )
    return empty


def _empty_gpus(state: ClusterState) -> list[tuple[int, int]]:
    """Every GPU with nothing on it."""
    # Plain ints first: converting numpy scalars one by one holds the GIL ~10x longer
    # (kubesage serve's requests wait on it while the loop ticks).
    nodes, gpus = np.nonzero(_empty_mask(state))
    return list(zip(nodes.tolist(), gpus.tolist(), strict=True))


@dataclass
class Compactor:
    """Background compaction for the simulator: :func:`compact` every ``interval_s``."""

    policy: Policy
    interval_s: float = 600.0
    budget: int = 4
    """Most pods moved per round."""
    free_share: float = 0.05
    """Compact only while fewer than this share of the cluster's GPUs are empty."""
    max_priority: int = 0
    pinned: frozenset[str] = field(default_factory=frozenset)
    """Names of running pods that never move."""
    allowed: Mapping[str, Collection[str]] = field(default_factory=dict)
    """As :attr:`Defragmenter.allowed`."""

    def compact(self, state: ClusterState, running: Mapping[str, Running]) -> list[Migration]:
        wanted = math.ceil(self.free_share * int(state.gpu_count.sum()))
        return compact(
            self.policy,
            state,
            running,
            budget=self.budget,
            max_priority=self.max_priority,
            free_gpus_wanted=wanted,
            pinned=self.pinned,
            allowed=self.allowed,
        )
