"""The DRTG: structure from YAML, bandwidth queries, locality, sliding-window updates."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.errors import ConfigError, InputError
from kubesage.core.topology.graph import DRTG, Level
from kubesage.core.topology.indicators import Indicator, IndicatorWeights, edge_weight

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "topologies"


@pytest.fixture(scope="module")
def pairs() -> DRTG:
    return DRTG.from_yaml(CONFIGS / "pcie-nvlink-pairs.yaml")


@pytest.fixture(scope="module")
def dgx() -> DRTG:
    return DRTG.from_yaml(CONFIGS / "dgx-h100-pod.yaml")


def test_structure(pairs: DRTG, dgx: DRTG) -> None:
    assert (pairs.num_nodes, pairs.num_gpus) == (24, 192)
    assert (dgx.num_nodes, dgx.num_gpus) == (16, 128)
    specs = dgx.node_specs()
    assert specs[0].gpu_model == "H100-80GB" and specs[0].rack == "rack-a1"
    assert specs[-1].zone == "zone-b"
    assert list(dgx.node_gpus(1)) == list(range(8, 16))


def test_intra_node_bandwidth_follows_the_links(pairs: DRTG, dgx: DRTG) -> None:
    matrix = pairs.intra_node_bandwidth(0)
    assert matrix[0, 1] == 12 * 25.0  # NVLink 3 bridge, 12 links
    assert matrix[0, 2] == 32.0  # PCIe Gen4 through the socket
    assert matrix[0, 7] == 32.0  # across sockets: min(PCIe, 40 GB/s interconnect)
    full = dgx.intra_node_bandwidth(0)
    off_diagonal = full[~np.eye(8, dtype=bool)]
    assert set(off_diagonal.tolist()) == {18 * 25.0}  # NVSwitch: every pair at NVLink 4


def test_cross_node_bandwidth_is_the_narrowest_way_out(pairs: DRTG) -> None:
    assert pairs.gpu_bandwidth(0, 8) == pytest.approx(100 / 8)  # 100 Gb/s NIC
    assert pairs.egress_bandwidth(3).tolist() == [12.5] * 8


@pytest.mark.parametrize(
    ("a", "b", "level"),
    [
        (0, 0, Level.SAME_GPU),
        (0, 1, Level.NVLINK),
        (0, 3, Level.SAME_SOCKET),
        (0, 5, Level.SAME_NODE),
        (0, 9, Level.SAME_RACK),
        (0, 70, Level.SAME_ZONE),
    ],
)
def test_locality(pairs: DRTG, a: int, b: int, level: Level) -> None:
    assert pairs.locality(a, b) == level
    assert pairs.locality(b, a) == level


def test_locality_across_zones(dgx: DRTG) -> None:
    assert dgx.locality(0, 127) == Level.CROSS_ZONE


def test_ring_bus_bandwidth(pairs: DRTG, dgx: DRTG) -> None:
    # Pairs bridged 0-1, 2-3: the PCIe hops (32 GB/s) are the slowest, and a ring's
    # busbw (nccl-tests': algbw · 2(n−1)/n) is its slowest hop.
    assert pairs.ring_bus_bandwidth([0, 1, 3, 2]) == pytest.approx(32.0)
    assert dgx.ring_bus_bandwidth(list(range(8))) == pytest.approx(450.0)  # the slowest hop
    # One GPU per node uses one NIC each (50 GB/s); two full nodes use four rails each.
    spread = [0, 8]
    assert dgx.ring_bus_bandwidth(spread) == pytest.approx(50.0)
    assert dgx.ring_bus_bandwidth(list(range(16))) == pytest.approx(4 * 50)


def test_telemetry_updates_only_touched_edges_and_expire(pairs: DRTG) -> None:
    drtg = DRTG(pairs.spec)
    nic = drtg.node_edge(0, "nic-uplink0")
    before = drtg.weight.copy()
    drtg.observe([nic], Indicator.TRAFFIC_GBPS, 10.0, timestamp_s=100.0)
    changed = np.flatnonzero(drtg.weight != before)
    assert changed.tolist() == [nic]
    assert drtg.gpu_bandwidth(0, 8) == pytest.approx(2.5)  # 12.5 − 10 left
    drtg.observe([nic], Indicator.TRAFFIC_GBPS, 0.0, timestamp_s=101.0)
    assert drtg.gpu_bandwidth(0, 8) == pytest.approx(12.5 - 5.0)  # window mean of 10 and 0
    drtg.observe([nic + 1], Indicator.CONGESTION, 0.0, timestamp_s=107.0)  # 10 s later
    assert drtg.gpu_bandwidth(0, 8) == pytest.approx(12.5)  # both samples left the window


def test_static_indicators_cannot_be_observed(pairs: DRTG) -> None:
    with pytest.raises(InputError, match="from the topology"):
        DRTG(pairs.spec).observe([0], Indicator.SAME_RACK, 1.0, timestamp_s=0.0)
    with pytest.raises(InputError, match="edge ids"):
        DRTG(pairs.spec).observe([10**9], Indicator.TRAFFIC_GBPS, 1.0, timestamp_s=0.0)


def test_weight_formula_on_hand_values() -> None:
    row = np.zeros((1, 12))
    row[0, Indicator.BANDWIDTH_GBPS] = 100.0
    row[0, Indicator.TRAFFIC_GBPS] = 20.0
    row[0, Indicator.CONGESTION] = 0.5
    row[0, Indicator.LATENCY_US] = 10.0
    row[0, Indicator.SAME_RACK] = 1.0
    weights = IndicatorWeights(same_rack=0.1, latency_ref_us=10.0)
    # available = (100 − 20)·0.5 = 40; /(1 + 1) · (1 + 0.1) = 22
    assert edge_weight(row, weights)[0] == pytest.approx(22.0)


@pytest.mark.parametrize(
    ("gpus", "zone", "message"),
    [
        (4, "nowhere", r"field 'spec': rack 'r' names unknown zone 'nowhere'"),
        (6, "z", r"field 'spec\.node_templates\.t': 3 GPUs per socket do not fill switches of 2"),
    ],
)
def test_bad_topology_names_file_and_field(
    tmp_path: Path, gpus: int, zone: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: kubesage.io/v1alpha1\nkind: Topology\nspec:\n"
        f"  node_templates: {{t: {{gpu_model: X, gpus: {gpus}, sockets: 2, gpus_per_switch: 2}}}}\n"
        "  zones: [{name: z, uplink_gbps: 1}]\n"
        f"  racks: [{{name: r, zone: {zone}, uplink_gbps: 1, template: t, nodes: 1}}]\n"
    )
    with pytest.raises(ConfigError, match=r"bad\.yaml: " + message):
        DRTG.from_yaml(path)


def test_every_vertex_is_connected_and_exports_to_pyg(pairs: DRTG) -> None:
    touched = set(pairs.edge_source.tolist()) | set(pairs.edge_target.tolist())
    assert touched == set(range(len(pairs.vertex_names)))
    nvlink = pairs.node_edge(0, "nvlink2")
    ends = (
        pairs.vertex_names[pairs.edge_source[nvlink]],
        pairs.vertex_names[pairs.edge_target[nvlink]],
    )
    assert ends == ("rack-1-node-00/gpu2", "rack-1-node-00/gpu3")
    data = pairs.to_pyg()
    assert tuple(data.edge_index.shape) == (2, 2 * pairs.num_edges)  # type: ignore[attr-defined]
    assert tuple(data.edge_attr.shape) == (2 * pairs.num_edges, 12)  # type: ignore[attr-defined]
    assert data.num_nodes == len(pairs.vertex_names)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (
            "[{index: 0, uuid: GPU-a, device: gpu-0}, {index: 1, uuid: GPU-b, device: gpu-0}]",
            "node 'n1': a device name appears twice",
        ),
        (
            "[{index: 0, uuid: GPU-a}, {index: 1, uuid: GPU-a}]",
            "GPU UUID 'GPU-a' of node 'n1' GPU 1 is also node 'n1' GPU 0's",
        ),
    ],
)
def test_a_gpu_identity_names_one_gpu(tmp_path: Path, gpus: str, message: str) -> None:
    """A DRA claim the launcher writes selects GPUs by UUID or device name: one that two
    GPUs share would make a claim no allocation can satisfy."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: kubesage.io/v1alpha1\nkind: Topology\nspec:\n"
        "  node_templates: {t: {gpu_model: X, gpus: 2, sockets: 1, gpus_per_switch: 2}}\n"
        "  zones: [{name: z, uplink_gbps: 1}]\n"
        "  racks: [{name: r, zone: z, uplink_gbps: 1,\n"
        f"           members: [{{name: n1, template: t, gpus: {gpus}}}]}}]\n"
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        DRTG.from_yaml(path)
