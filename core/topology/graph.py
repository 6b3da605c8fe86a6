"""DRTG: the dynamic resource topology graph.

A tree zone → rack → node → socket → PCIe switch → GPU / NIC, plus the data links
that do not follow the tree (NVLink bridges, an NVSwitch fabric per node, the
socket interconnect). Every edge carries the twelve indicators of
:mod:`kubesage.core.topology.indicators`; static ones come from the topology
spec, dynamic ones from telemetry over a sliding window (default 5 s,
:mod:`~kubesage.core.topology.window`), and only the edges (and nodes) that received
samples are recomputed. Each node's block of edges follows its template's layout
(:mod:`~kubesage.core.topology.layout`).

Bandwidth between two GPUs is the smallest available bandwidth on their path:
inside a node the NVLink/NVSwitch path when there is one, else PCIe (through the
socket interconnect across sockets); across nodes each GPU's way out (PCIe to
its switch's NIC, the NIC) plus the rack uplinks, and the zone uplinks, that the
path crosses.

GPU vertices (``<node>/gpu<g>``) carry the identity the node's DRA driver publishes
when the topology has it (:attr:`DRTG.gpu_identity`: device name, UUID, PCIe root,
from ``kubesage topology discover`` or the live informer's ResourceSlices).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.config import load_config
from kubesage.core.errors import InputError
from kubesage.core.topology.indicators import (
    DYNAMIC,
    Indicator,
    IndicatorWeights,
    available_bandwidth,
    edge_weight,
)
from kubesage.core.topology.layout import edge_indicators, indicator_row, node_layout
from kubesage.core.topology.links import LinkKind
from kubesage.core.topology.spec import TOPOLOGY_KIND, GpuIdentity, TopologySpec
from kubesage.core.topology.window import DEFAULT_WINDOW_S, SampleWindow
from kubesage.core.types import NodeSpec


class Level(IntEnum):
    """How close two GPUs are; lower is closer."""

    SAME_GPU = 0
    NVLINK = 1
    SAME_SWITCH = 2
    SAME_SOCKET = 3
    SAME_NODE = 4
    SAME_RACK = 5
    SAME_ZONE = 6
    CROSS_ZONE = 7


class DRTG:
    """The topology graph of a cluster, with live edge indicators."""

    def __init__(
        self,
        spec: TopologySpec,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        coefficients: IndicatorWeights | None = None,
    ):
        if window_s <= 0:
            raise InputError(f"window_s must be positive, got {window_s}")
        self.spec = spec
        self.window_s = window_s
        self.coefficients = coefficients or IndicatorWeights()
        self.zone_names = tuple(zone.name for zone in spec.zones)
        self.rack_names = tuple(rack.name for rack in spec.racks)
        zone_index = {name: i for i, name in enumerate(self.zone_names)}
        self.rack_zone: IntArray = np.array(
            [zone_index[r.zone] for r in spec.racks], dtype=np.int64
        )
        self._templates = {name: node_layout(t) for name, t in spec.node_templates.items()}

        node_names: list[str] = []
        node_rack: list[int] = []
        node_template: list[str] = []
        for r, rack in enumerate(spec.racks):
            for name, template_name in rack.node_entries():
                node_names.append(name)
                node_rack.append(r)
                node_template.append(template_name)
        self.node_names = tuple(node_names)
        self.node_index = {name: i for i, name in enumerate(node_names)}
        self.node_rack: IntArray = np.array(node_rack, dtype=np.int64)
        self.node_zone: IntArray = self.rack_zone[self.node_rack]
        self.node_template = tuple(node_template)

        # Edges: each node's edges in one block laid out by its template, then one
        # uplink per rack and per zone.
        first_edge = []
        kinds: list[int] = []
        indicator_rows: list[FloatArray] = []
        gpu_node: list[int] = []
        gpu_local: list[int] = []
        for n, name in enumerate(self.node_template):
            template = self._templates[name]
            first_edge.append(len(kinds))
            for edge_name in template.edge_offsets:
                kind, row = edge_indicators(template.spec, edge_name)
                kinds.append(kind)
                indicator_rows.append(row)
            for g in range(template.spec.gpus):
                gpu_node.append(n)
                gpu_local.append(g)
        self.node_first_edge: IntArray = np.array(first_edge, dtype=np.int64)
        self._build_vertices()
        self.rack_uplink_edge: IntArray = np.arange(len(spec.racks), dtype=np.int64) + len(kinds)
        for rack in spec.racks:
            kinds.append(LinkKind.RACK_UPLINK)
            indicator_rows.append(
                indicator_row(rack.uplink_gbps / 8.0, LinkKind.RACK_UPLINK, same_zone=1.0, cost=0.5)
            )
        self.zone_uplink_edge: IntArray = np.arange(len(spec.zones), dtype=np.int64) + len(kinds)
        for zone in spec.zones:
            kinds.append(LinkKind.ZONE_UPLINK)
            indicator_rows.append(
                indicator_row(zone.uplink_gbps / 8.0, LinkKind.ZONE_UPLINK, cost=2.0)
            )
        self.edge_kind: IntArray = np.array(kinds, dtype=np.int64)
        self.static_indicators: FloatArray = np.array(indicator_rows)
        self.indicators: FloatArray = self.static_indicators.copy()
        self.gpu_node: IntArray = np.array(gpu_node, dtype=np.int64)
        self.gpu_local: IntArray = np.array(gpu_local, dtype=np.int64)
        self.node_first_gpu: IntArray = np.searchsorted(self.gpu_node, np.arange(len(node_names)))
        known = {
            member.name: {gpu.index: gpu for gpu in member.gpus}
            for rack in spec.racks
            for member in rack.members
        }
        self.gpu_identity: tuple[GpuIdentity | None, ...] = tuple(
            known.get(self.node_names[n], {}).get(g)
            for n, g in zip(gpu_node, gpu_local, strict=True)
        )
        """Per global GPU: its DRA identity (device name, UUID, PCIe root), when known."""

        self._available: FloatArray = available_bandwidth(self.indicators)
        self.weight: FloatArray = edge_weight(self.indicators, self.coefficients)
        self._window = SampleWindow(self.num_edges, window_s)
        self._intra: dict[int, FloatArray] = {}
        self._egress: dict[int, FloatArray] = {}

    # -- construction helpers ------------------------------------------------------------

    def _build_vertices(self) -> None:
        """Vertex names and both ends of every edge: zones, racks, then each node's own."""
        names = [f"zone/{z}" for z in self.zone_names] + [f"rack/{r}" for r in self.rack_names]
        rack_vertex = len(self.zone_names)
        sources: list[int] = []
        targets: list[int] = []
        for n, node in enumerate(self.node_names):
            template = self._templates[self.node_template[n]]
            base = len(names)
            local = {name: base + i for i, name in enumerate(template.vertices)}
            local["rack"] = rack_vertex + int(self.node_rack[n])
            names += [f"{node}/{name}" for name in template.vertices]
            for a, b in template.edge_ends:
                sources.append(local[a])
                targets.append(local[b])
        for r in range(len(self.rack_names)):
            sources.append(rack_vertex + r)
            targets.append(int(self.rack_zone[r]))
        core = len(names)
        names.append("core")
        for z in range(len(self.zone_names)):
            sources.append(z)
            targets.append(core)
        self.vertex_names = tuple(names)
        self.edge_source: IntArray = np.array(sources, dtype=np.int64)
        self.edge_target: IntArray = np.array(targets, dtype=np.int64)

    @classmethod
    def from_yaml(cls, path: Path | str, **options: object) -> DRTG:
        """Build from a ``Topology`` YAML file (``configs/topologies/*.yaml``)."""
        spec = load_config(path, TopologySpec, kind=TOPOLOGY_KIND)
        return cls(spec, **options)  # type: ignore[arg-type]

    # -- sizes and exports ---------------------------------------------------------------

    @property
    def num_edges(self) -> int:
        return int(self.edge_kind.size)

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_gpus(self) -> int:
        return int(self.gpu_node.size)

    def node_specs(self) -> list[NodeSpec]:
        """The nodes as ClusterState specs, with their rack and zone."""
        specs = []
        for n, name in enumerate(self.node_names):
            template = self.spec.node_templates[self.node_template[n]]
            specs.append(
                NodeSpec(
                    name=name,
                    cpu_milli=template.cpu_milli,
                    memory_mib=template.memory_mib,
                    gpu_count=template.gpus,
                    gpu_model=template.gpu_model,
                    rack=self.rack_names[self.node_rack[n]],
                    zone=self.zone_names[self.node_zone[n]],
                )
            )
        return specs

    # -- telemetry -----------------------------------------------------------------------

    @property
    def late_samples(self) -> int:
        """Samples :meth:`observe` dropped: already older than the window on arrival."""
        return self._window.late_samples

    def observe(
        self,
        edges: npt.ArrayLike,
        indicator: Indicator,
        values: npt.ArrayLike,
        timestamp_s: float,
    ) -> None:
        """Record samples of one dynamic indicator on some edges at ``timestamp_s``.

        The indicator's value on an edge becomes the mean of its samples in the last
        ``window_s`` seconds (or its static value when none); weights and the cached
        GPU bandwidths are recomputed for the touched edges only.
        """
        if indicator not in DYNAMIC:
            raise InputError(f"{indicator.name} comes from the topology, not from telemetry")
        edge_ids = np.asarray(edges, dtype=np.int64).ravel()
        samples = np.broadcast_to(np.asarray(values, dtype=np.float64), edge_ids.shape)
        if edge_ids.size and (edge_ids.min() < 0 or edge_ids.max() >= self.num_edges):
            raise InputError(f"edge ids must be in [0, {self.num_edges})")
        self._refresh(self._window.add(edge_ids, indicator, samples, timestamp_s))

    def _refresh(self, edges: IntArray) -> None:
        if edges.size == 0:
            return
        rows = self.static_indicators[edges].copy()
        self._window.overlay(edges, rows)
        self.indicators[edges] = rows
        self._available[edges] = available_bandwidth(rows)
        self.weight[edges] = edge_weight(rows, self.coefficients)
        nodes = np.searchsorted(self.node_first_edge, edges, side="right") - 1
        for node in np.unique(nodes[(nodes >= 0) & (edges < self.rack_uplink_edge[0])]):
            self._intra.pop(int(node), None)
            self._egress.pop(int(node), None)

    # -- queries ---------------------------------------------------------------------------

    def node_edge(self, node: int, name: str) -> int:
        """Global id of a node's named edge (``gpu3-switch``, ``nic-uplink1``, ...)."""
        template = self._templates[self.node_template[node]]
        try:
            return int(self.node_first_edge[node] + template.edge_offsets[name])
        except KeyError:
            raise InputError(f"node {self.node_names[node]} has no edge '{name}'") from None

    def nic_uplink_edges(self, node: int) -> IntArray:
        """Global ids of the node's NIC uplinks (``nic-uplink<w>``): where its network
        traffic leaves it."""
        template = self._templates[self.node_template[node]]
        base = int(self.node_first_edge[node])
        offsets = [o for name, o in template.edge_offsets.items() if name.startswith("nic-uplink")]
        return np.array([base + o for o in sorted(offsets)], dtype=np.int64)

    def intra_node_bandwidth(self, node: int) -> FloatArray:
        """``(G, G)`` available GB/s between the node's GPUs (diagonal: +inf)."""
        cached = self._intra.get(node)
        if cached is None:
            template = self._templates[self.node_template[node]]
            base = self.node_first_edge[node]
            gpus = template.spec.gpus
            cached = np.full((gpus, gpus), np.inf)
            for a in range(gpus):
                for b in range(a + 1, gpus):
                    path = [base + template.edge_offsets[n] for n in template.intra_path[a][b]]
                    cached[a, b] = cached[b, a] = self._available[path].min()
            self._intra[node] = cached
        return cached

    def egress_bandwidth(self, node: int) -> FloatArray:
        """``(G,)`` available GB/s from each GPU of the node out through its NIC."""
        cached = self._egress.get(node)
        if cached is None:
            template = self._templates[self.node_template[node]]
            base = self.node_first_edge[node]
            cached = np.array(
                [
                    self._available[[base + template.edge_offsets[n] for n in path]].min()
                    for path in template.egress_path
                ]
            )
            self._egress[node] = cached
        return cached

    def gpu_bandwidth(self, a: int, b: int) -> float:
        """Available GB/s between global GPUs ``a`` and ``b``."""
        node_a, node_b = int(self.gpu_node[a]), int(self.gpu_node[b])
        local_a, local_b = int(self.gpu_local[a]), int(self.gpu_local[b])
        if node_a == node_b:
            return float(self.intra_node_bandwidth(node_a)[local_a, local_b])
        bandwidth = min(
            self.egress_bandwidth(node_a)[local_a], self.egress_bandwidth(node_b)[local_b]
        )
        rack_a, rack_b = int(self.node_rack[node_a]), int(self.node_rack[node_b])
        if rack_a != rack_b:
            bandwidth = min(
                bandwidth,
                self._available[self.rack_uplink_edge[rack_a]],
                self._available[self.rack_uplink_edge[rack_b]],
            )
            zone_a, zone_b = int(self.rack_zone[rack_a]), int(self.rack_zone[rack_b])
            if zone_a != zone_b:
                bandwidth = min(
                    bandwidth,
                    self._available[self.zone_uplink_edge[zone_a]],
                    self._available[self.zone_uplink_edge[zone_b]],
                )
        return float(bandwidth)

    def locality(self, a: int, b: int) -> Level:
        """How close global GPUs ``a`` and ``b`` are."""
        if a == b:
            return Level.SAME_GPU
        node_a, node_b = int(self.gpu_node[a]), int(self.gpu_node[b])
        if node_a == node_b:
            template = self._templates[self.node_template[node_a]]
            spec = template.spec
            la, lb = int(self.gpu_local[a]), int(self.gpu_local[b])
            if spec.nvlink.topology == "nvswitch" or (
                spec.nvlink.topology == "pairs" and la // 2 == lb // 2
            ):
                return Level.NVLINK
            if la // spec.gpus_per_switch == lb // spec.gpus_per_switch:
                return Level.SAME_SWITCH
            per_socket = spec.gpus // spec.sockets
            return Level.SAME_SOCKET if la // per_socket == lb // per_socket else Level.SAME_NODE
        if self.node_rack[node_a] == self.node_rack[node_b]:
            return Level.SAME_RACK
        return (
            Level.SAME_ZONE
            if self.node_zone[node_a] == self.node_zone[node_b]
            else Level.CROSS_ZONE
        )

    def ring_bus_bandwidth(self, ring: Sequence[int]) -> float:
        """NCCL ring bus bandwidth (GB/s) for GPUs in ring order: the slowest hop.

        A ring AllReduce of S bytes sends 2(n−1)/n · S over every hop, so it takes
        t = 2(n−1)/n · S / slowest; nccl-tests' algbw is S / t and its busbw = algbw ·
        2(n−1)/n, which is the slowest hop itself. Hops inside a node use the
        GPU-to-GPU path. A hop
        between nodes uses the node's rails: NCCL runs one channel per NIC, so a
        node's cross-node bandwidth is the sum of the ways out of the distinct NICs
        next to its GPUs in the ring, shared by the node's boundary hops; rack and
        zone uplinks are shared by the hops that leave through them.
        """
        n = len(ring)
        if n < 2:
            return float("inf")
        nodes = [int(self.gpu_node[g]) for g in ring]
        rails: dict[int, dict[int, float]] = {}
        for gpu, node in zip(ring, nodes, strict=True):
            template = self.spec.node_templates[self.node_template[node]]
            local = int(self.gpu_local[gpu])
            switch = local // template.gpus_per_switch
            rails.setdefault(node, {})
            rails[node][switch] = max(
                rails[node].get(switch, 0.0), float(self.egress_bandwidth(node)[local])
            )
        boundary = [(i, (i + 1) % n) for i in range(n) if nodes[i] != nodes[(i + 1) % n]]
        leaving: dict[int, int] = {}
        rack_out: dict[int, int] = {}
        zone_out: dict[int, int] = {}
        for i, j in boundary:
            leaving[nodes[i]] = leaving.get(nodes[i], 0) + 1
            rack_i, rack_j = int(self.node_rack[nodes[i]]), int(self.node_rack[nodes[j]])
            if rack_i != rack_j:
                rack_out[rack_i] = rack_out.get(rack_i, 0) + 1
                zone_i, zone_j = int(self.rack_zone[rack_i]), int(self.rack_zone[rack_j])
                if zone_i != zone_j:
                    zone_out[zone_i] = zone_out.get(zone_i, 0) + 1
        slowest = float("inf")
        for i in range(n):
            j = (i + 1) % n
            if nodes[i] == nodes[j]:
                hop = self.gpu_bandwidth(ring[i], ring[j])
            else:
                hop = min(
                    sum(rails[nodes[i]].values()) / leaving[nodes[i]],
                    sum(rails[nodes[j]].values()) / leaving[nodes[j]],
                )
                rack_i, rack_j = int(self.node_rack[nodes[i]]), int(self.node_rack[nodes[j]])
                if rack_i != rack_j:
                    hop = min(
                        hop, self._available[self.rack_uplink_edge[rack_i]] / rack_out[rack_i]
                    )
                    zone_i, zone_j = int(self.rack_zone[rack_i]), int(self.rack_zone[rack_j])
                    if zone_i != zone_j:
                        hop = min(
                            hop, self._available[self.zone_uplink_edge[zone_i]] / zone_out[zone_i]
                        )
            slowest = min(slowest, hop)
        return slowest

    def to_pyg(self) -> object:
        """A ``torch_geometric.data.Data`` of the graph: both directions of every edge,
        ``edge_attr`` the twelve indicators, ``edge_weight`` the combined weight."""
        import torch
        from torch_geometric.data import Data

        index = np.concatenate(
            [
                np.stack([self.edge_source, self.edge_target]),
                np.stack([self.edge_target, self.edge_source]),
            ],
            axis=1,
        )
        return Data(
            edge_index=torch.from_numpy(index),
            edge_attr=torch.from_numpy(np.concatenate([self.indicators, self.indicators])).float(),
            edge_weight=torch.from_numpy(np.concatenate([self.weight, self.weight])).float(),
            num_nodes=len(self.vertex_names),
        )

    def gpu_by_uuid(self, uuid: str) -> int:
        """The global id of the GPU with this UUID (InputError when none has it)."""
        for gpu, identity in enumerate(self.gpu_identity):
            if identity is not None and identity.uuid == uuid:
                return gpu
        raise InputError(f"no GPU of the topology has UUID {uuid}")

    def gpu_vertex(self, gpu: int) -> str:
        """The vertex name of global GPU ``gpu`` (``<node>/gpu<g>``)."""
        return f"{self.node_names[int(self.gpu_node[gpu])]}/gpu{int(self.gpu_local[gpu])}"

    def node_gpus(self, node: int) -> IntArray:
        """Global ids of the node's GPUs."""
        start = int(self.node_first_gpu[node])
        count = self.spec.node_templates[self.node_template[node]].gpus
        return np.arange(start, start + count, dtype=np.int64)
