"""The twelve edge indicators of the DRTG and the formula that turns them into a weight.

Per edge: 0 bandwidth (GB/s, nominal or measured), 1 latency (µs), 2 jitter (µs),
3 NUMA affinity (1 = both ends on one NUMA node), 4 NVLink count, 5 shared PCIe
switch (1 = inside one switch), 6 same rack, 7 same zone, 8 observed traffic
(GB/s), 9 loss ratio (0–1), 10 congestion (0–1), 11 cost (relative, per GB).

The available bandwidth of an edge is what a new flow can expect::

    available = max(0, bandwidth · (1 − loss) − traffic) · (1 − congestion)

and its weight (higher is better) scales that by how close and cheap the link is::

    weight = available / (1 + latency/latency_ref + jitter/jitter_ref)
             · (1 + numa·a_numa + min(nvlink, 1)·a_nvlink + shared_switch·a_switch
                  + same_rack·a_rack + same_zone·a_zone) / (1 + cost·a_cost)

The coefficients are configurable (``IndicatorWeights``); the defaults make
latency matter at the scale of microseconds and favour locality mildly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from kubesage.core.arrays import FloatArray


class Indicator(IntEnum):
    BANDWIDTH_GBPS = 0
    LATENCY_US = 1
    JITTER_US = 2
    NUMA_AFFINITY = 3
    NVLINK_COUNT = 4
    SHARED_SWITCH = 5
    SAME_RACK = 6
    SAME_ZONE = 7
    TRAFFIC_GBPS = 8
    LOSS_RATIO = 9
    CONGESTION = 10
    COST = 11


INDICATOR_COUNT = len(Indicator)
DYNAMIC = (
    Indicator.BANDWIDTH_GBPS,
    Indicator.LATENCY_US,
    Indicator.JITTER_US,
    Indicator.TRAFFIC_GBPS,
    Indicator.LOSS_RATIO,
    Indicator.CONGESTION,
)
"""Indicators that telemetry updates; the others follow from the topology."""


@dataclass(frozen=True)
class IndicatorWeights:
    latency_ref_us: float = 10.0
    jitter_ref_us: float = 10.0
    numa: float = 0.1
    nvlink: float = 0.2
    shared_switch: float = 0.05
    same_rack: float = 0.05
    same_zone: float = 0.05
    cost: float = 1.0


def available_bandwidth(indicators: FloatArray) -> FloatArray:
    """GB/s a new flow can expect on each edge (rows of ``indicators``)."""
    raw = indicators[:, Indicator.BANDWIDTH_GBPS] * (1.0 - indicators[:, Indicator.LOSS_RATIO])
    spare = np.maximum(0.0, raw - indicators[:, Indicator.TRAFFIC_GBPS])
    result: FloatArray = spare * (1.0 - np.clip(indicators[:, Indicator.CONGESTION], 0.0, 1.0))
    return result


def edge_weight(indicators: FloatArray, coefficients: IndicatorWeights) -> FloatArray:
    """The combined weight of each edge (see the module docstring)."""
    c = coefficients
    delay = (
        1.0
        + indicators[:, Indicator.LATENCY_US] / c.latency_ref_us
        + indicators[:, Indicator.JITTER_US] / c.jitter_ref_us
    )
    locality = (
        1.0
        + c.numa * indicators[:, Indicator.NUMA_AFFINITY]
        + c.nvlink * np.minimum(indicators[:, Indicator.NVLINK_COUNT], 1.0)
        + c.shared_switch * indicators[:, Indicator.SHARED_SWITCH]
        + c.same_rack * indicators[:, Indicator.SAME_RACK]
        + c.same_zone * indicators[:, Indicator.SAME_ZONE]
    )
    weight: FloatArray = (
        available_bandwidth(indicators)
        / delay
        * locality
        / (1.0 + c.cost * indicators[:, Indicator.COST])
    )
    return weight
