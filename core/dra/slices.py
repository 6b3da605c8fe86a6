"""One ResourceSlice → the GPUs and MIG devices (or partitions) it publishes.

Input: a ``resource.k8s.io/v1`` ResourceSlice as a mapping (a ``kubectl get
resourceslices -o json`` item, or a watch's object). Per device, the attribute
``type`` says what it is (names: :mod:`~kubesage.core.dra.api`):

- ``gpu``: a whole GPU, :class:`GpuDevice`. Its index is the ``index`` attribute, else
  ``minor``, else the ``<n>`` of the driver's name ``gpu-<n>``. A GPU that consumes
  counters (``consumesCounters``) is partitionable: it and its partitions share them.
- ``mig``: a MIG device, :class:`MigDevice`, of the GPU given by ``parentIndex``,
  ``parentMinor``, the name ``gpu-<n>-mig-…``, or ``parentUUID`` matched to a GPU of
  the slice. Its memory slices come from the ``memorySlice<i>`` capacities (a static
  instance) or the ``memory-slice-<i>`` counters it consumes (a partition, which exists
  only once allocated).
- anything else (VFIO pass-through, the compute-domain driver's channels): skipped.

Unknown fields are ignored (the API grows). A slice that is not a ResourceSlice's shape
raises :class:`SliceError` naming the slice and the field path
(``ResourceSlice 'x': spec.devices.3.attributes.index: …``). Merging a node's slices:
:mod:`~kubesage.core.dra.nodes`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from kubesage.core.dra import api
from kubesage.core.errors import InputError
from kubesage.core.field_errors import first_problem

_GPU_NAME = re.compile(r"^gpu-(\d+)$")
_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|)$")
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


class SliceError(InputError):
    """A ResourceSlice kubesage cannot read; the message names the slice and the field."""

    def __init__(self, slice_name: str, path: str, message: str):
        super().__init__(f"ResourceSlice '{slice_name}': {path}: {message}")
        self.slice_name = slice_name
        self.path = path


# -- the v1 shapes read here (unknown fields are ignored: the API grows) -----------------


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="ignore", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class _Attribute(_Model):
    """``DeviceAttribute``: exactly one typed value."""

    int_: int | None = Field(None, alias="int", strict=True)
    bool_: bool | None = Field(None, alias="bool", strict=True)
    string: str | None = Field(None, strict=True)
    version: str | None = Field(None, strict=True)

    @model_validator(mode="after")
    def _one_value(self) -> _Attribute:
        values = [v for v in (self.int_, self.bool_, self.string, self.version) if v is not None]
        if len(values) != 1:
            raise ValueError("exactly one of int, bool, string, version must be set")
        return self


class _Quantity(_Model):
    value: str | int


class _Consumption(_Model):
    counter_set: str = Field(min_length=1)
    counters: dict[str, _Quantity] = Field(default_factory=dict)


class _Device(_Model):
    name: str = Field(min_length=1)
    attributes: dict[str, _Attribute] = Field(default_factory=dict)
    capacity: dict[str, _Quantity] = Field(default_factory=dict)
    consumes_counters: list[_Consumption] = Field(default_factory=list)


class _Pool(_Model):
    name: str = Field(min_length=1)
    generation: Annotated[int, Field(ge=0)] = 0
    resource_slice_count: Annotated[int, Field(ge=1)]


class _CounterSet(_Model):
    name: str = Field(min_length=1)
    counters: dict[str, _Quantity]


class _Spec(_Model):
    driver: str = Field(min_length=1)
    pool: _Pool
    node_name: str | None = None
    devices: list[_Device] = Field(default_factory=list)
    shared_counters: list[_CounterSet] = Field(default_factory=list)


class _Slice(_Model):
    spec: _Spec


# -- what kubesage keeps ------------------------------------------------------------------


@dataclass(frozen=True)
class GpuDevice:
    """A whole GPU as its driver publishes it."""

    name: str
    """The device name an allocation result names (``gpu-3``)."""
    index: int
    """The GPU's index on its node (the DRTG's local GPU index)."""
    uuid: str | None = None
    product: str | None = None
    """``productName``, e.g. ``NVIDIA H100 80GB HBM3``."""
    memory_mib: int | None = None
    pcie_root: str | None = None
    """``resource.kubernetes.io/pcieRoot``: GPUs with the same value share a root complex."""
    pcie_bus_id: str | None = None
    architecture: str | None = None
    counter_set: str | None = None
    """The counter set it consumes: set for a partitionable GPU."""
    pool: str = ""
    """The pool of the slice that publishes it (allocation results name it)."""
    counters: tuple[tuple[str, str, int], ...] = ()
    """``(counter set, counter, amount)`` it consumes (a partitionable GPU)."""
    entry: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The slice's device entry as published: what CEL selectors read."""


@dataclass(frozen=True)
class MigDevice:
    """A MIG device: an existing instance, or a partition that exists once allocated."""

    name: str
    parent_index: int
    profile: str
    """``1g.10gb``, ``3g.40gb``…"""
    start: int | None = None
    """First memory slice it holds (None when the driver does not say)."""
    memory_slices: int | None = None
    memory_mib: int | None = None
    uuid: str | None = None
    parent_uuid: str | None = None
    product: str | None = None
    """The parent GPU's ``productName``."""
    partition: bool = False
    """A partitionable-devices partition (it consumes its parent's counters)."""
    pool: str = ""
    """The pool of the slice that publishes it (allocation results name it)."""
    counters: tuple[tuple[str, str, int], ...] = ()
    """``(counter set, counter, amount)`` a partition consumes."""
    entry: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The slice's device entry as published: what CEL selectors read."""


@dataclass(frozen=True)
class PublishedSlice:
    """One ResourceSlice, read."""

    name: str
    driver: str
    node: str | None
    pool: str
    generation: int
    gpus: tuple[GpuDevice, ...]
    migs: tuple[MigDevice, ...]
    counter_sets: Mapping[str, Mapping[str, int]]
    """Shared counter sets: name → counter → value (quantities as integers)."""


# -- reading ----------------------------------------------------------------------------------


def is_resource_slice(obj: Mapping[str, Any]) -> bool:
    """True for a ResourceSlice (by ``kind``, as kubectl lists write it)."""
    return obj.get("kind") == api.KIND_RESOURCE_SLICE


def _slice_name(obj: Mapping[str, Any], position: int | None = None) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if isinstance(name, str) and name:
        return name
    return f"#{position}" if position is not None else "<unnamed>"


def quantity_int(text: str | int, slice_name: str, path: str) -> int:
    """A quantity (``81559Mi``, ``"1"``, ``4``) as a whole number of its unit."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise SliceError(slice_name, path, f"cannot read quantity {str(text)[:32]!r}")
    try:
        return int(Decimal(match.group(1)) * _UNITS[match.group(2)])
    except InvalidOperation:
        raise SliceError(slice_name, path, f"cannot read quantity {text!r}") from None


class _DeviceReader:
    """Reads one device's attributes, naming the slice and field on bad input."""

    def __init__(
        self, slice_name: str, driver: str, position: int, device: _Device, entry: Mapping[str, Any]
    ):
        self.slice_name = slice_name
        self.driver = driver
        self.path = f"spec.devices.{position}"
        self.device = device
        self.entry = entry

    def attribute(self, name: str) -> tuple[str, _Attribute] | None:
        for key in (name, api.attribute_key(name, self.driver)):
            if key in self.device.attributes:
                return key, self.device.attributes[key]
        return None

    def string(self, name: str) -> str | None:
        found = self.attribute(name)
        if found is None:
            return None
        key, value = found
        text = value.string if value.string is not None else value.version
        if text is None:
            raise SliceError(self.slice_name, f"{self.path}.attributes.{key}", "expected a string")
        return text

    def integer(self, name: str) -> int | None:
        found = self.attribute(name)
        if found is None:
            return None
        key, value = found
        if value.int_ is None or value.int_ < 0:
            raise SliceError(
                self.slice_name, f"{self.path}.attributes.{key}", "expected a non-negative int"
            )
        return value.int_

    def memory_mib(self) -> int | None:
        quantity = self.device.capacity.get(api.CAPACITY_MEMORY)
        if quantity is None:
            return None
        where = f"{self.path}.capacity.{api.CAPACITY_MEMORY}.value"
        return quantity_int(quantity.value, self.slice_name, where) // 2**20

    def memory_slices(self) -> tuple[int | None, int | None]:
        """(first slice, slice count) from ``memorySlice<i>`` capacities or
        ``memory-slice-<i>`` counters."""
        held = [
            int(key.removeprefix(api.MEMORY_SLICE_CAPACITY))
            for key in self.device.capacity
            if key.removeprefix(api.MEMORY_SLICE_CAPACITY).isdecimal()
        ]
        for consumption in self.device.consumes_counters:
            held += [
                int(key.removeprefix(api.MEMORY_SLICE_COUNTER))
                for key in consumption.counters
                if key.removeprefix(api.MEMORY_SLICE_COUNTER).isdecimal()
            ]
        if not held:
            return None, None
        return min(held), len(set(held))

    def counters(self) -> tuple[tuple[str, str, int], ...]:
        """``(counter set, counter, amount)`` of each counter the device consumes."""
        return tuple(
            (
                use.counter_set,
                counter,
                quantity_int(
                    amount.value,
                    self.slice_name,
                    f"{self.path}.consumesCounters.{i}.counters.{counter}.value",
                ),
            )
            for i, use in enumerate(self.device.consumes_counters)
            for counter, amount in use.counters.items()
        )

    def fail(self, message: str) -> SliceError:
        return SliceError(self.slice_name, self.path, message)


def read_slice(obj: Mapping[str, Any], position: int | None = None) -> PublishedSlice:
    """One ResourceSlice, read (SliceError on a shape kubesage cannot read)."""
    name = _slice_name(obj, position)
    if not isinstance(obj, Mapping):
        raise SliceError(name, "", f"expected an object, got {type(obj).__name__}")
    try:
        parsed = _Slice.model_validate(obj)
    except ValidationError as exc:
        problem = first_problem(exc)
        raise SliceError(name, problem.field, problem.message) from None
    spec = parsed.spec
    entries = obj["spec"].get("devices") or []  # validated: a list as long as spec.devices
    gpus: list[GpuDevice] = []
    migs: list[tuple[_DeviceReader, str | None, int | None]] = []
    for index, device in enumerate(spec.devices):
        reader = _DeviceReader(name, spec.driver, index, device, entries[index])
        kind = reader.string(api.ATTR_TYPE)
        if kind == api.DEVICE_TYPE_GPU:
            gpus.append(_gpu(reader, spec.pool.name))
        elif kind == api.DEVICE_TYPE_MIG:
            parent = reader.integer(api.ATTR_PARENT_INDEX)
            if parent is None:
                parent = reader.integer(api.ATTR_PARENT_MINOR)
            match = _MIG_NAME.match(device.name)
            if parent is None and match is not None:
                parent = int(match.group(1))
            migs.append((reader, reader.string(api.ATTR_PARENT_UUID), parent))
    by_uuid = {gpu.uuid: gpu.index for gpu in gpus if gpu.uuid}
    counter_sets = {
        counter_set.name: {
            counter: quantity_int(
                quantity.value, name, f"spec.sharedCounters.{i}.counters.{counter}.value"
            )
            for counter, quantity in counter_set.counters.items()
        }
        for i, counter_set in enumerate(spec.shared_counters)
    }
    return PublishedSlice(
        name=name,
        driver=spec.driver,
        node=spec.node_name,
        pool=spec.pool.name,
        generation=spec.pool.generation,
        gpus=tuple(gpus),
        migs=tuple(
            _mig(reader, parent_uuid, parent, by_uuid, spec.pool.name)
            for reader, parent_uuid, parent in migs
        ),
        counter_sets=counter_sets,
    )


def _gpu(reader: _DeviceReader, pool: str) -> GpuDevice:
    index = reader.integer(api.ATTR_INDEX)
    if index is None:
        index = reader.integer(api.ATTR_MINOR)
    match = _GPU_NAME.match(reader.device.name)
    if index is None and match is not None:
        index = int(match.group(1))
    if index is None:
        raise reader.fail(
            f"GPU '{reader.device.name}' has no '{api.ATTR_INDEX}' or '{api.ATTR_MINOR}' "
            "attribute and its name is not gpu-<n>"
        )
    consumes = reader.device.consumes_counters
    return GpuDevice(
        name=reader.device.name,
        index=index,
        uuid=reader.string(api.ATTR_UUID),
        product=reader.string(api.ATTR_PRODUCT_NAME),
        memory_mib=reader.memory_mib(),
        pcie_root=reader.string(api.PCIE_ROOT_ATTRIBUTE),
        pcie_bus_id=reader.string(api.ATTR_PCIE_BUS_ID),
        architecture=reader.string(api.ATTR_ARCHITECTURE),
        counter_set=consumes[0].counter_set if consumes else None,
        pool=pool,
        counters=reader.counters(),
        entry=reader.entry,
    )


def _mig(
    reader: _DeviceReader,
    parent_uuid: str | None,
    parent: int | None,
    by_uuid: dict[str, int],
    pool: str,
) -> MigDevice:
    if parent is None and parent_uuid is not None:
        parent = by_uuid.get(parent_uuid)
    if parent is None:
        raise reader.fail(
            f"MIG device '{reader.device.name}' names no parent GPU (no parentIndex, "
            "parentMinor or parentUUID of a published GPU, and its name is not gpu-<n>-mig-…)"
        )
    profile = reader.string(api.ATTR_PROFILE)
    if not profile:
        raise reader.fail(f"MIG device '{reader.device.name}' has no '{api.ATTR_PROFILE}'")
    start, size = reader.memory_slices()
    return MigDevice(
        name=reader.device.name,
        parent_index=parent,
        profile=profile,
        start=start,
        memory_slices=size,
        memory_mib=reader.memory_mib(),
        uuid=reader.string(api.ATTR_UUID),
        parent_uuid=parent_uuid,
        product=reader.string(api.ATTR_PRODUCT_NAME),
        partition=bool(reader.device.consumes_counters),
        pool=pool,
        counters=reader.counters(),
        entry=reader.entry,
    )
