"""A DRTG from Node objects (kubectl JSON shape): zones, racks, templates from labels."""

from __future__ import annotations

from typing import Any

import pytest

from kubesage.core.errors import InputError
from kubesage.core.topology.discovery import (
    gpu_model_from_product,
    memory_mib,
    topology_from_nodes,
)
from kubesage.core.topology.graph import DRTG, Level
from kubesage.core.topology.spec import NodeTemplate, NvlinkSpec

DGX = NodeTemplate(
    gpu_model="H100-80GB",
    gpus=8,
    nvlink=NvlinkSpec(topology="nvswitch", generation=4, links_per_gpu=18),
    nic_gbps_per_switch=400,
)


def k8s_node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": capacity},
    }


GPU_CAPACITY = {"cpu": "96", "memory": "786432Ki", "nvidia.com/gpu": "8"}
NODES = [
    k8s_node(
        "dgx-a",
        {
            "topology.kubernetes.io/zone": "z1",
            "kubesage.io/rack": "r1",
            "kubesage.io/node-template": "dgx",
        },
        GPU_CAPACITY,
    ),
    k8s_node(
        "pcie-b",
        {
            "topology.kubernetes.io/zone": "z1",
            "kubesage.io/rack": "r1",
            "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB",
            "nvidia.com/gpu.count": "4",
        },
        {"cpu": "64000m", "memory": "512Gi", "nvidia.com/gpu": "4"},
    ),
    k8s_node(
        "dgx-c",
        {"topology.kubernetes.io/zone": "z2", "kubesage.io/node-template": "dgx"},
        GPU_CAPACITY,
    ),
    k8s_node("cpu-d", {"topology.kubernetes.io/zone": "z2"}, {"cpu": "32", "memory": "128Gi"}),
]


def test_zones_racks_and_templates_come_from_labels() -> None:
    spec = topology_from_nodes(NODES, templates={"dgx": DGX})
    graph = DRTG(spec)
    assert sorted(graph.node_names) == ["cpu-d", "dgx-a", "dgx-c", "pcie-b"]
    assert graph.zone_names == ("z1", "z2")
    # dgx-a and pcie-b share rack r1; unlabelled nodes get racks of their own.
    assert graph.rack_names == ("r1", "cpu-d-rack", "dgx-c-rack")
    derived = spec.node_templates["auto-a100-80gb-4g-64c-512gi"]
    assert (derived.gpu_model, derived.gpus, derived.nvlink.topology) == ("A100-80GB", 4, "none")
    assert derived.memory_mib == 512 * 1024
    assert graph.num_gpus == 8 + 4 + 8

    def gpu(node: str, local: int) -> int:
        return int(graph.node_first_gpu[graph.node_index[node]]) + local

    assert graph.locality(gpu("dgx-a", 0), gpu("dgx-a", 7)) == Level.NVLINK
    assert graph.locality(gpu("pcie-b", 0), gpu("pcie-b", 1)) == Level.SAME_SWITCH
    assert graph.locality(gpu("dgx-a", 0), gpu("pcie-b", 0)) == Level.SAME_RACK
    assert graph.locality(gpu("dgx-a", 0), gpu("dgx-c", 0)) == Level.CROSS_ZONE
    nvswitch = graph.gpu_bandwidth(gpu("dgx-a", 0), gpu("dgx-a", 7))
    pcie = graph.gpu_bandwidth(gpu("pcie-b", 0), gpu("pcie-b", 3))
    assert nvswitch > 10 * pcie


def test_a_rack_label_reused_in_two_zones_names_two_racks() -> None:
    nodes = [
        k8s_node("a", {"topology.kubernetes.io/zone": "z1", "rack": "r"}, {"cpu": "8"}),
        k8s_node("b", {"topology.kubernetes.io/zone": "z2", "rack": "r"}, {"cpu": "8"}),
    ]
    spec = topology_from_nodes(nodes, rack_label="rack")
    assert [r.name for r in spec.racks] == ["z1/r", "z2/r"]


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            k8s_node("x", {"kubesage.io/node-template": "nope"}, {}),
            "node 'x': label kubesage.io/node-template=nope names no known",
        ),
        (k8s_node("y", {}, {"nvidia.com/gpu": "2"}), "node 'y': has 2 GPUs but no"),
        (k8s_node("z", {}, {"cpu": "lots"}), "node 'z': cannot read CPU quantity 'lots'"),
        ({"metadata": {}}, "node #0: metadata.name is missing"),
    ],
)
def test_bad_nodes_are_named(node: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        topology_from_nodes([node])


def test_quantities_and_products() -> None:
    assert memory_mib("786432Ki", "n") == 768
    assert memory_mib("8G", "n") == int(8e9 / 2**20)
    assert gpu_model_from_product("NVIDIA-H100-80GB-HBM3") == "H100-80GB"
    assert gpu_model_from_product("NVIDIA-H200") == "H200-141GB"
    assert gpu_model_from_product("Tesla-T4") == "Tesla-T4"


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-GH200-480GB", "H100-96GB"),  # GH200's GPU is the H100 96GB, not an H200
        ("NVIDIA GH200 480GB", "H100-96GB"),
        ("NVIDIA GH200 144G HBM3e", "GH200-144GB"),
        ("NVIDIA H200 NVL", "H200-141GB"),
        ("NVIDIA H100 PCIe", "H100-80GB"),  # NVML's name of the 80 GB PCIe card
        ("NVIDIA-H100-PCIe", "H100-80GB"),
        ("NVIDIA H100 NVL", "H100-94GB"),
        ("NVIDIA-A30", "A30-24GB"),
        ("NVIDIA-A100-PCIE-40GB", "A100-40GB"),
        # Export parts: the catalogue NVIDIA's default mig-parted config gives them.
        ("NVIDIA-H800", "H100-80GB"),
        ("NVIDIA H800 PCIe", "H100-80GB"),
        ("NVIDIA-H800-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H800 NVL", "H100-94GB"),
        ("NVIDIA-A800-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A800 80GB PCIe", "A100-80GB"),
        ("NVIDIA-A800-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-H20", "H100-96GB"),
        ("NVIDIA H20", "H100-96GB"),
        ("NVIDIA-H20-141GB", "NVIDIA-H20-141GB"),  # another size: no catalogue, as given
        ("NVIDIA-H200", "H200-141GB"),  # not an H20
    ],
)
def test_gpu_products_map_to_their_own_model(product: str, model: str) -> None:
    assert gpu_model_from_product(product) == model
