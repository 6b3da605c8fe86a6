"""The devices each node publishes, merged from its ResourceSlices.

:func:`node_devices` groups read slices (:func:`~kubesage.core.dra.slices.read_slice`)
of one driver by node, keeping each pool at its newest ``generation`` as kube-scheduler
does, into one :class:`NodeDevices` per node: its whole GPUs, its MIG devices, and the
counter sets partitionable GPUs share. It refuses (SliceError) two devices that claim
one GPU index and GPUs of several products on one node (kubesage models one GPU model
per node). :func:`readable_node_devices` is the tolerant form a live informer uses: a
node whose slices cannot be read is left out (its GPUs then come from the extended
resources) and the problem returned for the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesage.core.dra import api
from kubesage.core.dra.slices import GpuDevice, MigDevice, PublishedSlice, SliceError, read_slice


@dataclass(frozen=True)
class NodeDevices:
    """Everything one driver publishes for one node."""

    node: str
    driver: str
    pool: str
    gpus: tuple[GpuDevice, ...] = ()
    """Whole GPUs, by index."""
    migs: tuple[MigDevice, ...] = ()
    counter_sets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """Physical GPUs: those published whole and the parents of MIG devices."""
        return tuple(sorted({g.index for g in self.gpus} | {m.parent_index for m in self.migs}))

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_indices)

    @property
    def product(self) -> str | None:
        """The GPUs' product name (a node's GPUs are one model)."""
        products = [gpu.product for gpu in self.gpus] + [mig.product for mig in self.migs]
        return next((product for product in products if product), None)

    @property
    def gpu_memory_mib(self) -> int | None:
        return next((g.memory_mib for g in self.gpus if g.memory_mib), None)

    @property
    def mig_enabled(self) -> bool:
        """GPUs in MIG mode: static MIG instances published, no whole GPU."""
        return bool(self.migs) and not self.gpus and not any(m.partition for m in self.migs)

    @property
    def mig_instances(self) -> tuple[tuple[int, str, int], ...] | None:
        """The static MIG instances as ``(GPU index, profile, start slice)``: the fixed
        layout of a MIG-mode node (None when not in MIG mode or a start is unknown)."""
        if not self.mig_enabled or any(m.start is None for m in self.migs):
            return None
        return tuple((m.parent_index, m.profile, m.start or 0) for m in self.migs)

    @property
    def partitionable(self) -> bool:
        """MIG layouts change on demand: the driver publishes partitions (KEP-4815)."""
        return any(m.partition for m in self.migs)

    def gpu(self, index: int) -> GpuDevice | None:
        return next((g for g in self.gpus if g.index == index), None)

    def pcie_roots(self) -> tuple[str | None, ...]:
        """The PCIe root of each GPU index ``0 .. gpu_count-1`` (None where unknown)."""
        by_index = {g.index: g.pcie_root for g in self.gpus}
        return tuple(by_index.get(i) for i in range(self.gpu_count))


def node_devices(
    slices: Iterable[Mapping[str, Any]], driver: str = api.NVIDIA_GPU_DRIVER
) -> dict[str, NodeDevices]:
    """What ``driver`` publishes per node (see the module docstring); SliceError on a
    slice that cannot be read or two devices claiming one GPU index."""
    read = [read_slice(obj, position) for position, obj in enumerate(slices)]
    newest: dict[tuple[str, str], int] = {}
    for published in read:
        if published.driver == driver and published.node:
            key = (published.node, published.pool)
            newest[key] = max(newest.get(key, 0), published.generation)
    merged: dict[str, list[PublishedSlice]] = {}
    for published in read:
        if published.driver != driver or not published.node:
            continue
        if published.generation == newest[(published.node, published.pool)]:
            merged.setdefault(published.node, []).append(published)
    return {node: _merge(node, driver, parts) for node, parts in sorted(merged.items())}


def _merge(node: str, driver: str, parts: list[PublishedSlice]) -> NodeDevices:
    gpus: dict[int, GpuDevice] = {}
    where: dict[int, str] = {}
    for part in parts:
        for gpu in part.gpus:
            if gpu.index in gpus:
                raise SliceError(
                    part.name,
                    "spec.devices",
                    f"GPU index {gpu.index} of node '{node}' is published twice "
                    f"('{gpus[gpu.index].name}' in '{where[gpu.index]}', '{gpu.name}')",
                )
            gpus[gpu.index] = gpu
            where[gpu.index] = part.name
    migs = [mig for part in parts for mig in part.migs]
    products = {gpu.product for gpu in gpus.values() if gpu.product}
    products |= {mig.product for mig in migs if mig.product}
    if len(products) > 1:
        raise SliceError(
            parts[0].name,
            "spec.devices",
            f"node '{node}' publishes GPUs of several products ({', '.join(sorted(products))}); "
            "kubesage models one GPU model per node",
        )
    counter_sets = {name: sets for part in parts for name, sets in part.counter_sets.items()}
    devices = NodeDevices(
        node=node,
        driver=driver,
        pool=parts[0].pool,
        gpus=tuple(gpus[i] for i in sorted(gpus)),
        migs=tuple(sorted(migs, key=lambda m: (m.parent_index, m.start or 0, m.name))),
        counter_sets=counter_sets,
    )
    return devices


def readable_node_devices(
    slices: Iterable[Mapping[str, Any]], driver: str = api.NVIDIA_GPU_DRIVER
) -> tuple[dict[str, NodeDevices], list[SliceError]]:
    """:func:`node_devices` per node, leaving out the nodes whose slices cannot be read
    (and returning the problems: one per unreadable slice or node). Only the slices that
    count are read: another driver's (a NIC's, whose attributes kubesage has no use for)
    and a pool's older generations (kube-scheduler's allocator ignores them too) cannot
    hide a node's GPUs by being unreadable."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    broken: set[str] = set()
    problems: list[SliceError] = []
    for position, obj in _counted(list(slices), driver):
        try:
            node = read_slice(obj, position).node
        except SliceError as exc:
            problems.append(exc)
            spec = obj.get("spec") if isinstance(obj, Mapping) else None
            named = spec.get("nodeName") if isinstance(spec, Mapping) else None
            if isinstance(named, str):
                broken.add(named)
            continue
        if node is not None:
            by_node.setdefault(node, []).append(obj)
    devices: dict[str, NodeDevices] = {}
    for node, objs in sorted(by_node.items()):
        if node in broken:
            continue
        try:
            devices.update(node_devices(objs, driver))
        except SliceError as exc:
            problems.append(exc)
    return devices, problems


def _pool_generation(obj: object) -> tuple[object, object, object]:
    """``(driver, pool name, generation)`` as written, without checking them."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return None, None, None
    pool = spec.get("pool")
    if not isinstance(pool, Mapping):
        return spec.get("driver"), None, None
    return spec.get("driver"), pool.get("name"), pool.get("generation")


def _counted(slices: list[Mapping[str, Any]], driver: str) -> list[tuple[int, Mapping[str, Any]]]:
    """``(position, slice)`` of the slices of ``driver`` (or whose driver cannot be told,
    so that their problem is reported) that are not of an older generation of their pool."""
    newest: dict[str, int] = {}
    for obj in slices:
        named, pool, generation = _pool_generation(obj)
        if named == driver and isinstance(pool, str) and isinstance(generation, int):
            newest[pool] = max(newest.get(pool, generation), generation)
    counted: list[tuple[int, Mapping[str, Any]]] = []
    for position, obj in enumerate(slices):
        named, pool, generation = _pool_generation(obj)
        if isinstance(named, str) and named != driver:
            continue
        if isinstance(pool, str) and isinstance(generation, int) and generation < newest[pool]:
            continue
        counted.append((position, obj))
    return counted
