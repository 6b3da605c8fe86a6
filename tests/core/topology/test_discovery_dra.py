"""Topology discovery with ResourceSlices: the slices' GPUs win over the node labels,
their PCIe roots shape the template, their identities reach the DRTG's GPU vertices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubesage.core.dra.nodes import node_devices
from kubesage.core.errors import InputError
from kubesage.core.topology.discovery import split_kubectl_list, topology_from_nodes
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.spec import NodeTemplate
from tests.core.cli.test_topology_cli import kubesage
from tests.core.topology.test_discovery import k8s_node
from tests.fakes import dra_fixtures as fx

LABELLED_A100 = {
    "kubesage.io/rack": "r1",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "4",
}
CAPACITY = {"cpu": "224", "memory": "2063Gi"}


def listed(*items: dict[str, Any]) -> list[dict[str, Any]]:
    """As ``kubectl get nodes,resourceslices -o json`` lists them (kinds on every item)."""
    return [{"kind": item.get("kind", "Node"), **item} for item in items]


def test_slices_win_over_labels_and_shape_the_template() -> None:
    nodes = [
        k8s_node("dgx-0", LABELLED_A100, CAPACITY),  # stale labels: the slices say H100 × 8
        k8s_node("mig-0", {"kubesage.io/rack": "r1"}, CAPACITY),
        k8s_node("cpu-0", {"kubesage.io/rack": "r1"}, {"cpu": "32", "memory": "128Gi"}),
    ]
    devices = node_devices([fx.dgx_h100_slice("dgx-0"), fx.mig_node_slice("mig-0")])
    spec = topology_from_nodes(nodes, devices=devices)
    members = {m.name: m for rack in spec.racks for m in rack.members}
    dgx = spec.node_templates[members["dgx-0"].template]
    assert (dgx.gpu_model, dgx.gpus, dgx.sockets, dgx.gpus_per_switch) == ("H100-80GB", 8, 2, 2)
    mig = spec.node_templates[members["mig-0"].template]
    assert (mig.gpu_model, mig.gpus) == ("A100-80GB", 2)
    assert members["cpu-0"].gpus == []
    assert [g.uuid for g in members["mig-0"].gpus] == [fx.gpu_uuid("mig-0", i) for i in (0, 1)]
    assert {g.device for g in members["mig-0"].gpus} == {None}  # MIG mode: not whole GPUs

    graph = DRTG(spec)
    gpu = graph.gpu_by_uuid(fx.gpu_uuid("dgx-0", 6))
    assert graph.gpu_vertex(gpu) == "dgx-0/gpu6"
    identity = graph.gpu_identity[gpu]
    assert identity is not None
    assert (identity.device, identity.pcie_root) == ("gpu-6", "pci0000:03")
    with pytest.raises(InputError, match="no GPU of the topology has UUID"):
        graph.gpu_by_uuid("GPU-nope")


def test_pcie_roots_that_do_not_group_evenly_keep_the_default_layout() -> None:
    obj = fx.dgx_h100_slice("dgx-0")
    for index, device in enumerate(obj["spec"]["devices"]):  # roots a a a b b b c c
        device["attributes"]["resource.kubernetes.io/pcieRoot"] = {
            "string": "abc"[min(index // 3, 2)]
        }
    spec = topology_from_nodes([k8s_node("dgx-0", {}, CAPACITY)], devices=node_devices([obj]))
    assert next(iter(spec.node_templates.values())).gpus_per_switch == 2
    solo = fx.dgx_h100_slice("dgx-0")
    for index, device in enumerate(solo["spec"]["devices"]):  # one root per GPU
        device["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": f"pci{index}"}
    spec = topology_from_nodes([k8s_node("dgx-0", {}, CAPACITY)], devices=node_devices([solo]))
    assert next(iter(spec.node_templates.values())).gpus_per_switch == 1


def test_a_template_label_must_agree_with_the_slices() -> None:
    node = k8s_node("dgx-0", {"kubesage.io/node-template": "four"}, CAPACITY)
    with pytest.raises(InputError, match="template four has 4 GPUs but the node's ResourceSlices"):
        topology_from_nodes(
            [node],
            templates={"four": NodeTemplate(gpu_model="H100-80GB", gpus=4)},
            devices=node_devices([fx.dgx_h100_slice("dgx-0")]),
        )


def test_a_kubectl_list_is_split_into_nodes_and_slices() -> None:
    nodes, slices = split_kubectl_list(
        listed(k8s_node("dgx-0", {}, CAPACITY), fx.dgx_h100_slice("dgx-0"))
    )
    assert [n["metadata"]["name"] for n in nodes] == ["dgx-0"]
    assert len(slices) == 1
    with pytest.raises(InputError, match="expected Nodes and ResourceSlices, got a Pod"):
        split_kubectl_list([{"kind": "Pod"}])


def test_discover_reads_slices_from_the_list_or_a_file(tmp_path: Path) -> None:
    node = k8s_node("dgx-0", LABELLED_A100, CAPACITY)
    mixed = json.dumps({"kind": "List", "items": listed(node, fx.dgx_h100_slice("dgx-0"))})
    out = tmp_path / "topology.yaml"
    done = kubesage("discover", "-", "-o", str(out), stdin=mixed)
    assert done.returncode == 0, done.stderr
    assert "1 node(s), 1 with ResourceSlices" in done.stderr
    graph = DRTG.from_yaml(out)
    assert graph.num_gpus == 8 and graph.gpu_identity[7] is not None

    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(json.dumps({"kind": "NodeList", "items": [node]}), "utf-8")
    slices_file = tmp_path / "slices.json"
    bad = fx.dgx_h100_slice("dgx-0")
    bad["spec"]["devices"][4]["capacity"]["memory"] = {"value": "a lot"}
    slices_file.write_text(json.dumps({"kind": "ResourceSliceList", "items": [bad]}), "utf-8")
    refused = kubesage("discover", str(nodes_file), "--resource-slices", str(slices_file))
    assert refused.returncode == 2
    message = " ".join(refused.stderr.split())  # the console wraps long lines
    assert "ResourceSlice 'dgx-0-gpu.nvidia.com-abcde': spec.devices.4.capacity" in message
