"""The layout of one node template inside the DRTG: its edges, vertices and GPU paths.

Every node of a template has the same block of edges, laid out once here and placed at
the node's first edge id by :class:`~kubesage.core.topology.graph.DRTG`. Edges are
named (``node-socket<s>``, ``xsocket<s>``, ``socket-switch<w>``, ``switch-nic<w>``,
``nic-uplink<w>``, ``gpu<g>-switch``, ``gpu<g>-nvswitch``, ``nvlink<g>``) so that paths
and telemetry can refer to them; :func:`edge_indicators` gives each its static
indicators from the template's PCIe generation, NVLink and NIC speeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.topology.indicators import INDICATOR_COUNT, Indicator
from kubesage.core.topology.links import (
    CROSS_SOCKET_GBPS,
    DEFAULT_LATENCY_US,
    NVLINK_GBPS_PER_LINK,
    PCIE_X16_GBPS,
    LinkKind,
)
from kubesage.core.topology.spec import NodeTemplate


@dataclass
class NodeLayout:
    """The edges, vertices and GPU-to-GPU paths of one node template."""

    spec: NodeTemplate
    edge_offsets: dict[str, int]
    """Edge position (relative to the node's first edge) of each named link."""
    edges_per_node: int
    intra_path: list[list[list[str]]]
    """Names of the edges on the path between local GPUs i and j."""
    egress_path: list[list[str]]
    """Names of the edges from local GPU i to its NIC, NIC uplink included."""
    vertices: list[str]
    """The node's own vertices: ``node``, ``socket<s>``, ``switch<w>``, ``gpu<g>``, ``nic<w>``
    and ``nvswitch`` when there is a fabric."""
    edge_ends: list[tuple[str, str]]
    """Both ends of each named edge (``rack`` is the node's rack vertex)."""


def node_layout(spec: NodeTemplate) -> NodeLayout:
    """Lay out a template's edges, vertices and paths (see the module docstring)."""
    names: list[str] = []
    per_socket = spec.gpus // spec.sockets
    switches = spec.gpus // spec.gpus_per_switch
    names += [f"node-socket{s}" for s in range(spec.sockets)]
    for s in range(spec.sockets - 1):
        names.append(f"xsocket{s}")
    for w in range(switches):
        names += [f"socket-switch{w}", f"switch-nic{w}", f"nic-uplink{w}"]
    for g in range(spec.gpus):
        names.append(f"gpu{g}-switch")
        if spec.nvlink.topology == "nvswitch":
            names.append(f"gpu{g}-nvswitch")
    if spec.nvlink.topology == "pairs":
        for g in range(0, spec.gpus, 2):
            names.append(f"nvlink{g}")
    offsets = {name: i for i, name in enumerate(names)}

    def socket_of(g: int) -> int:
        return g // per_socket

    def switch_of(g: int) -> int:
        return g // spec.gpus_per_switch

    def pcie_path(a: int, b: int) -> list[str]:
        path = [f"gpu{a}-switch", f"gpu{b}-switch"]
        if switch_of(a) != switch_of(b):
            path += [f"socket-switch{switch_of(a)}", f"socket-switch{switch_of(b)}"]
        low, high = sorted((socket_of(a), socket_of(b)))
        path += [f"xsocket{s}" for s in range(low, high)]
        return path

    intra: list[list[list[str]]] = []
    for a in range(spec.gpus):
        row: list[list[str]] = []
        for b in range(spec.gpus):
            if a == b:
                row.append([])
            elif spec.nvlink.topology == "nvswitch":
                row.append([f"gpu{a}-nvswitch", f"gpu{b}-nvswitch"])
            elif spec.nvlink.topology == "pairs" and a // 2 == b // 2:
                row.append([f"nvlink{a - a % 2}"])
            else:
                row.append(pcie_path(a, b))
        intra.append(row)
    egress = [
        [f"gpu{g}-switch", f"switch-nic{switch_of(g)}", f"nic-uplink{switch_of(g)}"]
        for g in range(spec.gpus)
    ]
    vertices = ["node", *(f"socket{s}" for s in range(spec.sockets))]
    vertices += [f"switch{w}" for w in range(switches)] + [f"gpu{g}" for g in range(spec.gpus)]
    vertices += [f"nic{w}" for w in range(switches)]
    if spec.nvlink.topology == "nvswitch":
        vertices.append("nvswitch")
    switches_per_socket = switches // spec.sockets
    ends: list[tuple[str, str]] = []
    for name in names:
        if name.startswith("node-socket"):
            ends.append(("node", f"socket{name.removeprefix('node-socket')}"))
        elif name.startswith("xsocket"):
            s = int(name.removeprefix("xsocket"))
            ends.append((f"socket{s}", f"socket{s + 1}"))
        elif name.startswith("socket-switch"):
            w = int(name.removeprefix("socket-switch"))
            ends.append((f"socket{w // switches_per_socket}", f"switch{w}"))
        elif name.startswith("switch-nic"):
            w = int(name.removeprefix("switch-nic"))
            ends.append((f"switch{w}", f"nic{w}"))
        elif name.startswith("nic-uplink"):
            ends.append((f"nic{name.removeprefix('nic-uplink')}", "rack"))
        elif name.endswith("-nvswitch"):
            ends.append((name.removesuffix("-nvswitch"), "nvswitch"))
        elif name.endswith("-switch"):
            g = int(name.removeprefix("gpu").removesuffix("-switch"))
            ends.append((f"gpu{g}", f"switch{switch_of(g)}"))
        else:  # nvlink<g>: the bridge between GPU g and g+1
            g = int(name.removeprefix("nvlink"))
            ends.append((f"gpu{g}", f"gpu{g + 1}"))
    return NodeLayout(spec, offsets, len(names), intra, egress, vertices, ends)


def indicator_row(bandwidth: float, kind: LinkKind, **static: float) -> FloatArray:
    """An edge's static indicators: its bandwidth, its kind's latency and ``static``
    (lower-case :class:`Indicator` names, e.g. ``same_rack=1.0``); the rest zero."""
    row = np.zeros(INDICATOR_COUNT)
    row[Indicator.BANDWIDTH_GBPS] = bandwidth
    row[Indicator.LATENCY_US] = DEFAULT_LATENCY_US[kind]
    for name, value in static.items():
        row[Indicator[name.upper()]] = value
    return row


def edge_indicators(spec: NodeTemplate, name: str) -> tuple[LinkKind, FloatArray]:
    """The kind and static indicators of a template's edge ``name``."""
    pcie = PCIE_X16_GBPS[spec.pcie_generation]
    nvlink = NVLINK_GBPS_PER_LINK[spec.nvlink.generation] * spec.nvlink.links_per_gpu
    local = {"same_rack": 1.0, "same_zone": 1.0}
    if name.startswith("node-socket"):
        return LinkKind.CONTAINS, indicator_row(0.0, LinkKind.CONTAINS, **local)
    if name.startswith("xsocket"):
        return LinkKind.CROSS_SOCKET, indicator_row(
            CROSS_SOCKET_GBPS, LinkKind.CROSS_SOCKET, **local
        )
    if name.startswith("nic-uplink"):
        return LinkKind.NIC, indicator_row(
            spec.nic_gbps_per_switch / 8.0, LinkKind.NIC, same_zone=1.0, cost=0.2
        )
    if name.endswith("-nvswitch") or name.startswith("nvlink"):
        kind = LinkKind.NVSWITCH if name.endswith("-nvswitch") else LinkKind.NVLINK
        return kind, indicator_row(
            nvlink, kind, numa_affinity=1.0, nvlink_count=spec.nvlink.links_per_gpu, **local
        )
    shared = 1.0 if name.endswith("-switch") and name.startswith("gpu") else 0.0
    return LinkKind.PCIE, indicator_row(
        pcie, LinkKind.PCIE, numa_affinity=1.0, shared_switch=shared, **local
    )
