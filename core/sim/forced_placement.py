"""Which arrivals every policy must place: a certificate that a pod fits in any state.

In the FGD protocol a pod that fits somewhere is placed. Early in the arrival
sequence some pods fit whatever the earlier pods did: to leave no room for pod i,
a policy must block every node that could host it — take more than ``cpu − c`` of
its CPU, or more than ``memory − m`` of its memory, or enough of its GPUs (every GPU
past ``1000 − s`` milli for a share of ``s``; all but ``k − 1`` GPUs for ``k`` whole
GPUs) — and it has only what the earlier pods requested to do it with (R_cpu,
R_mem, R_gpu; a failed pod takes nothing, so that is an upper bound on use).

Blocking node n through resource r costs κ(n, r); the nodes blocked through r need
Σ κ(n, r) ≤ R_r. For any weights λ ≥ 0, if ``Σ_n min_r λ_r κ(n, r) > Σ_r λ_r R_r``
no assignment of nodes to resources fits the budgets, so pod i fits in every state
the protocol can reach, and every policy places it (weak LP duality; a few weight
vectors are tried, any one that works is a proof). The budgets only grow along the
sequence, so for each pod shape the certified arrivals form a prefix, found by
bisection. The certificate is sound, not complete: a pod it does not certify may
still be placed by every policy.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.types import GPU_MILLI_PER_GPU, NodeSpec, PodRequest

WEIGHT_STEPS = 4
"""Weights λ on a simplex grid of this many steps per resource (15 vectors)."""

Shape = tuple[int, int, int, int, tuple[str, ...]]
"""CPU, memory, GPUs, milli-GPU per GPU, allowed models."""


def _weights() -> FloatArray:
    grid = [
        (a, b, WEIGHT_STEPS - a - b)
        for a, b in product(range(WEIGHT_STEPS + 1), repeat=2)
        if a + b <= WEIGHT_STEPS
    ]
    return np.array(grid, dtype=np.float64) / WEIGHT_STEPS


@dataclass(frozen=True)
class _Budgets:
    """What the arrivals before each position requested (an upper bound on use)."""

    cpu: FloatArray
    memory: FloatArray
    gpu: FloatArray
    least_gpu: FloatArray
    """The least GPU an earlier pod puts on one GPU (what blocking a GPU for whole use costs)."""

    @classmethod
    def of(cls, arrivals: Sequence[PodRequest]) -> _Budgets:
        def before(values: Sequence[int]) -> FloatArray:
            return np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)[:-1]])

        smallest = np.minimum.accumulate(
            [p.gpu_milli if p.num_gpu else GPU_MILLI_PER_GPU for p in arrivals]
        )
        return cls(
            cpu=before([p.cpu_milli for p in arrivals]),
            memory=before([p.memory_mib for p in arrivals]),
            gpu=before([p.total_gpu_milli for p in arrivals]),
            least_gpu=np.concatenate([[GPU_MILLI_PER_GPU], smallest[:-1]]).astype(np.float64),
        )


@dataclass(frozen=True)
class _Hosts:
    """The node shapes that could ever host one pod shape, and what blocking each costs."""

    count: FloatArray
    cpu_cost: FloatArray
    memory_cost: FloatArray
    gpus: FloatArray
    pod_gpus: int
    pod_milli: int

    def gpu_cost(self, least_gpu: float) -> FloatArray:
        if self.pod_gpus == 0:
            return np.full(self.count.size, np.inf)  # a CPU-only pod needs no GPU
        if self.pod_milli < GPU_MILLI_PER_GPU:
            return self.gpus * (GPU_MILLI_PER_GPU - self.pod_milli + 1)
        return (self.gpus - self.pod_gpus + 1) * least_gpu

    def cannot_all_be_blocked(self, budgets: _Budgets, position: int, weights: FloatArray) -> bool:
        """The duality certificate at ``position`` for some weight vector."""
        costs = np.stack(
            [self.cpu_cost, self.memory_cost, self.gpu_cost(float(budgets.least_gpu[position]))]
        )  # (3, node shapes)
        budget = np.array([budgets.cpu[position], budgets.memory[position], budgets.gpu[position]])
        # λ_r = w_r / R_r. With nothing requested yet through r (R_r = 0), or a cost that
        # cannot be paid (no GPU to block), a node cannot be blocked through r.
        usable = budget > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(
                usable[:, None], costs / np.where(usable, budget, 1.0)[:, None], np.inf
            )
            terms = np.where(np.isinf(ratio)[None], np.inf, weights[:, :, None] * ratio[None])
        cheapest = terms.min(axis=1)  # (weights, node shapes)
        paid = (weights * usable[None]).sum(axis=1)
        return bool(((cheapest * self.count).sum(axis=1) > paid + 1e-9).any())


def surely_placed(nodes: Sequence[NodeSpec], arrivals: Sequence[PodRequest]) -> BoolArray:
    """Per arrival: True when every policy must place it (it fits in any reachable state).

    MIG requests and MIG nodes are left out (their slots follow other rules); a pod
    with no node large enough for it is never certified.
    """
    certified = np.zeros(len(arrivals), dtype=bool)
    if not arrivals:
        return certified
    node_shapes = Counter(
        (n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model or "")
        for n in nodes
        if not n.mig_enabled
    )
    shapes = list(node_shapes)
    count = np.array([node_shapes[s] for s in shapes], dtype=np.float64)
    cpu = np.array([s[0] for s in shapes], dtype=np.float64)
    memory = np.array([s[1] for s in shapes], dtype=np.float64)
    gpus = np.array([s[2] for s in shapes], dtype=np.float64)
    models = [s[3] for s in shapes]
    budgets = _Budgets.of(arrivals)
    weights = _weights()
    by_shape: dict[Shape, list[int]] = defaultdict(list)
    for index, pod in enumerate(arrivals):
        if pod.mig is None:
            key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models)
            by_shape[key].append(index)
    for (pod_cpu, pod_memory, pod_gpus, pod_milli, allowed), indices in by_shape.items():
        host = (cpu >= pod_cpu) & (memory >= pod_memory) & (gpus >= pod_gpus)
        if pod_gpus:
            host &= np.array([bool(m) and (not allowed or m in allowed) for m in models])
        if not host.any():
            continue
        hosts = _Hosts(
            count=count[host],
            cpu_cost=cpu[host] - pod_cpu + 1,
            memory_cost=memory[host] - pod_memory + 1,
            gpus=gpus[host],
            pod_gpus=pod_gpus,
            pod_milli=pod_milli,
        )
        low, high = 0, len(indices)  # indices[:low] certified, indices[high:] not
        while low < high:
            middle = (low + high) // 2
            if hosts.cannot_all_be_blocked(budgets, indices[middle], weights):
                low = middle + 1
            else:
                high = middle
        certified[indices[:low]] = True
    return certified
