"""Executor placement that keeps shuffles inside racks, and the placements it is measured against.

``place_executors`` chooses nodes for ``N`` equal executors within the cluster's
free CPU and memory and a balance limit (no node hosts more than
``max_node_share`` of the executors, so one node's loss costs a bounded part of
the job). The shuffle model's objective — expected cross-rack bytes, then
cross-zone, then cross-node — only improves as executors concentrate in the
racks that hold the input, so the best placement fills racks one after another;
every fill order that starts from some rack (then its zone's other racks, then by
input share and room) is evaluated and the cheapest kept. Inside a rack, nodes
with the most room go first, so shuffles also stay on-node where they can.

Baselines: ``spread_placement`` places the executors one at a time with the
core's Kubernetes default scoring (LeastAllocated + BalancedAllocation), as the
default scheduler treats a set of executor pods; ``random_placement`` picks a
random node with room for each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kubesage.adapters.spark.shuffle_model import ShuffleProfile, TrafficEstimate, estimate
from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.policy.gpu_choice import placement_on
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import PodRequest


@dataclass(frozen=True)
class ExecutorShape:
    executors: int
    cores: int
    memory_mib: int
    gpus: int = 0
    """Whole GPUs per executor (0: none)."""

    def __post_init__(self) -> None:
        if self.executors < 1 or self.cores < 1 or self.memory_mib < 1 or self.gpus < 0:
            raise InputError(
                f"executors, cores and memory must be positive and GPUs not negative, got "
                f"{self.executors}, {self.cores}, {self.memory_mib} MiB, {self.gpus} GPU(s)"
            )

    def pod(self, index: int) -> PodRequest:
        return PodRequest(
            name=f"exec-{index}",
            cpu_milli=self.cores * 1000,
            memory_mib=self.memory_mib,
            num_gpu=self.gpus,
            gpu_milli=1000 if self.gpus else 0,
        )


@dataclass(frozen=True)
class SparkPlacement:
    nodes: tuple[int, ...]
    """DRTG node index of each executor."""
    estimate: TrafficEstimate
    reasons: tuple[str, ...] = field(default=())

    def executors_per_rack(self, drtg: DRTG) -> dict[str, int]:
        counts = np.bincount(drtg.node_rack[list(self.nodes)], minlength=len(drtg.rack_names))
        return {drtg.rack_names[r]: int(c) for r, c in enumerate(counts) if c}


def _check_cluster(drtg: DRTG, state: ClusterState) -> None:
    if state.node_names != drtg.node_names:
        raise InputError("the cluster state and the topology list different nodes")


def node_room(state: ClusterState, shape: ExecutorShape) -> IntArray:
    """How many executors each node has free CPU and memory (and whole GPUs) for."""
    by_cpu = state.cpu_free_milli // (shape.cores * 1000)
    by_memory = state.memory_free_mib // shape.memory_mib
    room = np.minimum(by_cpu, by_memory)
    if shape.gpus:
        room = np.minimum(room, state.gpu_whole_free_count // shape.gpus)
    return room.clip(0).astype(np.int64)


def _room(
    state: ClusterState,
    shape: ExecutorShape,
    max_node_share: float,
    running: Sequence[int],
    executors: int,
) -> tuple[IntArray, int]:
    """Each node's room for ``executors`` more of the application's executors, its
    ``running`` ones (their nodes) counting against the balance limit; and that limit."""
    if not 0 < max_node_share <= 1:
        raise InputError(
            f"the max node share (--max-node-share) must be within (0, 1], got {max_node_share}"
        )
    per_node = max(1, math.floor(max_node_share * (executors + len(running))))
    already = np.bincount(np.asarray(running, dtype=np.int64), minlength=state.num_nodes)
    room = np.minimum(node_room(state, shape), (per_node - already).clip(0))
    return room, per_node


def executors_with_room(
    state: ClusterState,
    shape: ExecutorShape,
    *,
    max_node_share: float = 0.25,
    running: Sequence[int] = (),
) -> int:
    """How many of ``shape.executors`` fit now within the balance limit (the most ``k``
    for which :func:`place_executors` of ``k`` would not raise CapacityError)."""
    for count in range(shape.executors, 0, -1):
        room, _ = _room(state, shape, max_node_share, running, count)
        if int(room.sum()) >= count:
            return count
    return 0


def place_executors(
    drtg: DRTG,
    state: ClusterState,
    shape: ExecutorShape,
    profile: ShuffleProfile,
    input_locality: FloatArray | None = None,
    *,
    max_node_share: float = 0.25,
    running: Sequence[int] = (),
) -> SparkPlacement:
    """The placement with the least expected cross-rack traffic (see the module docstring).

    ``running`` are the nodes (DRTG indices) of the application's executors already
    bound, whose resources ``state`` counts: the balance limit counts them, and the
    traffic is the whole application's, so more executors join the racks it runs in."""
    _check_cluster(drtg, state)
    room, per_node = _room(state, shape, max_node_share, running, shape.executors)
    if int(room.sum()) < shape.executors:
        gpus = f" and {shape.gpus} GPU(s)" if shape.gpus else ""
        raise CapacityError(
            f"{shape.executors} executors of {shape.cores} cores and {shape.memory_mib} MiB"
            f"{gpus} do not fit: room for {int(room.sum())} with at most {per_node} per node"
        )
    racks = len(drtg.rack_names)
    rack_room = np.bincount(drtg.node_rack, weights=room, minlength=racks).astype(np.int64)
    local = input_locality if input_locality is not None else np.zeros(racks)
    best: tuple[tuple[float, float, float], list[int], list[int]] | None = None
    for first in range(racks):
        if rack_room[first] == 0:
            continue
        others = sorted(
            (r for r in range(racks) if r != first and rack_room[r]),
            key=lambda r: (
                drtg.rack_zone[r] != drtg.rack_zone[first],
                -local[r],
                -rack_room[r],
                r,
            ),
        )
        order = [first, *others]
        nodes = _fill(drtg, room, order, shape.executors)
        traffic = estimate(drtg, [*running, *nodes], profile, local)
        key = (traffic.cross_rack_bytes, traffic.cross_zone_bytes, traffic.cross_node_bytes)
        if best is None or key < best[0]:
            best = (key, nodes, order)
    assert best is not None
    _, nodes, order = best
    whole = estimate(drtg, [*running, *nodes], profile, local)
    placement = SparkPlacement(tuple(nodes), whole)
    return SparkPlacement(
        placement.nodes,
        placement.estimate,
        tuple(_reasons(drtg, placement, order, rack_room, local, per_node)),
    )


def _fill(drtg: DRTG, room: IntArray, order: Sequence[int], executors: int) -> list[int]:
    """Executors onto the racks in ``order``, roomiest nodes first within a rack."""
    nodes: list[int] = []
    for rack in order:
        members = np.flatnonzero(drtg.node_rack == rack)
        for node in sorted(members.tolist(), key=lambda n: (-int(room[n]), n)):
            take = min(int(room[node]), executors - len(nodes))
            nodes += [node] * take
            if len(nodes) == executors:
                return nodes
    return nodes


def _reasons(
    drtg: DRTG,
    placement: SparkPlacement,
    order: Sequence[int],
    rack_room: IntArray,
    local: FloatArray,
    per_node: int,
) -> list[str]:
    per_rack = placement.executors_per_rack(drtg)
    lines = []
    for rack in order:
        name = drtg.rack_names[rack]
        if name not in per_rack:
            continue
        why = f"room for {int(rack_room[rack])}"
        if local[rack] > 0:
            why += f", holds {local[rack]:.0%} of the input"
        lines.append(f"{per_rack[name]} executor(s) in {name} ({why})")
    if len(per_rack) == 1:
        tradeoff = "all executors in one rack, so shuffles never cross a rack uplink"
    else:
        tradeoff = (
            "no single rack has room for every executor; the rest go to the nearest "
            "racks (same zone first), so some shuffle bytes cross rack uplinks"
        )
    lines.append(f"trade-off: {tradeoff}")
    spread_input = 1 - float(local[[drtg.rack_names.index(r) for r in per_rack]].sum())
    if placement.estimate.cross_rack_input_bytes and not local.any():
        lines.append(
            "input: where it lies was not given (--input-locality), so its reads count as "
            "remote to every rack, for this placement and the default spread alike"
        )
    elif placement.estimate.cross_rack_input_bytes and spread_input > 0:
        lines.append(
            f"trade-off: {spread_input:.0%} of the input lies outside the chosen racks "
            "and is read across uplinks"
        )
    used = len(set(placement.nodes))
    lines.append(
        f"balance: {used} node(s), at most {per_node} executor(s) each "
        "(raise --max-node-share to pack tighter, lower it to spread the risk)"
    )
    return lines


Chooser = Callable[[ClusterState, PodRequest], "int | None"]


def _sequential(state: ClusterState, shape: ExecutorShape, choose: Chooser) -> list[int]:
    trial = state.copy()
    nodes = []
    for index in range(shape.executors):
        pod = shape.pod(index)
        node = choose(trial, pod)
        if node is None:
            raise CapacityError(f"executor {index} of {shape.executors} does not fit")
        trial.allocate(pod, placement_on(trial, int(node), pod))
        nodes.append(int(node))
    return nodes


def spread_placement(
    drtg: DRTG,
    state: ClusterState,
    shape: ExecutorShape,
    profile: ShuffleProfile,
    input_locality: FloatArray | None = None,
) -> SparkPlacement:
    """The Kubernetes default scheduler's choice, executor after executor."""
    _check_cluster(drtg, state)
    policy = make_policy("k8s-default", PolicyContext(seed=0))

    def choose(trial: ClusterState, pod: PodRequest) -> int | None:
        decision = policy.decide(trial, pod)
        return None if decision.placement is None else decision.placement.node_index

    nodes = _sequential(state, shape, choose)
    return SparkPlacement(tuple(nodes), estimate(drtg, nodes, profile, input_locality))


def random_placement(
    drtg: DRTG,
    state: ClusterState,
    shape: ExecutorShape,
    profile: ShuffleProfile,
    input_locality: FloatArray | None = None,
    *,
    seed: int = 0,
) -> SparkPlacement:
    """A random node with room for each executor."""
    _check_cluster(drtg, state)
    rng = np.random.default_rng(seed)

    def choose(trial: ClusterState, pod: PodRequest) -> int | None:
        feasible = np.flatnonzero(trial.feasible(pod))
        return int(rng.choice(feasible)) if feasible.size else None

    nodes = _sequential(state, shape, choose)
    return SparkPlacement(tuple(nodes), estimate(drtg, nodes, profile, input_locality))
