"""AllReduce-aware gang placement: which GPUs an N-GPU job gets, and its rank order.

A ring AllReduce runs at the speed of its slowest hop, so a placement's quality is
the ring's bus bandwidth: nccl-tests' ``busbw = algbw · 2(n−1)/n``, which for a ring is
its slowest hop (from the DRTG). The placement is all-or-nothing and prefers, in order:
the highest ring bus bandwidth, the fewest nodes and racks, and then the tightest fit
(nodes whose free GPUs it uses up, so whole free nodes stay whole for the next big
job); a node that holds the whole gang is compared with the best rings across nodes,
not taken on sight.

Inside a node, the best ring order is the Hamiltonian cycle with the widest
slowest hop, found exactly by a bitmask search for rings of at most
:data:`EXACT_RING_LIMIT` GPUs, and which free GPUs to take by scoring every subset
while that work stays within :data:`SEARCH_LIMIT`. Bigger nodes (a template allows 64
GPUs) do not blow up: where every hop inside the node is equally fast (an NVSwitch
node) there is nothing to search; otherwise a greedy choice stands in for the
exhaustive one (see :func:`greedy_ring` and :func:`_greedy_subset`), and one call
scores each node's choice once.
Across nodes, each node's GPUs are consecutive in the ring (consecutive ranks
share the fastest links, as NCCL wants), and the nodes go zone by zone, rack by rack,
so only one hop per node boundary crosses the network and each uplink is crossed as
few times as the ring allows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.errors import InputError
from kubesage.core.topology.graph import DRTG


@dataclass(frozen=True)
class GangPlacement:
    """GPUs for every rank, in rank order (global GPU ids of the DRTG)."""

    ranks: tuple[int, ...]
    bus_bandwidth_gbps: float
    """``inf`` for a single GPU (no ring: nothing to reduce over)."""
    nodes: tuple[str, ...]
    racks: int
    explanation: str

    @property
    def bandwidth_text(self) -> str:
        """The ring bus bandwidth in words (a single GPU has no ring)."""
        return ring_text(len(self.ranks), self.bus_bandwidth_gbps)


def ring_text(size: int, busbw: float) -> str:
    return "single GPU: no ring" if size < 2 else f"ring bus bandwidth {busbw:.1f} GB/s"


EXACT_RING_LIMIT = 12
"""Largest ring ordered by the exact bitmask search (``2^n · n`` states); above, greedily."""
SEARCH_LIMIT = 2**15
"""Most work (GPU subsets × ``2^size`` states of each one's exact ring search) spent on
one node's exhaustive choice; above, the subset is chosen greedily. The ring search is
plain Python: 13 free GPUs of a 16-GPU PCIe node, 11 to take, had cost 6 s a choice."""

NodeChoices = dict[tuple[int, tuple[int, ...], int], tuple[list[int], float]]
"""One :func:`place_gang` call's :func:`_node_choice` results, by (node, free, count)."""


def _all_equal(bandwidth: FloatArray) -> bool:
    off_diagonal = bandwidth[~np.eye(bandwidth.shape[0], dtype=bool)]
    return bool(off_diagonal.size == 0 or np.all(off_diagonal == off_diagonal[0]))


def best_ring(bandwidth: FloatArray) -> tuple[list[int], float]:
    """Order of ``n`` GPUs (bandwidth matrix ``(n, n)``) maximising the slowest ring hop.

    Exact up to :data:`EXACT_RING_LIMIT` GPUs and whenever every hop is equally fast
    (any order is then best; the one given, 0 then n−1 down to 1, is the one the exact
    search returns); otherwise :func:`greedy_ring`.
    """
    n = bandwidth.shape[0]
    if n <= 2:
        order = list(range(n))
        return order, float(bandwidth[0, 1]) if n == 2 else float("inf")
    if _all_equal(bandwidth):
        return [0, *range(n - 1, 0, -1)], float(bandwidth[0, 1])
    if n > EXACT_RING_LIMIT:
        return greedy_ring(bandwidth)
    thresholds = sorted({float(v) for v in bandwidth[np.triu_indices(n, 1)]}, reverse=True)
    for threshold in thresholds:
        cycle = _hamiltonian_cycle(bandwidth >= threshold)
        if cycle is not None:
            return cycle, threshold
    raise AssertionError("a complete graph always has a Hamiltonian cycle")


def _hamiltonian_cycle(adjacent: BoolArray) -> list[int] | None:
    """A Hamiltonian cycle through vertex 0 (bitmask DP), or None."""
    n = adjacent.shape[0]
    full = (1 << n) - 1
    reach = np.zeros((1 << n, n), dtype=bool)  # reach[mask, v]: path 0 → v covering mask
    parent = np.full((1 << n, n), -1, dtype=np.int64)
    reach[1, 0] = True
    for mask in range(1, 1 << n):
        if not mask & 1:
            continue
        for v in np.flatnonzero(reach[mask]):
            for w in np.flatnonzero(adjacent[v]):
                if not mask >> w & 1:
                    bigger = mask | 1 << w
                    if not reach[bigger, w]:
                        reach[bigger, w] = True
                        parent[bigger, w] = v
    for last in range(1, n):
        if reach[full, last] and adjacent[last, 0]:
            order: list[int] = []
            mask, vertex = full, last
            while vertex != -1:
                order.append(vertex)
                vertex, mask = int(parent[mask, vertex]), mask & ~(1 << vertex)
            return order[::-1]
    return None


def greedy_ring(bandwidth: FloatArray) -> tuple[list[int], float]:
    """A ring from GPU 0, each next GPU the unvisited one with the widest hop from the
    last (ties: lowest index); not always optimal, always ``O(n²)``."""
    n = bandwidth.shape[0]
    order, left = [0], set(range(1, n))
    while left:
        last = order[-1]
        step = max(sorted(left), key=lambda g: float(bandwidth[last, g]))
        order.append(step)
        left.remove(step)
    slowest = min(float(bandwidth[a, b]) for a, b in itertools.pairwise([*order, 0]))
    return order, slowest


def _rails(subset: Sequence[int], per_switch: int) -> int:
    """How many PCIe switches (so NICs, rails out) the local GPUs ``subset`` sit behind."""
    return len({g // per_switch for g in subset})


def _spread_subset(free: Sequence[int], count: int, per_switch: int) -> list[int]:
    """The first ``count`` of ``free`` (in index order) behind the most switches: what
    scoring every subset picks when every hop is equally fast, without enumerating."""
    target = min(count, _rails(free, per_switch))
    chosen: list[int] = []
    for position, gpu in enumerate(free):
        if len(chosen) == count:
            break
        trial = [*chosen, gpu]
        rest = free[position + 1 :]
        seen = {g // per_switch for g in trial}
        reachable = len(seen | {g // per_switch for g in rest})
        slots = count - len(trial)
        if len(rest) >= slots and min(reachable, len(seen) + slots) >= target:
            chosen = trial
    return chosen


def _greedy_subset(matrix: FloatArray, free: Sequence[int], count: int) -> list[int]:
    """``count`` of ``free`` grown from the best seed, each step adding the GPU whose
    slowest link to those chosen is widest (ties: lowest index)."""
    best: tuple[float, list[int]] = (-1.0, [])
    for seed in free:
        chosen, left = [seed], [g for g in free if g != seed]
        while len(chosen) < count:
            step = max(left, key=lambda g: float(matrix[g, chosen].min()))
            chosen.append(step)
            left.remove(step)
        slowest = float(matrix[np.ix_(chosen, chosen)][~np.eye(count, dtype=bool)].min())
        if count == 1 or slowest > best[0]:
            best = (slowest, sorted(chosen))
        if count == 1:
            break
    return best[1]


def _node_choice(
    drtg: DRTG, node: int, free: Sequence[int], count: int, memo: NodeChoices
) -> tuple[list[int], float]:
    """Best ``count`` of the node's free local GPUs and their ring order (kept in
    ``memo``: placing one gang asks about the same node many times).

    Every subset is scored while that stays within :data:`SEARCH_LIMIT`; when every
    hop between the free GPUs is equally fast the subset behind the most switches is
    taken straight away (the same one scoring would pick); otherwise a greedy subset.
    """
    key = (node, tuple(free), count)
    if key not in memo:
        memo[key] = _choose_on_node(drtg, node, free, count)
    return memo[key]


def _choose_on_node(
    drtg: DRTG, node: int, free: Sequence[int], count: int
) -> tuple[list[int], float]:
    matrix = drtg.intra_node_bandwidth(node)
    per_switch = drtg.spec.node_templates[drtg.node_template[node]].gpus_per_switch
    equal = _all_equal(matrix[np.ix_(free, free)])
    work = math.comb(len(free), count) * 2 ** min(count, EXACT_RING_LIMIT)
    if equal or work > SEARCH_LIMIT:
        if equal:
            chosen = _spread_subset(free, count, per_switch)
        else:
            chosen = _greedy_subset(matrix, free, count)
        order, slowest = best_ring(matrix[np.ix_(chosen, chosen)])
        return [chosen[i] for i in order], slowest
    best: tuple[list[int], float] = ([], -1.0)
    best_rails = -1
    for subset in itertools.combinations(free, count):
        order, slowest = best_ring(matrix[np.ix_(subset, subset)])
        # Among equally fast rings prefer GPUs behind more NICs (more rails out).
        rails = _rails(subset, per_switch)
        if slowest > best[1] or (slowest == best[1] and rails > best_rails):
            best, best_rails = ([subset[i] for i in order], slowest), rails
    return best


def place_gang(
    drtg: DRTG, free_gpus: BoolArray, count: int, *, unit: int = 1
) -> GangPlacement | None:
    """Place ``count`` whole GPUs among ``free_gpus`` (per global GPU); None if they do not
    fit. ``unit``: each node takes a multiple of it (a gang of ``unit``-GPU members, each
    on one node), so the ring cuts into members at node boundaries."""
    if count < 1 or unit < 1 or count % unit:
        raise InputError(f"a gang needs a positive multiple of {unit} GPU(s), got {count}")
    if free_gpus.shape != (drtg.num_gpus,):
        raise InputError(f"free_gpus must have one entry per GPU ({drtg.num_gpus})")
    if int(free_gpus.sum()) < count:
        return None
    free_by_node = {
        node: [int(g) for g in np.flatnonzero(free_gpus[drtg.node_gpus(node)])]
        for node in range(drtg.num_nodes)
    }
    memo: NodeChoices = {}
    single = [node for node, free in free_by_node.items() if len(free) >= count]
    one_node = None
    if single:
        scored = []
        for node in single:
            local, slowest = _node_choice(drtg, node, free_by_node[node], count, memo)
            busbw = slowest if count > 1 else float("inf")
            scored.append((busbw, -len(free_by_node[node]), node, local))
        busbw, _, node, local = max(scored, key=lambda item: (item[0], item[1], -item[2]))
        ranks = tuple(int(drtg.node_gpus(node)[g]) for g in local)
        one_node = GangPlacement(
            ranks=ranks,
            bus_bandwidth_gbps=busbw,
            nodes=(drtg.node_names[node],),
            racks=1,
            explanation=(
                f"one node, {drtg.node_names[node]}: {ring_text(count, busbw)}; "
                f"{len(free_by_node[node]) - count} of its free GPUs left"
            ),
        )
        if count == 1:
            return one_node
    # A node that holds the whole gang is not always the fastest ring: a slow one (PCIe)
    # can lose to several fast ones, whose ring crosses a faster network.
    usable = {node: free[: len(free) // unit * unit] for node, free in free_by_node.items()}
    across = _place_across_nodes(drtg, usable, count, memo, unit)
    candidates = [p for p in (one_node, across) if p]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p.bus_bandwidth_gbps, -len(p.nodes), -p.racks))


def _place_across_nodes(
    drtg: DRTG, free_by_node: dict[int, list[int]], count: int, memo: NodeChoices, unit: int
) -> GangPlacement | None:
    """Try node sets from one rack, then one zone, then anywhere; keep the best ring.

    For each scope, nodes are taken most-free-first, fastest-inside-first (by the
    ring their free GPUs make) or in index order, each filled as far as it goes, all
    evenly loaded, or evenly over at least two nodes (a node that holds the whole gang
    is then still compared with the rings that spread it); every candidate's ring keeps
    each zone's and each rack's nodes together and is scored by the DRTG. The best bus
    bandwidth wins, then the fewest nodes and racks.
    """
    scopes: list[list[int]] = []
    for rack in range(len(drtg.rack_names)):
        scopes.append([n for n in range(drtg.num_nodes) if drtg.node_rack[n] == rack])
    for zone in range(len(drtg.zone_names)):
        scopes.append([n for n in range(drtg.num_nodes) if drtg.node_zone[n] == zone])
    scopes.append(list(range(drtg.num_nodes)))
    best: tuple[tuple[float, int, int], list[int], list[tuple[int, int]]] | None = None
    for scope in scopes:
        with_free = [n for n in scope if free_by_node[n]]
        if sum(len(free_by_node[n]) for n in with_free) < count:
            continue

        def inside(node: int) -> float:  # the ring the node's own free GPUs make
            free = free_by_node[node]
            return _node_choice(drtg, node, free, min(count, len(free)), memo)[1]

        orders = (
            sorted(with_free, key=lambda n: (-len(free_by_node[n]), n)),
            sorted(with_free, key=lambda n: (-inside(n), -len(free_by_node[n]), n)),
            sorted(with_free),
        )
        for order in orders:
            for takes in (
                _fill(order, free_by_node, count),
                _even(order, free_by_node, count, unit),
                _even(order, free_by_node, count, unit, at_least=2),
            ):
                if takes is None:
                    continue
                takes.sort(
                    key=lambda t: (int(drtg.node_zone[t[0]]), int(drtg.node_rack[t[0]]), t[0])
                )
                ranks: list[int] = []
                for node, take in takes:
                    local, _ = _node_choice(drtg, node, free_by_node[node], take, memo)
                    ranks += [int(drtg.node_gpus(node)[g]) for g in local]
                busbw = drtg.ring_bus_bandwidth(ranks)
                racks = len({int(drtg.node_rack[node]) for node, _ in takes})
                key = (busbw, -len(takes), -racks)
                if best is None or key > best[0]:
                    best = (key, ranks, takes)
        if best is not None and scope is scopes[-1]:
            break
    if best is None:
        return None
    (busbw, _, _), ranks, takes = best
    racks = len({int(drtg.node_rack[node]) for node, _ in takes})
    return GangPlacement(
        ranks=tuple(ranks),
        bus_bandwidth_gbps=busbw,
        nodes=tuple(drtg.node_names[node] for node, _ in takes),
        racks=racks,
        explanation=(
            f"{len(takes)} nodes in {racks} rack(s), each node's GPUs consecutive in the "
            f"ring: bus bandwidth {busbw:.1f} GB/s"
        ),
    )


def _fill(
    order: list[int], free_by_node: dict[int, list[int]], count: int
) -> list[tuple[int, int]]:
    """Take every free GPU of each node in turn until ``count``."""
    takes, remaining = [], count
    for node in order:
        take = min(remaining, len(free_by_node[node]))
        takes.append((node, take))
        remaining -= take
        if remaining == 0:
            break
    return takes


def _even(
    order: list[int],
    free_by_node: dict[int, list[int]],
    count: int,
    unit: int,
    *,
    at_least: int = 1,
) -> list[tuple[int, int]] | None:
    """The fewest nodes of ``order`` (``at_least`` of them) that fit ``count``, loaded
    as evenly as they allow, ``unit`` GPUs at a time (every node's free GPUs are a
    multiple of it)."""
    if at_least > min(count // unit, len(order)):
        return None
    for size in range(at_least, len(order) + 1):
        nodes = order[:size]
        if sum(len(free_by_node[n]) for n in nodes) < count:
            continue
        takes = {n: 0 for n in nodes}
        remaining = count
        while remaining:
            for node in nodes:
                if remaining and takes[node] < len(free_by_node[node]):
                    takes[node] += unit
                    remaining -= unit
        return list(takes.items())
    return None


EXHAUSTIVE_LIMIT = 200_000
"""Most rings ``exhaustive_best`` will score."""


def exhaustive_best(drtg: DRTG, free_gpus: BoolArray, count: int) -> float:
    """The best ring bus bandwidth over every free GPU subset and every ring order.

    Scores rings with the same DRTG model as ``place_gang``; for small instances only.
    """
    free = [int(g) for g in np.flatnonzero(free_gpus)]
    if len(free) < count:
        return 0.0
    subsets = list(itertools.combinations(free, count))
    orders = max(1, int(np.prod(range(1, count)))) // (2 if count > 2 else 1)
    if len(subsets) * orders > EXHAUSTIVE_LIMIT:
        raise InputError(f"{len(subsets) * orders} rings is too many to search exhaustively")
    best = 0.0
    for subset in subsets:
        first, rest = subset[0], subset[1:]
        for order in itertools.permutations(rest):
            if len(order) > 1 and order[0] > order[-1]:
                continue  # a ring and its reverse are the same ring
            best = max(best, drtg.ring_bus_bandwidth([first, *order]))
    return best


def spread_placement(drtg: DRTG, free_gpus: BoolArray, count: int) -> list[int] | None:
    """Topology-blind spreading: one free GPU per node in turn, ranks in that order."""
    queues = [list(drtg.node_gpus(n)[free_gpus[drtg.node_gpus(n)]]) for n in range(drtg.num_nodes)]
    ranks: list[int] = []
    while len(ranks) < count and any(queues):
        for queue in queues:
            if queue and len(ranks) < count:
                ranks.append(int(queue.pop(0)))
    return ranks if len(ranks) == count else None


def packed_placement(drtg: DRTG, free_gpus: BoolArray, count: int) -> list[int] | None:
    """Topology-blind packing: the lowest-numbered free GPUs, ranks in index order."""
    free = [int(g) for g in np.flatnonzero(free_gpus)]
    return free[:count] if len(free) >= count else None
