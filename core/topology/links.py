"""Link kinds of the topology graph and their nominal speeds.

Bandwidths are per direction, in GB/s, as vendors quote them: NVLink 3 (A100)
and NVLink 4 (H100/H200) carry 25 GB/s per link (12 and 18 links per GPU:
300 and 450 GB/s); PCIe x16 gives about 32 GB/s at Gen4 and 64 GB/s at Gen5;
a NIC's Gb/s divide by 8. Latencies are typical one-way figures in microseconds.
Measured traffic, loss and congestion adjust these through the DRTG's edge
indicators; these are the starting points.
"""

from __future__ import annotations

from enum import IntEnum

NVLINK_GBPS_PER_LINK = {3: 25.0, 4: 25.0, 5: 50.0}
"""Per-direction GB/s of one NVLink, by NVLink generation."""
PCIE_X16_GBPS = {3: 16.0, 4: 32.0, 5: 64.0}
"""Per-direction GB/s of a PCIe x16 link, by PCIe generation."""
CROSS_SOCKET_GBPS = 40.0
"""Socket-to-socket interconnect (UPI / Infinity Fabric), per direction."""


class LinkKind(IntEnum):
    """What a graph edge is; the value indexes per-kind tables."""

    CONTAINS = 0
    """Tree edge with no data path of its own (zone → rack, node → socket)."""
    NVLINK = 1
    NVSWITCH = 2
    PCIE = 3
    CROSS_SOCKET = 4
    NIC = 5
    RACK_UPLINK = 6
    ZONE_UPLINK = 7


DEFAULT_LATENCY_US: dict[LinkKind, float] = {
    LinkKind.CONTAINS: 0.0,
    LinkKind.NVLINK: 1.0,
    LinkKind.NVSWITCH: 1.5,
    LinkKind.PCIE: 2.0,
    LinkKind.CROSS_SOCKET: 3.0,
    LinkKind.NIC: 5.0,
    LinkKind.RACK_UPLINK: 8.0,
    LinkKind.ZONE_UPLINK: 50.0,
}
