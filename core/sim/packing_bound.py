"""An upper bound on the GPU allocation any placement sequence can reach (a relaxation).

Nodes are grouped into pools by GPU model, GPU count and MIG mode. Three things no
placement can get around are kept; everything else is relaxed:

- a pod only uses pools it may run on: an allowed GPU model, at least ``num_gpu``
  GPUs per node, a node at least as large as the pod in CPU and memory, the same
  MIG mode;
- a node's GPUs can only be filled as far as its CPU and memory carry: every pod
  that may use the pool asks at least ρ CPU (and memory) per milli-GPU, ρ the
  smallest ratio among them, so a node holds at most ``cpu / ρ`` milli-GPU;
- every pod's GPU goes to one pool, at most once.

Relaxed: the arrival order (and that a pod that fits must be placed), splitting a
pod across nodes and GPUs (a pool is one fluid bin), GPU sharing's integrality, and
the CPU that CPU-only pods take. The bound is the maximum flow from pod groups (by
the set of pools each may use) to pools, computed exactly as the minimum cut: with
P pools, ``min over pool subsets T of  cap(T) + demand of groups not confined to T``
(Ford–Fulkerson on a bipartite network), enumerated over the 2^P subsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.sim.forced_placement import surely_placed
from kubesage.core.types import GPU_MILLI_PER_GPU, NodeSpec, PodRequest

MAX_POOLS = 20
"""Pools enumerated exactly (2^20 subsets); beyond that pools merge by GPU model."""

PoolKey = tuple[str, int, bool]
"""GPU model, GPUs per node, MIG mode."""


@dataclass(frozen=True)
class AllocationBound:
    percent: float
    """Upper bound on GPU allocation, % of capacity: the lower of the two below."""
    flow_percent: float
    """What the pools can take of the requests they may hold (the flow relaxation)."""
    stranded_percent: float
    """GPU no policy can fill beside the big shares every policy must place, % of capacity."""
    usable_percent: float
    """GPU capacity the nodes' CPU and memory can carry at all, % of capacity."""
    surely_placed: int
    """Arrivals every policy places (:func:`~kubesage.core.sim.forced_placement.surely_placed`)."""
    big_shares: int
    """Of those, GPU shares over half a GPU (each alone on its GPU)."""
    pools: dict[str, float]
    """Per pool: the GPUs its nodes can carry (after the CPU and memory caps)."""
    merged_by_model: bool
    """True when there were more than MAX_POOLS pools and they were merged by model."""


def allocation_upper_bound(
    nodes: Sequence[NodeSpec], arrivals: Sequence[PodRequest]
) -> AllocationBound:
    """The relaxation's bound for ``arrivals`` on ``nodes``."""
    gpu_nodes = [node for node in nodes if node.gpu_count and node.gpu_model]
    capacity = sum(node.gpu_count for node in gpu_nodes) * GPU_MILLI_PER_GPU
    if capacity == 0:
        raise InputError("the cluster has no GPUs: there is no GPU allocation to bound")
    merged = len({_pool(node, False) for node in gpu_nodes}) > MAX_POOLS
    members: dict[PoolKey, list[NodeSpec]] = defaultdict(list)
    for node in gpu_nodes:
        members[_pool(node, merged)].append(node)
    keys = sorted(members)
    if len(keys) > MAX_POOLS:
        raise InputError(f"{len(keys)} GPU models: the bound enumerates at most {MAX_POOLS} pools")
    demand: dict[PodRequest, int] = defaultdict(int)  # one pod per shape, its shape's GPU
    for pod in arrivals:
        if pod.total_gpu_milli > 0:
            demand[_shape(pod)] += pod.total_gpu_milli
    allowed = {shape: _usable_pools(shape, keys, members) for shape in demand}
    usable = np.array(
        [
            sum(
                _node_cap(node, [shape for shape, mask in allowed.items() if mask >> index & 1])
                for node in members[key]
            )
            for index, key in enumerate(keys)
        ]
    )
    groups: dict[int, float] = defaultdict(float)
    for shape, mask in allowed.items():
        if mask:
            groups[mask] += demand[shape]
    flow = _max_flow(usable, groups)
    certain = surely_placed(nodes, arrivals)
    big = [
        pod.gpu_milli
        for pod, sure in zip(arrivals, certain, strict=True)
        if sure and pod.is_gpu_sharing and pod.gpu_milli * 2 > GPU_MILLI_PER_GPU
    ]
    stranded = _stranded_beside(big, [p.gpu_milli for p in arrivals if p.is_gpu_sharing])
    return AllocationBound(
        percent=min(flow, capacity - stranded) * 100.0 / capacity,
        flow_percent=flow * 100.0 / capacity,
        stranded_percent=stranded * 100.0 / capacity,
        usable_percent=float(usable.sum()) * 100.0 / capacity,
        surely_placed=int(certain.sum()),
        big_shares=len(big),
        pools={
            _pool_name(key, merged): round(float(cap) / GPU_MILLI_PER_GPU, 2)
            for key, cap in zip(keys, usable, strict=True)
        },
        merged_by_model=merged,
    )


def _stranded_beside(big_shares: Sequence[int], shares: Sequence[int]) -> float:
    """Room beside big shares (each alone on its GPU) that no share can fill.

    The room next to a share of ``s`` > 500 milli is ``1000 − s``, and only shares no
    larger than that room fit in it. The most that can go there is a fractional
    assignment of every share of the arrivals (placed or not, counted once) to rooms
    at least its size: with nested eligibility, taking the largest shares first is
    optimal. What is left unfilled is stranded under every policy.
    """
    rooms = sorted((GPU_MILLI_PER_GPU - s for s in big_shares), reverse=True)
    if not rooms:
        return 0.0
    fillers = sorted((s for s in shares if s <= rooms[0]), reverse=True)
    pool = 0.0
    filled = 0.0
    next_room = 0
    for size in fillers:
        while next_room < len(rooms) and rooms[next_room] >= size:
            pool += rooms[next_room]
            next_room += 1
        taken = min(float(size), pool)
        pool -= taken
        filled += taken
    return float(sum(rooms)) - filled


def _shape(pod: PodRequest) -> PodRequest:
    """The pod with its name and times dropped: equal shapes compare equal."""
    return PodRequest(
        name="shape",
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        num_gpu=pod.num_gpu,
        gpu_milli=pod.gpu_milli,
        gpu_models=pod.gpu_models,
        mig=pod.mig,
    )


def _pool(node: NodeSpec, by_model: bool) -> PoolKey:
    return (node.gpu_model or "", 0 if by_model else node.gpu_count, node.mig_enabled)


def _pool_name(key: PoolKey, by_model: bool) -> str:
    model, count, mig = key
    name = model if by_model else f"{model}x{count}"
    return name + (" (MIG)" if mig else "")


def _usable_pools(
    pod: PodRequest, keys: Sequence[PoolKey], members: dict[PoolKey, list[NodeSpec]]
) -> int:
    """Bit mask of the pools ``pod`` may use."""
    mask = 0
    for index, key in enumerate(keys):
        model, _, mig = key
        if pod.gpu_models and model not in pod.gpu_models:
            continue
        if (pod.mig is not None) != mig:
            continue
        if any(
            node.gpu_count >= pod.num_gpu
            and node.cpu_milli >= pod.cpu_milli
            and node.memory_mib >= pod.memory_mib
            for node in members[key]
        ):
            mask |= 1 << index
    return mask


def _node_cap(node: NodeSpec, riders: Sequence[PodRequest]) -> float:
    """Milli-GPU ``node`` can carry given the least CPU and memory per milli-GPU of ``riders``."""
    gpu = float(node.gpu_count * 1000)
    if not riders:
        return 0.0  # no request may use this pool
    cpu_per = min(pod.cpu_milli / pod.total_gpu_milli for pod in riders)
    memory_per = min(pod.memory_mib / pod.total_gpu_milli for pod in riders)
    if cpu_per > 0:
        gpu = min(gpu, node.cpu_milli / cpu_per)
    if memory_per > 0:
        gpu = min(gpu, node.memory_mib / memory_per)
    return gpu


def _max_flow(capacity: np.ndarray, demand: dict[int, float]) -> float:
    """Max flow from groups (bit mask of the pools they may use → demand) to pools, as the
    min cut over every pool subset T: ``cap(T) + Σ demand of groups with a pool outside T``."""
    pools = capacity.size
    subsets = np.arange(1 << pools, dtype=np.int64)
    cut = np.zeros(subsets.size)
    for index in range(pools):
        cut += np.where(subsets >> index & 1, capacity[index], 0.0)
    for mask, amount in demand.items():
        cut += np.where(mask & ~subsets, amount, 0.0)
    return float(cut.min())
