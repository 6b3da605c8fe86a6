"""Discovery on unusual and malformed nodes: one-line InputErrors naming the node and
field, MIG 'single' nodes refused, racks and templates that never merge by name, and
the Topology document written in full."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubesage.core.config import load_config
from kubesage.core.dra.nodes import node_devices
from kubesage.core.errors import ConfigError, InputError
from kubesage.core.topology.discovery import (
    names_mig_device,
    topology_document,
    topology_from_nodes,
)
from kubesage.core.topology.spec import TOPOLOGY_KIND, NodeTemplate, NvlinkSpec, TopologySpec
from tests.core.topology.test_discovery import k8s_node
from tests.fakes import dra_fixtures as fx

CAPACITY = {"cpu": "96", "memory": "768Gi"}
MIG_SINGLE = {
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
    "nvidia.com/gpu.count": "56",
}


def racks_of(nodes: list[dict[str, Any]], **options: Any) -> dict[str, list[str]]:
    spec = topology_from_nodes(nodes, **options)
    return {rack.name: [member.name for member in rack.members] for rack in spec.racks}


def test_a_mig_single_strategy_node_is_refused_not_counted_as_whole_gpus() -> None:
    node = k8s_node("n1", MIG_SINGLE, {**CAPACITY, "nvidia.com/gpu": "56"})
    assert names_mig_device(MIG_SINGLE["nvidia.com/gpu.product"])
    assert not names_mig_device("NVIDIA-A100-SXM4-40GB")
    with pytest.raises(InputError, match=r"node 'n1': metadata\.labels\.nvidia\.com/gpu\.product"):
        topology_from_nodes([node])
    with pytest.raises(InputError, match=r"MIG devices, not GPUs.*ResourceSlices.*--templates"):
        topology_from_nodes([node])
    # A template label says what the node is: accepted.
    template = NodeTemplate(gpu_model="A100-40GB", gpus=8)
    labelled = k8s_node("n1", {**MIG_SINGLE, "kubesage.io/node-template": "a100"}, CAPACITY)
    assert topology_from_nodes([labelled], templates={"a100": template}).node_templates == {
        "a100": template
    }
    # The strategy label alone is no sign: GFD sets it on nodes whose GPUs are whole.
    t4 = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "Tesla-T4"}
    spec = topology_from_nodes([k8s_node("t4", {**t4, "nvidia.com/gpu.count": "1"}, CAPACITY)])
    assert [t.gpus for t in spec.node_templates.values()] == [1]


@pytest.mark.parametrize(
    ("labels", "capacity", "message"),
    [
        (
            {"nvidia.com/gpu.count": "-1", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            CAPACITY,
            r"node 'n1': metadata\.labels\.nvidia\.com/gpu\.count: GPU count -1 is outside 0\.\.64",
        ),
        (
            {"nvidia.com/gpu.count": "72", "nvidia.com/gpu.product": "NVIDIA-GB200"},
            CAPACITY,
            r"node 'n1': metadata\.labels\.nvidia\.com/gpu\.count: GPU count 72 is outside",
        ),
        (
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            {**CAPACITY, "nvidia.com/gpu": "65"},
            r"node 'n1': status\.capacity\.nvidia\.com/gpu: GPU count 65",
        ),
        ({}, {**CAPACITY, "cpu": {"n": 96}}, r"node 'n1': status\.capacity\.cpu: expected a qu"),
        ({}, {**CAPACITY, "memory": True}, r"node 'n1': status\.capacity\.memory: expected a"),
        ({"kubesage.io/rack": 7}, CAPACITY, r"node 'n1': metadata\.labels\.kubesage\.io/rack: "),
    ],
)
def test_bad_counts_and_fields_name_the_node_and_field(
    labels: dict[str, Any], capacity: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        topology_from_nodes([k8s_node("n1", labels, capacity)])


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"metadata": "x"}, r"node #0: metadata: expected a mapping, got str"),
        ("n1", r"node #0: node: expected a mapping, got str"),
        ({"metadata": {"name": 7}}, r"node #0: metadata\.name: expected a string, got int"),
        (
            {"metadata": {"name": "n1", "labels": ["a"]}},
            r"node 'n1': metadata\.labels: expected a mapping, got list",
        ),
        ({"metadata": {"name": "n1"}, "status": []}, r"node 'n1': status: expected a mapping"),
        (
            {"metadata": {"name": "n1"}, "status": {"capacity": "96"}},
            r"node 'n1': status\.capacity: expected a mapping, got str",
        ),
    ],
)
def test_nodes_not_of_the_node_shape_are_named(node: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        topology_from_nodes([node])


def test_numeric_quantities_are_read_as_kubernetes_quantities() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    node = k8s_node("n1", labels, {"cpu": 96, "memory": "768Gi", "nvidia.com/gpu": 8})  # type: ignore[dict-item]
    template = next(iter(topology_from_nodes([node]).node_templates.values()))
    assert (template.cpu_milli, template.gpus) == (96_000, 8)


def test_a_node_name_given_twice_is_refused() -> None:
    nodes = [k8s_node("n1", {}, CAPACITY), k8s_node("n1", {}, CAPACITY)]
    with pytest.raises(InputError, match=r"node 'n1': metadata\.name: appears twice \(nodes #0"):
        topology_from_nodes(nodes)


def test_rack_names_never_collide_or_merge_racks() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes = [
        k8s_node("a", {"kubesage.io/rack": "r1", zone: "z1"}, CAPACITY),
        k8s_node("b", {"kubesage.io/rack": "r1", zone: "z2"}, CAPACITY),
        k8s_node("c", {"kubesage.io/rack": "z1/r1", zone: "z1"}, CAPACITY),
    ]
    assert racks_of(nodes) == {"z1/r1": ["c"], "z1/r1#2": ["a"], "z2/r1": ["b"]}
    # A node without a rack label does not join a real rack named like its own.
    nodes = [k8s_node("a", {"kubesage.io/rack": "b-rack"}, CAPACITY), k8s_node("b", {}, CAPACITY)]
    assert racks_of(nodes) == {"b-rack": ["a"], "b-rack#2": ["b"]}


def test_an_empty_zone_label_means_the_default_zone() -> None:
    node = k8s_node("a", {"topology.kubernetes.io/zone": ""}, CAPACITY)
    assert [zone.name for zone in topology_from_nodes([node]).zones] == ["default"]


def test_a_derived_template_never_takes_the_name_of_a_given_one() -> None:
    nvswitch = NodeTemplate(
        gpu_model="H100-80GB", gpus=8, nvlink=NvlinkSpec(topology="nvswitch"), cpu_milli=96_000
    )
    name = "auto-h100-80gb-8g-96c-768gi"
    pcie = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-PCIe"}
    for order in (1, -1):
        nodes = [
            k8s_node("pcie-box", pcie, CAPACITY),
            k8s_node("dgx", {"kubesage.io/node-template": name}, CAPACITY),
        ][::order]
        spec = topology_from_nodes(nodes, templates={name: nvswitch})
        members = {m.name: m.template for rack in spec.racks for m in rack.members}
        assert members["dgx"] == name and spec.node_templates[name] == nvswitch
        assert spec.node_templates[members["pcie-box"]].nvlink.topology == "none"


def test_sparse_dra_gpu_indices_are_refused() -> None:
    obj = fx.dgx_h100_slice("dgx-0")
    obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["name"] != "gpu-3"]
    devices = node_devices([obj])
    with pytest.raises(InputError, match=r"node 'dgx-0': .* 0, 1, 2, 4, 5, 6, 7 but not 3"):
        topology_from_nodes([k8s_node("dgx-0", {}, CAPACITY)], devices=devices)


def test_the_document_writes_every_template_field() -> None:
    spec = topology_from_nodes(
        [
            k8s_node(
                "n1",
                {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                {**CAPACITY, "nvidia.com/gpu": "8"},
            )
        ]
    )
    document = topology_document(spec)
    assert (document["apiVersion"], document["kind"]) == ("kubesage.io/v1alpha1", TOPOLOGY_KIND)
    template = next(iter(document["spec"]["node_templates"].values()))
    assert (template["gpus"], template["sockets"], template["gpus_per_switch"]) == (8, 2, 2)
    assert TopologySpec.model_validate(yaml.safe_load(yaml.safe_dump(document))["spec"]) == spec


def test_a_topology_without_racks_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(
        "apiVersion: kubesage.io/v1alpha1\nkind: Topology\nspec:\n"
        "  node_templates: {t: {gpus: 8, gpu_model: H100-80GB}}\n  zones: []\n  racks: []\n",
        "utf-8",
    )
    with pytest.raises(ConfigError, match=r"field 'spec\.racks': a topology needs at least one"):
        load_config(path, TopologySpec, kind=TOPOLOGY_KIND)
