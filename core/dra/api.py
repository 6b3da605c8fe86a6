"""The names of ``resource.k8s.io/v1`` and of NVIDIA's DRA driver for GPUs.

Kubernetes API reference (v1.34, ``resource.k8s.io/v1``): ResourceSlice and
DeviceClass are cluster-scoped, ResourceClaim and ResourceClaimTemplate namespaced;
a claim's ``status`` is a subresource. Attribute and capacity names are those the
kubelet plugin of NVIDIA's ``k8s-dra-driver-gpu`` publishes (``deviceinfo.go``,
``mig.go``, ``partitions.go``): an attribute name without a domain lives in the
driver's domain, so ``uuid`` and ``gpu.nvidia.com/uuid`` are the same attribute.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

RESOURCE_SLICES: Final = "resourceslices"
DEVICE_CLASSES: Final = "deviceclasses"
RESOURCE_CLAIMS: Final = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES: Final = "resourceclaimtemplates"
"""Plurals, as they appear in URLs."""
KIND_RESOURCE_SLICE: Final = "ResourceSlice"
KIND_DEVICE_CLASS: Final = "DeviceClass"
KIND_RESOURCE_CLAIM: Final = "ResourceClaim"
KIND_RESOURCE_CLAIM_TEMPLATE: Final = "ResourceClaimTemplate"

SLICE_DRIVER_FIELD: Final = "spec.driver"
SLICE_NODE_FIELD: Final = "spec.nodeName"
"""The fields a ResourceSlice list can be selected on (besides metadata)."""

SLICE_MAX_DEVICES: Final = 128
"""``ResourceSliceMaxDevices``: devices one slice may hold."""
ALLOCATION_RESULTS_MAX: Final = 32
"""``AllocationResultsMaxSize``: devices one claim may be allocated."""
RESERVED_FOR_MAX: Final = 256
"""``ResourceClaimReservedForMaxSize``: consumers one claim may be reserved for."""

ALLOCATION_MODE_EXACT: Final = "ExactCount"
ALLOCATION_MODE_ALL: Final = "All"

# -- NVIDIA's driver ------------------------------------------------------------------

NVIDIA_GPU_DRIVER: Final = "gpu.nvidia.com"
"""The driver name in ``spec.driver`` and in allocation results."""
GPU_DEVICE_CLASS: Final = "gpu.nvidia.com"
"""DeviceClass of whole GPUs (selector ``device.attributes['gpu.nvidia.com'].type == 'gpu'``)."""
MIG_DEVICE_CLASS: Final = "mig.nvidia.com"
"""DeviceClass of MIG devices (``type == 'mig'``)."""

DEVICE_TYPE_GPU: Final = "gpu"
DEVICE_TYPE_MIG: Final = "mig"

ATTR_TYPE: Final = "type"
ATTR_UUID: Final = "uuid"
ATTR_INDEX: Final = "index"
ATTR_MINOR: Final = "minor"
ATTR_PRODUCT_NAME: Final = "productName"
ATTR_BRAND: Final = "brand"
ATTR_ARCHITECTURE: Final = "architecture"
ATTR_CUDA_COMPUTE_CAPABILITY: Final = "cudaComputeCapability"
ATTR_DRIVER_VERSION: Final = "driverVersion"
ATTR_CUDA_DRIVER_VERSION: Final = "cudaDriverVersion"
ATTR_PCIE_BUS_ID: Final = "pcieBusID"
ATTR_PARENT_UUID: Final = "parentUUID"
ATTR_PARENT_INDEX: Final = "parentIndex"
ATTR_PARENT_MINOR: Final = "parentMinor"
ATTR_PROFILE: Final = "profile"
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
"""Kubernetes' standard attribute: devices under one PCIe root complex share its value."""

CAPACITY_MEMORY: Final = "memory"
"""Device memory in bytes (a quantity)."""
CAPACITY_MULTIPROCESSORS: Final = "multiprocessors"
MEMORY_SLICE_CAPACITY: Final = "memorySlice"
"""A static MIG device's capacity ``memorySlice<i>`` (value 1) per memory slice it holds."""
MEMORY_SLICE_COUNTER: Final = "memory-slice-"
"""A partitionable device's counter ``memory-slice-<i>`` per memory slice it consumes."""


def attribute_key(name: str, driver: str = NVIDIA_GPU_DRIVER) -> str:
    """The fully qualified name of attribute ``name`` (``uuid`` → ``gpu.nvidia.com/uuid``),
    as CEL selectors write it: ``device.attributes['gpu.nvidia.com'].uuid``."""
    return name if "/" in name else f"{driver}/{name}"
