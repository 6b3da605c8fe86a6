"""ResourceSlices shaped like NVIDIA's driver publishes them → the devices of each node."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubesage.core.dra import api
from kubesage.core.dra.nodes import node_devices, readable_node_devices
from kubesage.core.dra.slices import SliceError, read_slice
from tests.fakes import dra_fixtures as fx

Obj = dict[str, Any]


def test_a_dgx_h100_publishes_eight_gpus_with_their_identity() -> None:
    devices = node_devices([fx.dgx_h100_slice("dgx-0")])["dgx-0"]
    assert devices.gpu_count == 8
    assert devices.product == "NVIDIA H100 80GB HBM3"
    assert devices.gpu_memory_mib == 81559
    assert not devices.mig_enabled and not devices.partitionable
    assert devices.pcie_roots() == tuple(f"pci0000:{i // 2:02x}" for i in range(8))
    third = devices.gpu(3)
    assert third is not None
    assert (third.name, third.uuid, third.pcie_bus_id) == (
        "gpu-3",
        fx.gpu_uuid("dgx-0", 3),
        "0000:61:00.0",
    )


def test_a_mig_node_publishes_its_instances_on_their_slices() -> None:
    devices = node_devices([fx.mig_node_slice("mig-0")])["mig-0"]
    assert devices.gpu_count == 2 and devices.mig_enabled
    assert devices.product == "NVIDIA A100-SXM4-80GB"
    assert [(m.parent_index, m.profile, m.start, m.memory_slices) for m in devices.migs] == [
        (0, "3g.40gb", 0, 4),
        (0, "2g.20gb", 4, 2),
        (0, "1g.10gb", 6, 1),
        (1, "4g.40gb", 0, 4),
        (1, "3g.40gb", 4, 4),
    ]
    assert all(m.uuid and m.uuid.startswith("MIG-") and not m.partition for m in devices.migs)


def test_partitionable_gpus_share_counters_with_their_partitions() -> None:
    devices = node_devices([fx.partitionable_slice("part-0", gpus=2)])["part-0"]
    assert devices.gpu_count == 2 and devices.partitionable and not devices.mig_enabled
    assert [gpu.counter_set for gpu in devices.gpus] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    counters = devices.counter_sets["gpu-0-counter-set"]
    assert counters["memory-slice-7"] == 1 and counters["multiprocessors"] == 132
    assert counters["memory"] == 81559 * 2**20
    three_g = [m for m in devices.migs if m.parent_index == 1 and m.profile == "3g.40gb"]
    assert [(m.start, m.memory_slices, m.partition, m.uuid) for m in three_g] == [
        (0, 4, True, None),
        (4, 4, True, None),
    ]


def test_the_parent_comes_from_index_name_or_uuid() -> None:
    obj = fx.mig_node_slice("mig-0")
    device = obj["spec"]["devices"][3]  # GPU 1's 4g.40gb
    device["name"] = "mig-device-a"  # not the driver's canonical name
    with pytest.raises(SliceError, match=r"spec\.devices\.3: MIG device 'mig-device-a'"):
        read_slice(obj)  # no parentIndex, no canonical name, no published parent GPU
    device["attributes"]["parentIndex"] = {"int": 1}
    assert read_slice(obj).migs[3].parent_index == 1


def test_the_gpu_index_falls_back_to_minor_then_to_the_name() -> None:
    obj = fx.dgx_h100_slice("dgx-0")
    devices = obj["spec"]["devices"]
    del devices[0]["attributes"]["index"]  # minor 0 remains
    del devices[1]["attributes"]["index"], devices[1]["attributes"]["minor"]  # gpu-1
    devices[2]["attributes"]["gpu.nvidia.com/index"] = devices[2]["attributes"].pop("index")
    assert [gpu.index for gpu in read_slice(obj).gpus] == list(range(8))
    del devices[1]["attributes"]["uuid"]
    devices[1]["name"] = "first-gpu"
    with pytest.raises(SliceError, match="has no 'index' or 'minor' attribute"):
        read_slice(obj)


def broken(change: str) -> Obj:
    obj = fx.dgx_h100_slice("dgx-0")
    spec, device = obj["spec"], obj["spec"]["devices"][2]
    if change == "two values":
        device["attributes"]["index"] = {"int": 2, "string": "2"}
    elif change == "string index":
        device["attributes"]["index"] = {"string": "2"}
    elif change == "no pool":
        del spec["pool"]
    elif change == "bad memory":
        device["capacity"]["memory"] = {"value": "lots"}
    elif change == "not a list":
        spec["devices"] = {"gpu-0": {}}
    return obj


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("two values", "spec.devices.2.attributes.index: exactly one of int, bool"),
        ("string index", "spec.devices.2.attributes.index: expected a non-negative int"),
        ("no pool", "spec.pool: Field required"),
        ("bad memory", "spec.devices.2.capacity.memory.value: cannot read quantity 'lots'"),
        ("not a list", "spec.devices: Input should be a valid list"),
    ],
)
def test_a_bad_slice_names_itself_and_the_field(change: str, message: str) -> None:
    with pytest.raises(SliceError) as caught:
        node_devices([broken(change)])
    name = fx.dgx_h100_slice("dgx-0")["metadata"]["name"]
    assert str(caught.value).startswith(f"ResourceSlice '{name}': ")
    assert message in str(caught.value)


def test_a_node_whose_gpus_conflict_is_refused() -> None:
    first = fx.dgx_h100_slice("dgx-0")
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "dgx-0-second"
    first["spec"]["pool"]["resourceSliceCount"] = second["spec"]["pool"]["resourceSliceCount"] = 2
    with pytest.raises(SliceError, match="GPU index 0 of node 'dgx-0' is published twice"):
        node_devices([first, second])
    mixed = fx.dgx_h100_slice("dgx-0")
    mixed["spec"]["devices"][5]["attributes"]["productName"] = {"string": "NVIDIA H200"}
    with pytest.raises(SliceError, match="several products"):
        node_devices([mixed])


def test_only_the_newest_pool_generation_of_the_driver_on_a_node_counts() -> None:
    old = fx.dgx_h100_slice("dgx-0")
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "dgx-0-gen2"
    new["spec"]["pool"]["generation"] = 2
    new["spec"]["devices"] = new["spec"]["devices"][:4]  # GPUs 4..7 went away
    other_driver = fx.dgx_h100_slice("dgx-1")
    other_driver["spec"]["driver"] = "gpu.example.com"
    network = fx.dgx_h100_slice("fabric")
    del network["spec"]["nodeName"]
    network["spec"]["allNodes"] = True
    devices = node_devices([old, new, other_driver, network])
    assert list(devices) == ["dgx-0"]
    assert devices["dgx-0"].gpu_count == 4
    assert node_devices([other_driver], "gpu.example.com")["dgx-1"].gpu_count == 8


def test_the_tolerant_reader_leaves_out_only_the_broken_node() -> None:
    devices, problems = readable_node_devices(
        [fx.mig_node_slice("mig-0"), broken("string index"), {"metadata": {}}]
    )
    assert list(devices) == ["mig-0"]
    assert len(problems) == 2
    assert "ResourceSlice '#2': spec: Field required" in str(problems[1])


def test_slices_that_do_not_count_cannot_hide_a_nodes_gpus() -> None:
    """Beside the node's NVIDIA slice: another driver's slice kubesage could not read
    (a CPU driver's "500m" counter, an int ``type``), and an older generation of the same
    pool that is malformed. Neither counts, so neither is read, and the GPUs stay."""
    current = fx.dgx_h100_slice("dgx-0")
    current["spec"]["pool"]["generation"] = 2
    stale = copy.deepcopy(fx.dgx_h100_slice("dgx-0"))
    stale["metadata"]["name"] = "dgx-0-gen1"
    stale["spec"]["devices"][0]["attributes"]["index"] = {"string": "zero"}
    cpus = {
        "metadata": {"name": "dgx-0-cpus"},
        "spec": {
            "driver": "dra.cpu.example.com",
            "nodeName": "dgx-0",
            "pool": {"name": "dgx-0", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "cpus", "counters": {"cpu": {"value": "500m"}}}],
            "devices": [{"name": "x", "attributes": {"type": {"int": 3}}}],
        },
    }
    devices, problems = readable_node_devices([current, stale, cpus])
    assert problems == []
    assert devices["dgx-0"].gpu_count == 8


def test_cel_attribute_keys_are_qualified_by_the_driver() -> None:
    assert api.attribute_key("uuid") == "gpu.nvidia.com/uuid"
    assert api.attribute_key(api.PCIE_ROOT_ATTRIBUTE) == "resource.kubernetes.io/pcieRoot"
