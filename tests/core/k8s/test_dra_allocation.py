"""kubesage's decision as a ResourceClaim allocation, on plain API dicts: devices from
the NVIDIA-driver-shaped slices, ring order, MIG devices and partitions, refusals."""

from __future__ import annotations

from typing import Any

import pytest

from kubesage.core.dra import api
from kubesage.core.k8s.dra_allocation import (
    DRA_DEVICES_ANNOTATION,
    AllocationRefusedError,
    ClaimNotReadyError,
    DeviceTakenError,
    devices_annotation,
    plan_allocation,
    released_status,
    wanted_devices,
)
from kubesage.core.k8s.dra_inventory import (
    InUse,
    NodeInventory,
    claim_names,
    in_use,
    node_inventory,
)
from kubesage.core.k8s.dra_selectors import (
    SelectorRuntimeError,
    UnsupportedSelectorError,
    matches,
)
from kubesage.core.k8s.translate import mig_shape
from kubesage.core.types import Placement, PodRequest
from tests.builders import pod as pod_request
from tests.fakes import dra_fixtures as fx

DGX = "dgx-h100-0"
PART = "h100-part-0"
MIG = "a100-mig-0"
CLASSES = {c["metadata"]["name"]: c for c in fx.device_classes()}
FREE = InUse(frozenset(), {})


def claimed_pod(*claims: str, uid: str = "pod-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": "trainer-0", "namespace": "default", "uid": uid},
        "spec": {
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": name} for i, name in enumerate(claims)
            ]
        },
    }


def stored(claim: dict[str, Any], uid: str) -> dict[str, Any]:
    return {**claim, "metadata": {**claim["metadata"], "uid": uid, "resourceVersion": "7"}}


def mig_claim(name: str, profile: str) -> dict[str, Any]:
    claim = fx.gpu_claim(name)
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    exactly["deviceClassName"] = api.MIG_DEVICE_CLASS
    exactly["selectors"] = [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}
    ]
    return claim


def whole(node: str, *gpus: int) -> Placement:
    return Placement(node=node, node_index=0, gpu_milli_by_index=tuple((g, 1000) for g in gpus))


def mig_request(profile: str) -> PodRequest:
    shape = mig_shape(profile)
    return PodRequest(
        name="p", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=shape.gpu_milli, mig=shape
    )


def plan(
    pod: dict[str, Any],
    claims: list[dict[str, Any]],
    inventory: NodeInventory,
    placement: Placement,
    request: PodRequest | None = None,
    taken: InUse = FREE,
) -> list[Any]:
    return plan_allocation(
        pod,
        {c["metadata"]["name"]: c for c in claims},
        wanted_devices(inventory, placement, request),
        node=inventory.node,
        classes=CLASSES,
        taken=taken,
        inventory=inventory,
    )


def test_the_dgx_slice_publishes_eight_gpus_by_index() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX), fx.dgx_h100_slice("other")], DGX)
    assert [(d.name, d.gpu_index) for d in inventory.devices] == [(f"gpu-{i}", i) for i in range(8)]
    assert not inventory.partitionable


def test_an_older_pool_generation_is_ignored() -> None:
    old = fx.dgx_h100_slice(DGX)
    new = fx.resource_slice(DGX, old["spec"]["devices"][:2])
    new["spec"]["pool"]["generation"] = 2
    assert len(node_inventory([old, new], DGX).devices) == 2


def test_a_gang_members_gpus_are_allocated_in_ring_order() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("ring", count=4), "claim-uid")
    (write,) = plan(claimed_pod("ring"), [claim], inventory, whole(DGX, 6, 7, 5, 4))
    allocation = write.status["allocation"]
    assert [r["device"] for r in allocation["devices"]["results"]] == [
        "gpu-6",
        "gpu-7",
        "gpu-5",
        "gpu-4",
    ]
    assert {(r["request"], r["driver"], r["pool"]) for r in allocation["devices"]["results"]} == {
        ("gpus", api.NVIDIA_GPU_DRIVER, DGX)
    }
    term = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert term == {"key": "metadata.name", "operator": "In", "values": [DGX]}
    assert write.status["reservedFor"] == [
        {"resource": "pods", "name": "trainer-0", "uid": "pod-uid"}
    ]
    assert write.allocates
    assert devices_annotation([write]) == {
        DRA_DEVICES_ANNOTATION: f"{DGX}/gpu-6,{DGX}/gpu-7,{DGX}/gpu-5,{DGX}/gpu-4"
    }


def test_devices_are_dealt_to_claims_in_pod_order() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    first = stored(fx.gpu_claim("a", count=1), "a-uid")
    second = stored(fx.gpu_claim("b", count=2), "b-uid")
    writes = plan(claimed_pod("a", "b"), [first, second], inventory, whole(DGX, 3, 1, 2))
    assert [w.devices for w in writes] == [
        [(api.NVIDIA_GPU_DRIVER, DGX, "gpu-3")],
        [(api.NVIDIA_GPU_DRIVER, DGX, "gpu-1"), (api.NVIDIA_GPU_DRIVER, DGX, "gpu-2")],
    ]


def test_a_static_mig_instance_is_chosen_by_gpu_profile_and_slot() -> None:
    inventory = node_inventory([fx.mig_node_slice(MIG)], MIG)
    claim = stored(mig_claim("mig", "2g.20gb"), "u")
    placement = Placement(node=MIG, node_index=0, gpu_milli_by_index=((0, 285),), mig_start=4)
    (write,) = plan(claimed_pod("mig"), [claim], inventory, placement, mig_request("2g.20gb"))
    assert write.devices == [(api.NVIDIA_GPU_DRIVER, MIG, fx.mig_device_name(0, "2g.20gb", 4))]
    missing = Placement(node=MIG, node_index=0, gpu_milli_by_index=((1, 285),), mig_start=4)
    with pytest.raises(AllocationRefusedError, match=r"no MIG device 2g\.20gb at memory slice 4"):
        wanted_devices(inventory, missing, mig_request("2g.20gb"))


def test_a_mig_placement_on_a_partitionable_node_allocates_the_partition() -> None:
    inventory = node_inventory([fx.partitionable_slice(PART)], PART)
    assert inventory.partitionable
    claim = stored(mig_claim("mig", "3g.40gb"), "u")
    placement = Placement(node=PART, node_index=0, gpu_milli_by_index=((1, 571),), mig_start=4)
    request = mig_request("3g.40gb")
    (write,) = plan(claimed_pod("mig"), [claim], inventory, placement, request)
    partition = fx.mig_device_name(1, "3g.40gb", 4)
    assert write.devices == [(api.NVIDIA_GPU_DRIVER, PART, partition)]

    # Another claim holds GPU 1 whole: every counter of its set is spent.
    other = {
        "metadata": {"uid": "other"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpus",
                            "driver": api.NVIDIA_GPU_DRIVER,
                            "pool": PART,
                            "device": "gpu-1",
                        }
                    ]
                }
            }
        },
    }
    taken = in_use([other], inventory, skip=set())
    with pytest.raises(DeviceTakenError, match=f"partition {PART}/{partition} needs"):
        plan(claimed_pod("mig"), [claim], inventory, placement, request, taken)
    # ... but an overlapping partition held elsewhere does not block a disjoint one.
    low = {
        "metadata": {"uid": "low"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": api.NVIDIA_GPU_DRIVER,
                            "pool": PART,
                            "device": fx.mig_device_name(1, "3g.40gb", 0),
                        }
                    ]
                }
            }
        },
    }
    assert plan(
        claimed_pod("mig"),
        [claim],
        inventory,
        placement,
        request,
        in_use([low], inventory, skip=set()),
    )


def test_a_device_another_claim_holds_is_refused() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("ring", count=2), "mine")
    taken = InUse(frozenset({(api.NVIDIA_GPU_DRIVER, DGX, "gpu-1")}), {})
    with pytest.raises(DeviceTakenError, match=f"{DGX}/gpu-1 is allocated to another claim"):
        plan(claimed_pod("ring"), [claim], inventory, whole(DGX, 0, 1), taken=taken)


@pytest.mark.parametrize(
    ("selector", "gpus", "error"),
    [
        (
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",
            (0,),
            "does not match",
        ),
        ("device.attributes['gpu.nvidia.com'].index >= 4", (3,), "does not match"),
        ("device.attributes['gpu.nvidia.com'].uuid.startsWith('GPU')", (0,), "CEL selector"),
        (None, (0, 1, 2), "kubesage placed 3 device"),
    ],
)
def test_claims_kubesage_cannot_honour_are_refused(
    selector: str | None, gpus: tuple[int, ...], error: str
) -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("c", count=1), "u")
    if selector:
        claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": selector}}
        ]
    with pytest.raises(AllocationRefusedError, match=error):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, *gpus))


def test_match_attribute_constraints_hold_for_kubesages_devices() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("c", count=2), "u")
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": api.PCIE_ROOT_ATTRIBUTE}]
    assert plan(claimed_pod("c"), [claim], inventory, whole(DGX, 1, 0))  # one root complex
    with pytest.raises(AllocationRefusedError, match="pcieRoot"):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, 0, 2))


def test_constraints_name_subrequests_and_distinct_attributes_are_checked() -> None:
    """A constraint naming ``<request>/<subrequest>`` covers that subrequest's devices;
    ``distinctAttribute`` asks for different values; a constraint of another kind is
    refused rather than skipped (kube-scheduler's allocator refuses it too)."""
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("c", count=2), "u")
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "gpus",
            "firstAvailable": [
                {"name": "big", "deviceClassName": api.GPU_DEVICE_CLASS, "count": 2}
            ],
        }
    ]
    claim["spec"]["devices"]["constraints"] = [
        {"matchAttribute": api.PCIE_ROOT_ATTRIBUTE, "requests": ["gpus/big"]}
    ]
    assert plan(claimed_pod("c"), [claim], inventory, whole(DGX, 1, 0))
    with pytest.raises(AllocationRefusedError, match="pcieRoot"):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, 0, 7))
    claim["spec"]["devices"]["constraints"] = [{"distinctAttribute": api.PCIE_ROOT_ATTRIBUTE}]
    assert plan(claimed_pod("c"), [claim], inventory, whole(DGX, 0, 7))
    with pytest.raises(AllocationRefusedError, match="distinct"):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, 1, 0))
    claim["spec"]["devices"]["constraints"] = [{"someFutureConstraint": "x"}]
    with pytest.raises(AllocationRefusedError, match="cannot evaluate"):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, 1, 0))


def test_first_available_takes_the_first_subrequest_kubesages_devices_satisfy() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    claim = stored(fx.gpu_claim("c"), "u")
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "mig", "deviceClassName": api.MIG_DEVICE_CLASS},
                {"name": "whole", "deviceClassName": api.GPU_DEVICE_CLASS},
            ],
        }
    ]
    (write,) = plan(claimed_pod("c"), [claim], inventory, whole(DGX, 5))
    assert write.status["allocation"]["devices"]["results"][0]["request"] == "gpu/whole"


def test_claims_already_reserved_or_allocated_elsewhere() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    result = {"request": "gpus", "driver": api.NVIDIA_GPU_DRIVER, "pool": DGX, "device": "gpu-0"}
    allocation = {
        "devices": {"results": [result]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [DGX]}]}
            ]
        },
    }
    mine = stored(fx.gpu_claim("c"), "u")
    mine["status"] = {
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid"}],
    }
    assert plan(claimed_pod("c"), [mine], inventory, whole(DGX)) == []  # left as it is
    shared = {
        **mine,
        "status": {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": "x", "uid": "x"}],
        },
    }
    (write,) = plan(claimed_pod("c"), [shared], inventory, whole(DGX))
    assert not write.allocates and [e["uid"] for e in write.status["reservedFor"]] == [
        "x",
        "pod-uid",
    ]
    with pytest.raises(AllocationRefusedError, match="allocated on another node"):
        plan(claimed_pod("c"), [shared], node_inventory([], "elsewhere"), whole("elsewhere"))


def test_a_template_claim_not_created_yet_is_not_ready() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}]},
    }
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    with pytest.raises(ClaimNotReadyError):
        plan(pod, [], inventory, whole(DGX, 0))
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x"}]}
    claim = stored(fx.gpu_claim("p-gpus-x"), "u2")
    assert plan(pod, [claim], inventory, whole(DGX, 0))


def test_a_status_entry_without_a_claim_name_needs_no_claim() -> None:
    """``resourceClaimStatuses`` naming no claim means none was needed (the API: the
    entry can be ignored); the pod's other claims are still read."""
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "resourceClaims": [
                {"name": "optional", "resourceClaimTemplateName": "t"},
                {"name": "gpus", "resourceClaimName": "mine"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "optional", "resourceClaimName": None}]},
    }
    assert claim_names(pod) == [("gpus", "mine")]
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    assert plan(pod, [stored(fx.gpu_claim("mine"), "u2")], inventory, whole(DGX, 0))


def test_released_status_drops_only_what_the_pod_holds() -> None:
    claim = {"status": {"allocation": {"devices": {}}, "reservedFor": [{"uid": "me"}]}}
    assert released_status(claim, "me", allocated=True) == {}
    claim["status"]["reservedFor"].append({"uid": "other"})
    assert released_status(claim, "me", allocated=True) == {
        "allocation": {"devices": {}},
        "reservedFor": [{"uid": "other"}],
    }


def test_a_pod_without_gpus_has_no_devices() -> None:
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    assert wanted_devices(inventory, whole(DGX), pod_request("cpu")) == []


DEVICE = fx.gpu_device("n", 3, fx.H100, "0000:61:00.0", "pci0000:01")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ('device.attributes["gpu.nvidia.com"].index == 3', True),
        ("device.attributes['gpu.nvidia.com'].index in [1, 2]", False),
        (
            "device.attributes['gpu.nvidia.com'].type == 'gpu' && "
            "device.attributes['gpu.nvidia.com'].index > 2",
            True,
        ),
        ("!(device.attributes['gpu.nvidia.com'].index == 3) || device.driver == 'x'", False),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:01'", True),
        # CEL's error absorption: false && error is false, true || error is true.
        ("device.driver == 'x' && device.attributes['gpu.nvidia.com'].missing == 1", False),
        ("device.attributes['gpu.nvidia.com'].missing == 1 || device.driver != 'x'", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0", False),
    ],
)
def test_the_selector_subset(expression: str, expected: bool) -> None:
    assert matches(expression, DEVICE, api.NVIDIA_GPU_DRIVER) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.nvidia.com'].uuid.matches('^GPU')",
        "has(device.attributes)",
        "device.allowMultipleAllocations == true",
        "1 +",
    ],
)
def test_selectors_outside_the_subset_are_unsupported(expression: str) -> None:
    with pytest.raises(UnsupportedSelectorError):
        matches(expression, DEVICE, api.NVIDIA_GPU_DRIVER)


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.nvidia.com'].missing == 1",
        "!(device.attributes['gpu.nvidia.com'].missing in [0, 1])",  # no silent "yes"
        "device.attributes['gpu.nvidia.com'].missing == 1 && device.driver != 'x'",
        "device.attributes['gpu.nvidia.com'].missing",
    ],
)
def test_a_missing_key_is_a_cel_runtime_error_not_a_match(expression: str) -> None:
    with pytest.raises(SelectorRuntimeError, match=r"has no key gpu\.nvidia\.com/missing"):
        matches(expression, DEVICE, api.NVIDIA_GPU_DRIVER)


def test_version_attributes_are_not_compared_as_strings() -> None:
    device = {
        **DEVICE,
        "attributes": {**DEVICE["attributes"], "driverVersion": {"version": "570.1.0"}},
    }
    with pytest.raises(UnsupportedSelectorError, match="semver"):
        matches(
            "device.attributes['gpu.nvidia.com'].driverVersion >= '10.0.0'",
            device,
            api.NVIDIA_GPU_DRIVER,
        )


def test_tainted_devices_are_left_to_kube_scheduler() -> None:
    tainted = fx.dgx_h100_slice(DGX)
    tainted["spec"]["devices"][2]["taints"] = [{"key": "ecc", "effect": "NoSchedule"}]
    inventory = node_inventory([tainted], DGX)
    claim = stored(fx.gpu_claim("c"), "u")
    with pytest.raises(AllocationRefusedError, match="gpu-2 has taints"):
        plan(claimed_pod("c"), [claim], inventory, whole(DGX, 2))
    # A taint of effect None only informs: the device is allocated.
    tainted["spec"]["devices"][2]["taints"] = [{"key": "ecc", "effect": "None"}]
    assert plan(claimed_pod("c"), [claim], node_inventory([tainted], DGX), whole(DGX, 2))


def test_a_claim_of_a_class_kubesage_does_not_allocate_is_refused_by_name() -> None:
    """A NIC (or compute-domain) claim beside the GPUs: kubesage does not deal its GPUs
    to it, and says which class and who can schedule the pod."""
    inventory = node_inventory([fx.dgx_h100_slice(DGX)], DGX)
    nic = stored(fx.gpu_claim("nic"), "u")
    nic["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "rdma.example.com"
    with pytest.raises(AllocationRefusedError, match=r"DeviceClass rdma\.example\.com is not one"):
        plan(claimed_pod("nic"), [nic], inventory, whole(DGX, 0))
