"""Expected shuffle and input traffic of a Spark job for an executor placement, over the DRTG.

Tasks spread over executors in proportion to their cores (equal cores here), so
the share of a shuffle's map output produced in rack ``r`` and the share of its
reduce tasks running there are both ``W_r`` (the rack's share of executors). An
all-to-all shuffle of ``B`` bytes then sends

    cross-node  = B · (1 − Σ_n W_n²)
    cross-rack  = B · (1 − Σ_r W_r²)
    cross-zone  = B · (1 − Σ_z W_z²)

Input: with locality hints (the fraction of the input stored in each rack or
zone; a zone's fraction spread evenly over its racks; what is left is remote to
every rack), a task in rack ``r`` reads rack-local input with probability
``f_r``, so ``cross-rack input = I · (1 − Σ_r f_r W_r)``. Spark's delay
scheduling does better than this uniform assumption when tasks can wait, so the
figure is an upper bound for input and exact in expectation for shuffles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.adapters.spark.eventlog import SparkApplication
from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.topology.graph import DRTG


@dataclass(frozen=True)
class ShuffleProfile:
    """The traffic shape of a job: bytes per shuffle edge and input bytes."""

    shuffle_bytes: tuple[int, ...]
    input_bytes: int = 0

    @classmethod
    def from_application(cls, app: SparkApplication, scale: float = 1.0) -> ShuffleProfile:
        """From an event log; ``scale`` multiplies every byte count (a larger input)."""
        if scale <= 0:
            raise InputError(f"scale must be positive, got {scale}")
        edges = tuple(round(edge.bytes * scale) for edge in app.shuffle_edges())
        # Every stage's reads from storage: a stage with shuffle parents may scan a table
        # too (a union of a scan and an aggregation, a join with a bucketed table).
        read = sum(s.input_bytes for s in app.stages.values())
        return cls(edges, round(read * scale))

    @property
    def total_shuffle_bytes(self) -> int:
        return sum(self.shuffle_bytes)


@dataclass(frozen=True)
class TrafficEstimate:
    shuffle_bytes: float
    cross_node_bytes: float
    cross_rack_shuffle_bytes: float
    cross_zone_bytes: float
    cross_rack_input_bytes: float

    @property
    def cross_rack_bytes(self) -> float:
        """Shuffle plus input bytes crossing a rack uplink."""
        return self.cross_rack_shuffle_bytes + self.cross_rack_input_bytes


def rack_locality(drtg: DRTG, hints: Mapping[str, float] | None) -> FloatArray:
    """Fraction of the input in each rack, from rack or zone hints (validated)."""
    local = np.zeros(len(drtg.rack_names))
    if not hints:
        return local
    racks = {name: i for i, name in enumerate(drtg.rack_names)}
    zones = {name: i for i, name in enumerate(drtg.zone_names)}
    for name, fraction in hints.items():
        if not 0 <= fraction <= 1:
            raise InputError(f"input locality for '{name}' must be within 0..1, got {fraction}")
        if name in racks:
            local[racks[name]] += fraction
        elif name in zones:
            members = np.flatnonzero(drtg.rack_zone == zones[name])
            local[members] += fraction / len(members)
        else:
            raise InputError(
                f"input locality names '{name}', which is neither a rack nor a zone "
                f"(racks: {', '.join(drtg.rack_names)}; zones: {', '.join(drtg.zone_names)})"
            )
    if local.sum() > 1 + 1e-9:
        raise InputError(f"input locality fractions add up to {local.sum():.3f}, more than 1")
    return local


def estimate(
    drtg: DRTG,
    executor_nodes: Sequence[int],
    profile: ShuffleProfile,
    input_locality: FloatArray | None = None,
) -> TrafficEstimate:
    """Expected traffic when executors run on ``executor_nodes`` (DRTG node indices)."""
    if not executor_nodes:
        raise InputError("a placement needs at least one executor")
    nodes = np.asarray(executor_nodes, dtype=np.int64)
    count = len(nodes)

    def same_share(groups: IntArray) -> float:
        shares = np.bincount(groups) / count
        return float((shares**2).sum())

    racks = drtg.node_rack[nodes]
    total = float(profile.total_shuffle_bytes)
    rack_shares = np.bincount(racks, minlength=len(drtg.rack_names)) / count
    local = input_locality if input_locality is not None else np.zeros(len(drtg.rack_names))
    return TrafficEstimate(
        shuffle_bytes=total,
        cross_node_bytes=total * (1 - same_share(nodes)),
        cross_rack_shuffle_bytes=total * (1 - same_share(racks)),
        cross_zone_bytes=total * (1 - same_share(drtg.node_zone[nodes])),
        cross_rack_input_bytes=profile.input_bytes * (1 - float(local @ rack_shares)),
    )
