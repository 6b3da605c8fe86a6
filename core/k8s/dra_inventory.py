"""The devices a node publishes through ResourceSlices, and which of them claims hold.

What kubesage's DRA allocation (:mod:`~kubesage.core.k8s.dra_allocation`) matches its
decisions against, read from plain ``resource.k8s.io/v1`` dicts:

- :func:`node_inventory` / :func:`inventory_of`: a node's devices as
  :mod:`~kubesage.core.dra.slices` reads them (the one reader of ResourceSlices; the
  raw device entries kept for the CEL selectors): a whole GPU by its ``index``; a MIG
  device by its parent GPU, ``profile`` and first memory slice (static, or a
  partitionable one, KEP-4815, with the counters it consumes from its GPU's counter
  set);
- :func:`claim_names`: the claims a pod names (a template's generated claim through
  ``status.resourceClaimStatuses``);
- :func:`in_use`: the devices other claims hold and the counters their partitions use.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubesage.core.dra import api
from kubesage.core.dra.nodes import NodeDevices, readable_node_devices
from kubesage.core.dra.slices import GpuDevice, MigDevice

log = logging.getLogger(__name__)

DeviceKey = tuple[str, str, str]
"""``(driver, pool, device)``: how an allocation result names a device."""
CounterKey = tuple[str, str, str, str]
"""``(driver, pool, counter set, counter)``."""


@dataclass(frozen=True)
class SliceDevice:
    """One device a node publishes, with what kubesage matches its decisions by."""

    driver: str
    pool: str
    name: str
    spec: Mapping[str, Any]
    """The slice's device entry (attributes, capacity): what CEL selectors read."""
    type: str
    """``gpu`` or ``mig`` (NVIDIA's ``type`` attribute)."""
    gpu_index: int | None
    """A GPU's ``index``; a MIG device's ``parentIndex``."""
    profile: str | None = None
    mig_start: int | None = None
    """The first memory slice a MIG device holds (or, as a partition, would hold)."""
    counters: tuple[tuple[str, str, Decimal], ...] = ()
    """``(counter set, counter, amount)`` a partition device consumes."""

    @property
    def key(self) -> DeviceKey:
        return self.driver, self.pool, self.name

    @property
    def partition(self) -> bool:
        """A partitionable device (KEP-4815): created when allocated."""
        return bool(self.counters)


@dataclass(frozen=True)
class NodeInventory:
    """The devices one node publishes and the shared counters their partitions draw on."""

    node: str
    devices: tuple[SliceDevice, ...]
    counters: Mapping[CounterKey, Decimal] = field(default_factory=dict)

    def device(self, key: DeviceKey) -> SliceDevice | None:
        for device in self.devices:
            if device.key == key:
                return device
        return None

    @property
    def partitionable(self) -> bool:
        """The node publishes MIG partitions (a re-layout is an allocation here)."""
        return any(d.partition and d.type == api.DEVICE_TYPE_MIG for d in self.devices)


def attribute_value(device: Mapping[str, Any], driver: str, name: str, domain: str = "") -> object:
    """The value of attribute ``name`` of ``domain`` (the driver's when empty); an
    unqualified attribute belongs to the driver's domain."""
    attributes = device.get("attributes") or {}
    domain = domain or driver
    entry = attributes.get(f"{domain}/{name}")
    if entry is None and domain == driver:
        entry = attributes.get(name)
    if isinstance(entry, Mapping):
        for kind in ("int", "string", "bool", "version"):
            if kind in entry:
                return entry[kind]
    return None


def _slice_device(driver: str, device: GpuDevice | MigDevice) -> SliceDevice:
    counters = tuple((s, c, Decimal(amount)) for s, c, amount in device.counters)
    if isinstance(device, GpuDevice):
        return SliceDevice(
            driver,
            device.pool,
            device.name,
            device.entry,
            api.DEVICE_TYPE_GPU,
            device.index,
            counters=counters,
        )
    return SliceDevice(
        driver,
        device.pool,
        device.name,
        device.entry,
        api.DEVICE_TYPE_MIG,
        device.parent_index,
        profile=device.profile,
        mig_start=device.start,
        counters=counters,
    )


def inventory_of(devices: NodeDevices) -> NodeInventory:
    """The allocation's view of what one node publishes (read once, by
    :mod:`~kubesage.core.dra.nodes`), with the shared counters its partitions draw on."""
    published: list[GpuDevice | MigDevice] = [*devices.gpus, *devices.migs]
    found = [_slice_device(devices.driver, d) for d in published]
    counters = {
        (device.driver, device.pool, counter_set, counter): Decimal(
            devices.counter_sets.get(counter_set, {}).get(counter, 0)
        )
        for device in found
        for counter_set, counter, _ in device.counters
    }
    return NodeInventory(devices.node, tuple(found), counters)


def node_inventory(
    slices: Iterable[Mapping[str, Any]], node: str, driver: str = api.NVIDIA_GPU_DRIVER
) -> NodeInventory:
    """The devices ``node``'s slices of ``driver`` publish: of each pool, only its newest
    generation, as kube-scheduler's allocator reads them
    (:func:`~kubesage.core.dra.nodes.readable_node_devices`). A node whose slices
    kubesage cannot read publishes nothing here (its GPUs are not allocated by kubesage,
    as they are not perceived through DRA either)."""
    local = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node]
    devices, problems = readable_node_devices(local, driver)
    for problem in problems:
        log.warning("%s", problem)
    if node not in devices:
        return NodeInventory(node, ())
    return inventory_of(devices[node])


# -- claims -------------------------------------------------------------------------------


def claim_names(pod: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(entry name, claim name)`` for each ``spec.resourceClaims`` entry; the claim name
    is None while a template's claim has not been created (``status.resourceClaimStatuses``
    names it once the resourceclaim controller has). An entry whose status names no claim
    is left out: the API says no claim was needed and the entry can be ignored."""
    generated = {
        str(entry.get("name")): entry.get("resourceClaimName")
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(entry, Mapping)
    }
    names: list[tuple[str, str | None]] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = str(entry.get("name"))
        if entry.get("resourceClaimName"):
            names.append((name, str(entry["resourceClaimName"])))
        elif name in generated and not generated[name]:
            continue  # the controller generated none: nothing to wait for
        else:
            claim = generated.get(name)
            names.append((name, str(claim) if claim else None))
    return names


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def reserved_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    return any(
        entry.get("uid") == pod_uid
        for entry in (claim.get("status") or {}).get("reservedFor") or []
        if isinstance(entry, Mapping)
    )


def result_keys(claim: Mapping[str, Any]) -> list[DeviceKey]:
    """The devices a claim's allocation holds, in results order."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (allocation.get("devices") or {}).get("results") or []
        if isinstance(r, Mapping)
    ]


@dataclass(frozen=True)
class InUse:
    """What the other claims hold on a node."""

    devices: frozenset[DeviceKey]
    counters: Mapping[CounterKey, Decimal]


def in_use(claims: Iterable[Mapping[str, Any]], inventory: NodeInventory, skip: set[str]) -> InUse:
    """The devices the claims (all but those with a UID in ``skip``) hold, and the
    counters their partitions consume on ``inventory``'s node."""
    devices: set[DeviceKey] = set()
    counters: dict[CounterKey, Decimal] = defaultdict(Decimal)
    for claim in claims:
        if uid_of(claim) in skip:
            continue
        for key in result_keys(claim):
            devices.add(key)
            device = inventory.device(key)
            for counter_set, counter, amount in device.counters if device else ():
                counters[(key[0], key[1], counter_set, counter)] += amount
    return InUse(frozenset(devices), dict(counters))
