"""The shuffle cost model, rack-aware placement and its baselines on small topologies."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.adapters.spark.placement import (
    ExecutorShape,
    place_executors,
    random_placement,
    spread_placement,
)
from kubesage.adapters.spark.shuffle_model import ShuffleProfile, estimate, rack_locality
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.spec import NodeTemplate, RackSpec, TopologySpec, ZoneSpec
from kubesage.core.types import PodRequest

GB = 10**9


def topology(racks_per_zone: int = 2, nodes: int = 4) -> DRTG:
    return DRTG(
        TopologySpec(
            node_templates={"cpu": NodeTemplate(gpus=0, sockets=1, cpu_milli=32_000)},
            zones=[ZoneSpec(name=z, uplink_gbps=100) for z in ("za", "zb")],
            racks=[
                RackSpec(name=f"{z}-r{i}", zone=z, uplink_gbps=40, template="cpu", nodes=nodes)
                for z in ("za", "zb")
                for i in range(racks_per_zone)
            ],
        )
    )


def test_cross_rack_bytes_follow_the_rack_shares() -> None:
    drtg = topology()
    profile = ShuffleProfile((6 * GB, 2 * GB), input_bytes=4 * GB)
    rack0 = list(np.flatnonzero(drtg.node_rack == 0))
    rack1 = list(np.flatnonzero(drtg.node_rack == 1))
    one_rack = estimate(drtg, rack0, profile)
    assert one_rack.cross_rack_shuffle_bytes == 0
    assert one_rack.cross_node_bytes == pytest.approx(8 * GB * (1 - 1 / 4))
    assert one_rack.cross_rack_input_bytes == 4 * GB  # no locality hints: all input remote
    halves = estimate(drtg, rack0[:2] + rack1[:2], profile)
    assert halves.cross_rack_shuffle_bytes == pytest.approx(8 * GB / 2)
    assert halves.cross_zone_bytes == 0  # both racks in zone za
    local = rack_locality(drtg, {"za-r0": 0.5, "zb": 0.5})
    assert local.tolist() == [0.5, 0, 0.25, 0.25]
    assert estimate(drtg, rack0, profile, local).cross_rack_input_bytes == pytest.approx(2 * GB)


def test_locality_hints_are_checked() -> None:
    drtg = topology()
    with pytest.raises(InputError, match="'rack-9', which is neither a rack nor a zone"):
        rack_locality(drtg, {"rack-9": 0.5})
    with pytest.raises(InputError, match=r"add up to 1\.200"):
        rack_locality(drtg, {"za-r0": 0.6, "za-r1": 0.6})
    with pytest.raises(InputError, match=r"within 0\.\.1"):
        rack_locality(drtg, {"za-r0": -0.1})


def loaded(drtg: DRTG, busy_cores: dict[int, int]) -> ClusterState:
    state = ClusterState(drtg.node_specs())
    for node, cores in busy_cores.items():
        pod = PodRequest(name=f"bg-{node}", cpu_milli=cores * 1000, memory_mib=1)
        state.allocate(pod, state.placement(node, [], pod))
    return state


def test_ours_keeps_a_fitting_job_in_one_rack_and_beats_both_baselines() -> None:
    drtg = topology()
    state = loaded(drtg, {})
    shape = ExecutorShape(executors=8, cores=8, memory_mib=8_192)
    profile = ShuffleProfile((10 * GB,))
    ours = place_executors(drtg, state, shape, profile)
    assert len(ours.executors_per_rack(drtg)) == 1
    assert ours.estimate.cross_rack_bytes == 0
    assert max(np.bincount(ours.nodes)) <= 2  # balance limit: 25 % of 8 executors
    spread = spread_placement(drtg, state, shape, profile)
    assert len(set(spread.nodes)) == 8  # the default scheduler spreads over nodes
    assert spread.estimate.cross_rack_bytes > 0.5 * 10 * GB
    assert random_placement(drtg, state, shape, profile, seed=1).estimate.cross_rack_bytes > 0
    assert any("one rack" in line for line in ours.reasons)


def test_a_job_larger_than_a_rack_spills_into_the_same_zone() -> None:
    drtg = topology()
    # Every node has room for 2 executors of 8 cores: 8 per rack, fewer than 12.
    state = loaded(drtg, dict.fromkeys(range(drtg.num_nodes), 16))
    shape = ExecutorShape(executors=12, cores=8, memory_mib=8_192)
    ours = place_executors(drtg, state, shape, ShuffleProfile((GB,)), max_node_share=1.0)
    per_rack = ours.executors_per_rack(drtg)
    assert sum(per_rack.values()) == 12
    assert sorted(per_rack.values()) == [4, 8]
    assert set(per_rack) == {"za-r0", "za-r1"} and ours.estimate.cross_zone_bytes == 0
    assert any("no single rack has room" in line for line in ours.reasons)


def test_input_locality_pulls_executors_to_the_rack_holding_the_input() -> None:
    drtg = topology()
    state = loaded(drtg, {})
    shape = ExecutorShape(executors=4, cores=8, memory_mib=8_192)
    local = rack_locality(drtg, {"zb-r1": 0.9})
    ours = place_executors(drtg, state, shape, ShuffleProfile((GB,), 50 * GB), local)
    assert ours.executors_per_rack(drtg) == {"zb-r1": 4}


def test_capacity_and_shape_errors_are_named() -> None:
    drtg = topology(racks_per_zone=1, nodes=1)
    state = loaded(drtg, {})
    with pytest.raises(
        CapacityError, match=r"9 executors of 8 cores .* room for 4 with at most 2 per node"
    ):
        place_executors(drtg, state, ExecutorShape(9, 8, 1_024), ShuffleProfile((GB,)))
    with pytest.raises(InputError, match="must be positive"):
        ExecutorShape(0, 1, 1)
