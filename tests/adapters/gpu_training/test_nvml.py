"""The NVML collector against FakeNvml, and without any driver (this machine has none)."""

from __future__ import annotations

import pytest

from kubesage.adapters.gpu_training.fake_nvml import FakeGpu, FakeNvml
from kubesage.adapters.gpu_training.nvml import NvmlCollector, node_template, nvlink_topology
from kubesage.core.errors import InputError

NVSWITCH_BUS = "00000000:C0:00.0"


def dgx_like() -> FakeNvml:
    gpus = [
        FakeGpu(memory_used_mib=1_000 * i, utilization_pct=10 * i, nvlink_peers=[NVSWITCH_BUS] * 18)
        for i in range(8)
    ]
    return FakeNvml(gpus)


def nvlink_pairs() -> FakeNvml:
    gpus = [
        FakeGpu(name="NVIDIA A100 80GB PCIe", mig=None, nvlink_peers=[FakeNvml.bus_id(i ^ 1)] * 12)
        for i in range(4)
    ]
    level = [[0 if i == j else 10 if i // 2 == j // 2 else 50 for j in range(4)] for i in range(4)]
    return FakeNvml(gpus, topology_level=level)


def test_inventory_memory_utilisation_and_mig() -> None:
    fake = dgx_like()
    snapshot = NvmlCollector(fake).collect()
    assert snapshot.available and len(snapshot.gpus) == 8
    third = snapshot.gpus[3]
    assert (third.memory_total_mib, third.memory_used_mib, third.utilization_pct) == (
        81_559,
        3_000,
        30,
    )
    assert third.mig_enabled is False and third.uuid.startswith("GPU-")
    assert fake.initialised == 0  # shut down again


def test_nvswitch_fabric_is_recognised() -> None:
    snapshot = NvmlCollector(dgx_like()).collect()
    assert snapshot.nvswitch_links == (18,) * 8
    assert nvlink_topology(snapshot) == "nvswitch"


def test_nvlink_pairs_and_pcie_levels() -> None:
    snapshot = NvmlCollector(nvlink_pairs()).collect()
    assert snapshot.nvlinks[0] == (0, 12, 0, 0)
    assert snapshot.pcie_level[0][1] == 10 and snapshot.pcie_level[0][3] == 50
    assert snapshot.gpus[0].mig_enabled is None  # MIG not supported on this model
    assert nvlink_topology(snapshot) == "pairs"


def test_a_link_to_a_gpu_this_pod_cannot_see_is_not_an_nvswitch() -> None:
    # The pod sees GPU 0 of an NVLink pair; its peer is another pod's. NVML says the far
    # end is a GPU, so the node is not taken for an NVSwitch one.
    hidden = FakeNvml.bus_id(1)
    fake = FakeNvml([FakeGpu(nvlink_peers=[hidden] * 12)], hidden_gpu_bus_ids=frozenset({hidden}))
    snapshot = NvmlCollector(fake).collect()
    assert snapshot.nvswitch_links == (0,) and snapshot.nvlinks == ((0,),)
    assert "GPU 0: 12 NVLink(s) to GPUs not visible here" in snapshot.notes


def test_an_nvlink_query_nvml_refuses_is_a_note_not_no_nvlink() -> None:
    gpus = [FakeGpu(nvlink_peers=[NVSWITCH_BUS] * 18) for _ in range(2)]
    gpus[1].nvlink_error = FakeNvml.NVML_ERROR_NO_PERMISSION
    snapshot = NvmlCollector(FakeNvml(gpus)).collect()
    assert snapshot.nvswitch_links == (18, 0)
    assert any(n.startswith("GPU 1: NVLink 0 unreadable") for n in snapshot.notes), snapshot.notes


def test_without_a_driver_the_collector_degrades_and_counts() -> None:
    collector = NvmlCollector(FakeNvml(driver_loaded=False))
    snapshot = collector.collect()
    assert not snapshot.available
    assert "Shared Library Not Found" in snapshot.reason
    assert collector.failures == 1


def test_real_pynvml_on_this_machine_reports_no_driver_instead_of_raising() -> None:
    # No NVIDIA driver exists on these machines: the real module must take the same path.
    snapshot = NvmlCollector().collect()
    if snapshot.available:  # a GPU machine: then the inventory must be consistent
        assert len(snapshot.gpus) == len(snapshot.nvlinks)
    else:
        assert snapshot.reason


def test_a_dgx_like_node_becomes_an_nvswitch_template() -> None:
    snapshot = NvmlCollector(dgx_like()).collect()
    template = node_template(snapshot, cpu_milli=224_000, memory_mib=2_097_152)
    assert (template.gpu_model, template.gpus) == ("H100-80GB", 8)
    assert (template.nvlink.topology, template.nvlink.links_per_gpu) == ("nvswitch", 18)
    assert template.nvlink.generation == 4
    # The fake reports every pair under one PCIe switch: one socket, one switch of 8.
    assert (template.sockets, template.gpus_per_switch) == (1, 8)


def test_nvlink_pairs_across_two_sockets_become_a_pairs_template() -> None:
    snapshot = NvmlCollector(nvlink_pairs()).collect()
    template = node_template(snapshot, cpu_milli=64_000, memory_mib=524_288)
    assert (template.gpu_model, template.gpus, template.sockets) == ("A100-80GB", 4, 2)
    assert template.gpus_per_switch == 2
    assert (template.nvlink.topology, template.nvlink.links_per_gpu) == ("pairs", 12)
    assert template.nvlink.generation == 3


def test_interleaved_sockets_fall_back_to_one_socket() -> None:
    gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3") for _ in range(4)]
    level = [[0 if i == j else 40 if i % 2 == j % 2 else 50 for j in range(4)] for i in range(4)]
    snapshot = NvmlCollector(FakeNvml(gpus, topology_level=level)).collect()
    template = node_template(snapshot, cpu_milli=1_000, memory_mib=1_024)
    assert (template.sockets, template.gpus_per_switch, template.nvlink.topology) == (1, 1, "none")


def test_no_template_without_nvml() -> None:
    snapshot = NvmlCollector(FakeNvml(driver_loaded=False)).collect()
    with pytest.raises(InputError, match=r"no NVML topology .* Shared Library Not Found"):
        node_template(snapshot, cpu_milli=1, memory_mib=1)


def test_a_mig_gpu_costs_only_its_utilisation_not_the_snapshot() -> None:
    fake = FakeNvml([FakeGpu(mig=True), FakeGpu(utilization_pct=40)])
    snapshot = NvmlCollector(fake).collect()
    assert snapshot.available, snapshot.reason
    assert [g.utilization_pct for g in snapshot.gpus] == [None, 40]
    assert [g.mig_enabled for g in snapshot.gpus] == [True, False]
    assert snapshot.notes == ("GPU 0: utilisation not read: Not Supported",)
    assert node_template(snapshot, cpu_milli=1_000, memory_mib=1_024).gpus == 2


def test_a_pending_mig_mode_and_a_refused_read_are_noted() -> None:
    fake = FakeNvml(
        [
            FakeGpu(mig=False, mig_pending=True),
            FakeGpu(mig=False, mig_mode_error=FakeNvml.NVML_ERROR_NO_PERMISSION),
        ]
    )
    snapshot = NvmlCollector(fake).collect()
    assert [g.mig_enabled for g in snapshot.gpus] == [False, None]
    assert snapshot.notes == (
        "GPU 0: MIG mode enabled after the next GPU reset",
        "GPU 1: MIG mode not read: Insufficient Permissions",
    )


def test_fake_errors_are_pynvml_shaped() -> None:
    pynvml = pytest.importorskip("pynvml")
    for code in (2, 3, 4, 12):
        real, fake = pynvml.NVMLError(code), FakeNvml.NVMLError(code)
        assert (type(fake).__name__, fake.value, str(fake)) == (
            type(real).__name__,
            real.value,
            str(real),
        )
    assert isinstance(FakeNvml.NVMLError_NoPermission(), FakeNvml.NVMLError)
    assert FakeNvml.NVML_NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
