"""The scenario's cluster: sizes, names in rack order, the examples' uplink figures."""

from __future__ import annotations

import pytest

from kubesage.core.errors import InputError
from kubesage.core.scenario.cluster import MAX_GPU_NODES, scenario_topology
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG


def test_default_size_is_the_dgx_h100_pod_example() -> None:
    drtg = scenario_topology(16)
    example = DRTG.from_yaml(example_topology("dgx-h100-pod"))
    assert (drtg.num_nodes, drtg.num_gpus) == (16, 128)
    assert [r.uplink_gbps for r in drtg.spec.racks] == [r.uplink_gbps for r in example.spec.racks]
    assert [z.uplink_gbps for z in drtg.spec.zones] == [z.uplink_gbps for z in example.spec.zones]
    assert drtg.spec.node_templates == example.spec.node_templates
    state = ClusterState(drtg.node_specs())
    assert state.num_nodes == 16
    assert {spec.gpu_model for spec in drtg.node_specs()} == {"H100-80GB"}


def test_partial_rack_and_zone_keep_the_oversubscription() -> None:
    drtg = scenario_topology(10, nodes_per_rack=4, racks_per_zone=2)
    racks = drtg.spec.racks
    assert [len(r.node_entries()) for r in racks] == [4, 4, 2]
    assert [r.zone for r in racks] == ["zone-00", "zone-00", "zone-01"]
    # 3.2 Tb/s for 4 nodes in the example: 800 Gb/s a node; 1.6 Tb/s for 2 racks a zone.
    assert [r.uplink_gbps for r in racks] == [3200, 3200, 1600]
    assert [z.uplink_gbps for z in drtg.spec.zones] == [1600, 800]


def test_h200_template_takes_its_examples_figures() -> None:
    drtg = scenario_topology(8, template="dgx-h200")
    assert {spec.gpu_model for spec in drtg.node_specs()} == {"H200-141GB"}
    assert [r.uplink_gbps for r in drtg.spec.racks] == [1600, 1600]
    assert [z.uplink_gbps for z in drtg.spec.zones] == [3200]


def test_node_names_sort_in_rack_order() -> None:
    drtg = scenario_topology(45, nodes_per_rack=4, racks_per_zone=3)
    names = list(drtg.node_names)
    assert sorted(names) == names
    assert list(drtg.node_rack) == sorted(drtg.node_rack)
    assert len(drtg.rack_names) == 12 and names[-1] == "rack-11-node-00"


@pytest.mark.parametrize(
    ("gpu_nodes", "options"),
    [
        (0, {}),
        (-3, {}),
        (True, {}),
        (2.5, {}),
        (MAX_GPU_NODES + 1, {}),
        (4, {"nodes_per_rack": 0}),
        (4, {"racks_per_zone": -1}),
        (4, {"template": "dgx-a100"}),
    ],
)
def test_bad_sizes_are_input_errors(gpu_nodes: int, options: dict[str, object]) -> None:
    with pytest.raises(InputError):
        scenario_topology(gpu_nodes, **options)  # type: ignore[arg-type]
