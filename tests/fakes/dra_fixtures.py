"""ResourceSlices and DeviceClasses shaped like NVIDIA's DRA driver for GPUs publishes them.

Source: the kubelet plugin of NVIDIA's ``k8s-dra-driver-gpu`` (``cmd/gpu-kubelet-plugin``:
``deviceinfo.go`` ``GetDevice``, ``mig.go`` ``CommonAttributesMig`` and canonical MIG
names, ``partitions.go`` for KEP-4815 partitionable devices), against
``resource.k8s.io/v1`` (Kubernetes 1.34), and the DeviceClasses its Helm chart installs.
What the driver publishes, and these fixtures with it:

- driver ``gpu.nvidia.com``; one pool per node, named after the node, one slice
  (``resourceSliceCount: 1``), ``spec.nodeName`` set.
- A GPU device ``gpu-<minor>``: attributes ``type: gpu``, ``uuid``, ``productName``,
  ``brand``, ``architecture``, ``cudaComputeCapability`` / ``driverVersion`` /
  ``cudaDriverVersion`` (``version`` values, semver-normalised: ``570.124.06`` →
  ``570.124.6``), ``pcieBusID``, ``resource.kubernetes.io/pcieRoot``, and the
  ``index`` and ``minor`` ints of the v25.3 releases; capacity ``memory`` (bytes).
- A GPU in MIG mode publishes its MIG devices instead of itself, named
  ``gpu-<minor>-mig-<profile without dots>-<GI profile id>-<placement start>``, with
  ``type: mig``, ``uuid``, ``parentUUID``, ``profile`` and the parent's product
  attributes; capacity ``memory``, ``multiprocessors`` and ``memorySlice<i>`` (value 1)
  for each memory slice the instance holds.
- Partitionable devices (dynamic MIG): ``spec.sharedCounters`` with one counter set
  ``gpu-<minor>-counter-set`` per GPU (``multiprocessors``, ``memory``,
  ``memory-slice-<i>``); the full GPU consumes every counter, each possible MIG
  placement consumes its share and its memory slices. MIG devices here have no
  ``uuid``: they do not exist until allocated.

Numbers are the real ones for the products named (H100 80GB HBM3: 81559 MiB, 132 SMs;
A100-SXM4-80GB: 81920 MiB, 108 SMs; MIG memory sizes rounded); UUIDs are made up, stable per node.
"""

from __future__ import annotations

import uuid
from typing import Any

from kubesage.core.dra import api

Obj = dict[str, Any]

DRIVER_VERSION = "570.124.6"
CUDA_DRIVER_VERSION = "12.8.0"

H100 = {
    "productName": "NVIDIA H100 80GB HBM3",
    "architecture": "Hopper",
    "cudaComputeCapability": "9.0.0",
    "memory_mib": 81559,
    "multiprocessors": 132,
}
A100 = {
    "productName": "NVIDIA A100-SXM4-80GB",
    "architecture": "Ampere",
    "cudaComputeCapability": "8.0.0",
    "memory_mib": 81920,
    "multiprocessors": 108,
}

DGX_H100_BUS_IDS = (
    "0000:1b:00.0",
    "0000:43:00.0",
    "0000:52:00.0",
    "0000:61:00.0",
    "0000:9d:00.0",
    "0000:c3:00.0",
    "0000:d1:00.0",
    "0000:df:00.0",
)
"""PCIe addresses of a DGX H100's eight GPUs."""

# MIG profiles of 80 GB A100/H100 GPUs: GI profile id, memory slices, memory MiB,
# multiprocessors (A100, H100) and allowed placement starts (NVIDIA MIG User Guide).
MIG_PROFILES: dict[str, tuple[int, int, int, tuple[int, int], tuple[int, ...]]] = {
    "1g.10gb": (19, 1, 9856, (14, 16), (0, 1, 2, 3, 4, 5, 6)),
    "1g.20gb": (15, 2, 19968, (14, 16), (0, 2, 4, 6)),
    "2g.20gb": (14, 2, 19968, (28, 32), (0, 2, 4)),
    "3g.40gb": (9, 4, 40192, (42, 60), (0, 4)),
    "4g.40gb": (5, 4, 40192, (56, 64), (0,)),
    "7g.80gb": (0, 8, 80896, (98, 132), (0,)),
}


def gpu_uuid(node: str, minor: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/gpu-{minor}"))


def mig_uuid(node: str, name: str) -> str:
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{name}"))


def _string(value: str) -> Obj:
    return {"string": value}


def _version(value: str) -> Obj:
    return {"version": value}


def _product_attributes(product: dict[str, Any]) -> Obj:
    return {
        api.ATTR_PRODUCT_NAME: _string(product["productName"]),
        api.ATTR_BRAND: _string("Nvidia"),
        api.ATTR_ARCHITECTURE: _string(product["architecture"]),
        api.ATTR_CUDA_COMPUTE_CAPABILITY: _version(product["cudaComputeCapability"]),
        api.ATTR_DRIVER_VERSION: _version(DRIVER_VERSION),
        api.ATTR_CUDA_DRIVER_VERSION: _version(CUDA_DRIVER_VERSION),
    }


def gpu_device(
    node: str, minor: int, product: dict[str, Any], bus_id: str, pcie_root: str | None
) -> Obj:
    """A whole GPU as ``GpuInfo.GetDevice`` publishes it."""
    attributes = {
        api.ATTR_TYPE: _string(api.DEVICE_TYPE_GPU),
        api.ATTR_UUID: _string(gpu_uuid(node, minor)),
        api.ATTR_INDEX: {"int": minor},
        api.ATTR_MINOR: {"int": minor},
        **_product_attributes(product),
        api.ATTR_PCIE_BUS_ID: _string(bus_id),
    }
    if pcie_root is not None:
        attributes[api.PCIE_ROOT_ATTRIBUTE] = _string(pcie_root)
    return {
        "name": f"gpu-{minor}",
        "attributes": attributes,
        "capacity": {api.CAPACITY_MEMORY: {"value": f"{product['memory_mib']}Mi"}},
    }


def mig_device_name(minor: int, profile: str, start: int) -> str:
    """``gpu-<minor>-mig-<profile without dots>-<GI profile id>-<start>`` (mig.go)."""
    return f"gpu-{minor}-mig-{profile.replace('.', '')}-{MIG_PROFILES[profile][0]}-{start}"


def _mig_attributes(node: str, minor: int, profile: str, product: dict[str, Any]) -> Obj:
    return {
        api.ATTR_TYPE: _string(api.DEVICE_TYPE_MIG),
        api.ATTR_PARENT_UUID: _string(gpu_uuid(node, minor)),
        api.ATTR_PROFILE: _string(profile),
        **_product_attributes(product),
    }


def static_mig_device(
    node: str, minor: int, profile: str, start: int, product: dict[str, Any] = A100
) -> Obj:
    """An existing MIG instance of a GPU in MIG mode (``MigDeviceInfo.GetDevice``)."""
    _, slices, memory_mib, sms, starts = MIG_PROFILES[profile]
    assert start in starts, f"{profile} cannot start at slice {start}"
    name = mig_device_name(minor, profile, start)
    capacity: Obj = {
        api.CAPACITY_MEMORY: {"value": f"{memory_mib}Mi"},
        api.CAPACITY_MULTIPROCESSORS: {"value": str(sms[product is H100])},
    }
    for index in range(start, start + slices):
        capacity[f"{api.MEMORY_SLICE_CAPACITY}{index}"] = {"value": "1"}
    attributes = _mig_attributes(node, minor, profile, product)
    attributes[api.ATTR_UUID] = _string(mig_uuid(node, name))
    return {"name": name, "attributes": attributes, "capacity": capacity}


def resource_slice(node: str, devices: list[Obj], **spec: Any) -> Obj:
    """The driver's one slice for ``node`` (pool named after the node)."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND_RESOURCE_SLICE,
        "metadata": {"name": f"{node}-{api.NVIDIA_GPU_DRIVER}-abcde"},
        "spec": {
            "driver": api.NVIDIA_GPU_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
            **spec,
        },
    }


def dgx_h100_slice(node: str = "dgx-h100-0") -> Obj:
    """A DGX H100: eight H100 80GB HBM3 (NVLink through NVSwitch), two GPUs per PCIe
    root complex (``pci0000:00`` .. ``pci0000:03``)."""
    devices = [
        gpu_device(node, minor, H100, DGX_H100_BUS_IDS[minor], f"pci0000:{minor // 2:02x}")
        for minor in range(8)
    ]
    return resource_slice(node, devices)


MIG_NODE_LAYOUT: dict[int, tuple[tuple[str, int], ...]] = {
    0: (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)),
    1: (("4g.40gb", 0), ("3g.40gb", 4)),
}
"""The MIG node's instances: GPU minor → (profile, placement start)."""


def mig_node_slice(node: str = "a100-mig-0") -> Obj:
    """Two A100-SXM4-80GB in MIG mode, with the instances of :data:`MIG_NODE_LAYOUT`."""
    devices = [
        static_mig_device(node, minor, profile, start)
        for minor, instances in MIG_NODE_LAYOUT.items()
        for profile, start in instances
    ]
    return resource_slice(node, devices)


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def partitionable_slice(node: str = "h100-part-0", gpus: int = 2) -> Obj:
    """``gpus`` H100 80GB published as partitionable devices: each GPU whole, and every
    placement of every MIG profile, all drawing on the GPU's counter set."""
    shared = []
    devices = []
    for minor in range(gpus):
        counters = {
            api.CAPACITY_MULTIPROCESSORS: {"value": str(H100["multiprocessors"])},
            api.CAPACITY_MEMORY: {"value": f"{H100['memory_mib']}Mi"},
            **{f"{api.MEMORY_SLICE_COUNTER}{i}": {"value": "1"} for i in range(8)},
        }
        shared.append({"name": counter_set_name(minor), "counters": counters})
        whole = gpu_device(node, minor, H100, DGX_H100_BUS_IDS[minor], f"pci0000:{minor:02x}")
        whole["consumesCounters"] = [{"counterSet": counter_set_name(minor), "counters": counters}]
        devices.append(whole)
        for profile, (_, slices, memory_mib, sms, starts) in MIG_PROFILES.items():
            for start in starts:
                consumed = {
                    api.CAPACITY_MULTIPROCESSORS: {"value": str(sms[1])},
                    api.CAPACITY_MEMORY: {"value": f"{memory_mib}Mi"},
                    **{
                        f"{api.MEMORY_SLICE_COUNTER}{i}": {"value": "1"}
                        for i in range(start, start + slices)
                    },
                }
                devices.append(
                    {
                        "name": mig_device_name(minor, profile, start),
                        "attributes": _mig_attributes(node, minor, profile, H100),
                        "capacity": {
                            api.CAPACITY_MEMORY: {"value": f"{memory_mib}Mi"},
                            api.CAPACITY_MULTIPROCESSORS: {"value": str(sms[1])},
                        },
                        "consumesCounters": [
                            {"counterSet": counter_set_name(minor), "counters": consumed}
                        ],
                    }
                )
    return resource_slice(node, devices, sharedCounters=shared)


def device_classes() -> list[Obj]:
    """The DeviceClasses the driver's Helm chart installs: whole GPUs and MIG devices."""

    def device_class(name: str, device_type: str) -> Obj:
        expression = (
            f"device.driver == '{api.NVIDIA_GPU_DRIVER}' && "
            f"device.attributes['{api.NVIDIA_GPU_DRIVER}'].type == '{device_type}'"
        )
        return {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND_DEVICE_CLASS,
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    return [
        device_class(api.GPU_DEVICE_CLASS, api.DEVICE_TYPE_GPU),
        device_class(api.MIG_DEVICE_CLASS, api.DEVICE_TYPE_MIG),
    ]


def gpu_claim(name: str, count: int = 1, namespace: str = "default") -> Obj:
    """A ResourceClaim for ``count`` whole GPUs (one request, ``gpus``)."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND_RESOURCE_CLAIM,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": api.GPU_DEVICE_CLASS, "count": count},
                    }
                ]
            }
        },
    }
