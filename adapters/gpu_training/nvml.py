"""GPU inventory and topology from NVML (nvidia-ml-py), for a GPU node.

``NvmlCollector`` reads every GPU's name, UUID, memory, utilisation and MIG mode,
the PCIe distance between every pair (NVML's common-ancestor level) and which
NVLinks are up and where they go (another GPU, or an NVSwitch). The NVML module
is injected: the real ``pynvml`` by default, or a stand-in with the same function
names (:class:`kubesage.adapters.gpu_training.fake_nvml.FakeNvml` in tests).

Without a driver (no GPU, a CPU-only node, a container without the library) the
collector does not raise: it returns a snapshot marked unavailable with NVML's
reason, counts the failure, and the rest of kubesage carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, TypeVar, cast

from kubesage.core.errors import InputError
from kubesage.core.topology.discovery import gpu_model_from_product
from kubesage.core.topology.spec import NodeTemplate, NvlinkSpec

log = logging.getLogger(__name__)

NvlinkTopology = Literal["nvswitch", "pairs", "none", "mixed"]
T = TypeVar("T")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None
    """None where NVML cannot say (not supported in MIG mode; the snapshot's notes say why)."""
    mig_enabled: bool | None
    """None where the GPU does not support MIG, or NVML would not say (a note says why)."""


@dataclass(frozen=True)
class NvmlSnapshot:
    available: bool
    reason: str = ""
    gpus: tuple[GpuInfo, ...] = ()
    pcie_level: tuple[tuple[int, ...], ...] = ()
    """NVML topology level between GPU i and j (0 same board … 50 across sockets)."""
    nvlinks: tuple[tuple[int, ...], ...] = ()
    """Active NVLinks from GPU i straight to GPU j."""
    nvswitch_links: tuple[int, ...] = ()
    """Active NVLinks from GPU i to an NVSwitch."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def _load_pynvml() -> ModuleType:
    """Import nvidia-ml-py only when a collection runs: only GPU nodes need it."""
    import pynvml

    return cast(ModuleType, pynvml)


class NvmlCollector:
    """Reads NVML; degrades to an unavailable snapshot instead of failing."""

    def __init__(self, nvml: Any | None = None):
        self.nvml = nvml
        self.failures = 0
        """Collections that found NVML unusable."""

    def collect(self) -> NvmlSnapshot:
        try:
            nvml = self.nvml if self.nvml is not None else _load_pynvml()
        except ImportError as exc:
            return self._unavailable(f"nvidia-ml-py is not installed ({exc})")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return self._unavailable(f"NVML could not start: {exc}")
        try:
            return self._read(nvml)
        except nvml.NVMLError as exc:
            return self._unavailable(f"NVML failed while reading: {exc}")
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                log.warning("nvmlShutdown failed", exc_info=True)

    def _unavailable(self, reason: str) -> NvmlSnapshot:
        self.failures += 1
        log.warning("NVML unavailable: %s", reason)
        return NvmlSnapshot(available=False, reason=reason)

    def _read(self, nvml: Any) -> NvmlSnapshot:
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        bus_ids = []
        notes: list[str] = []
        for index, handle in enumerate(handles):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            bus_ids.append(bus_id)
            rates = _optional(
                nvml,
                f"GPU {index}: utilisation",
                notes,
                nvml.nvmlDeviceGetUtilizationRates,
                handle,
                unsupported_note=True,
            )
            utilization = None if rates is None else int(rates.gpu)
            modes = _optional(
                nvml, f"GPU {index}: MIG mode", notes, nvml.nvmlDeviceGetMigMode, handle
            )
            mig = None if modes is None else modes[0] == nvml.NVML_DEVICE_MIG_ENABLE
            if modes is not None and (modes[1] == nvml.NVML_DEVICE_MIG_ENABLE) != mig:
                pending = "enabled" if not mig else "disabled"
                notes.append(f"GPU {index}: MIG mode {pending} after the next GPU reset")
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    pci_bus_id=bus_id,
                    memory_total_mib=int(memory.total) // (1 << 20),
                    memory_used_mib=int(memory.used) // (1 << 20),
                    utilization_pct=utilization,
                    mig_enabled=mig,
                )
            )
        level = [[0] * count for _ in range(count)]
        for i in range(count):
            for j in range(i + 1, count):
                value = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
                level[i][j] = level[j][i] = value
        links = [[0] * count for _ in range(count)]
        switch_links = [0] * count
        hidden = [0] * count
        by_bus = {bus: i for i, bus in enumerate(bus_ids)}
        for i, handle in enumerate(handles):
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                except nvml.NVMLError as exc:
                    if exc.value not in _no_more_links(nvml):
                        notes.append(f"GPU {i}: NVLink {link} unreadable ({exc})")
                    break  # no more links on this GPU (or NVLink not supported)
                peer = by_bus.get(remote)
                kind = _remote_kind(nvml, handle, link)
                if peer is not None:
                    links[i][peer] += 1
                elif kind == "gpu":  # a GPU this process cannot see: not a switch
                    hidden[i] += 1
                else:
                    switch_links[i] += 1
            if hidden[i]:
                notes.append(f"GPU {i}: {hidden[i]} NVLink(s) to GPUs not visible here")
        return NvmlSnapshot(
            available=True,
            gpus=tuple(gpus),
            pcie_level=tuple(tuple(row) for row in level),
            nvlinks=tuple(tuple(row) for row in links),
            nvswitch_links=tuple(switch_links),
            notes=tuple(notes),
        )


def _no_more_links(nvml: Any) -> tuple[int, ...]:
    """The NVML errors that mean a GPU has no link of that number (or no NVLink)."""
    return (nvml.NVML_ERROR_INVALID_ARGUMENT, nvml.NVML_ERROR_NOT_SUPPORTED)


def _remote_kind(nvml: Any, handle: Any, link: int) -> str | None:
    """What the far end of ``link`` is (``gpu``, ``switch``), where NVML can say
    (``nvmlDeviceGetNvLinkRemoteDeviceType``, R470+); None where it cannot."""
    read = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    if read is None:
        return None
    try:
        kind = int(read(handle, link))
    except nvml.NVMLError:
        return None
    return {
        getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0): "gpu",
        getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2): "switch",
    }.get(kind)


def _optional(
    nvml: Any,
    what: str,
    notes: list[str],
    read: Callable[..., T],
    *args: Any,
    unsupported_note: bool = False,
) -> T | None:
    """``read(*args)``, or None when NVML refuses it for this one GPU.

    A GPU that does not support the read (utilisation in MIG mode, MIG mode on a GPU
    without MIG) must not cost the whole snapshot. Any other refusal (no permission…)
    is noted; "not supported" is noted only where ``unsupported_note``.
    """
    try:
        return read(*args)
    except nvml.NVMLError as exc:
        if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED or unsupported_note:
            notes.append(f"{what} not read: {exc}")
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvlink_topology(snapshot: NvmlSnapshot) -> NvlinkTopology:
    """How the node's GPUs are joined by NVLink, for the DRTG node template."""
    count = len(snapshot.gpus)
    if count == 0 or (not any(snapshot.nvswitch_links) and not any(map(any, snapshot.nvlinks))):
        return "none"
    if all(snapshot.nvswitch_links) and not any(map(any, snapshot.nvlinks)):
        return "nvswitch"
    partners = [[j for j in range(count) if snapshot.nvlinks[i][j]] for i in range(count)]
    if not any(snapshot.nvswitch_links) and all(partners[i] == [i ^ 1] for i in range(count)):
        return "pairs"
    return "mixed"


NVML_TOPOLOGY_MULTIPLE = 20
"""Highest NVML common-ancestor level still below one PCIe switch tree."""
NVML_TOPOLOGY_NODE = 40
"""Highest level inside one CPU socket (NUMA node); 50 crosses sockets."""

_NVLINK_GENERATION: dict[str, Literal[3, 4, 5]] = {
    "A100-40GB": 3,
    "A100-80GB": 3,
    "H100-80GB": 4,
    "H200-141GB": 4,
}


def _groups(levels: tuple[tuple[int, ...], ...], within: int) -> list[list[int]]:
    """GPUs grouped by ``level <= within`` (transitively), each group sorted."""
    count = len(levels)
    group = list(range(count))
    for i in range(count):
        for j in range(i + 1, count):
            if levels[i][j] <= within:
                old, new = group[j], group[i]
                group = [new if g == old else g for g in group]
    found: dict[int, list[int]] = {}
    for gpu, g in enumerate(group):
        found.setdefault(g, []).append(gpu)
    return sorted(found.values())


def _even_contiguous(groups: list[list[int]]) -> int | None:
    """The common size when groups are equal and consecutive GPU ranges, else None."""
    size = len(groups[0])
    if all(len(g) == size and g == list(range(g[0], g[0] + size)) for g in groups):
        return size
    return None


def node_template(
    snapshot: NvmlSnapshot,
    *,
    cpu_milli: int,
    memory_mib: int,
    nic_gbps_per_switch: float = 100.0,
    pcie_generation: Literal[3, 4, 5] = 4,
) -> NodeTemplate:
    """The DRTG node template this GPU node's NVML topology describes.

    Sockets and PCIe switches come from NVML's common-ancestor levels (GPUs under
    one switch tree: level ≤ 20; in one socket: ≤ 40), NVLink from the links that
    are up. What the template cannot express falls back to the conservative
    choice: uneven or interleaved groups → one socket or one GPU per switch, a
    mixed NVLink fabric → no NVLink. CPU, memory, NIC speed and PCIe generation
    are not in NVML and are given.
    """
    if not snapshot.available:
        raise InputError(f"no NVML topology to build a template from: {snapshot.reason}")
    gpus = len(snapshot.gpus)
    if gpus == 0:
        return NodeTemplate(gpus=0, sockets=1, cpu_milli=cpu_milli, memory_mib=memory_mib)
    model = gpu_model_from_product(snapshot.gpus[0].name)
    sockets = len(_groups(snapshot.pcie_level, NVML_TOPOLOGY_NODE))
    if _even_contiguous(_groups(snapshot.pcie_level, NVML_TOPOLOGY_NODE)) is None:
        sockets = 1
    per_switch = _even_contiguous(_groups(snapshot.pcie_level, NVML_TOPOLOGY_MULTIPLE)) or 1
    if (gpus // sockets) % per_switch:
        per_switch = 1
    topology = nvlink_topology(snapshot)
    links = max(max(snapshot.nvswitch_links), max(sum(row) for row in snapshot.nvlinks))
    return NodeTemplate(
        gpu_model=model,
        gpus=gpus,
        sockets=sockets,
        gpus_per_switch=per_switch,
        pcie_generation=pcie_generation,
        nvlink=NvlinkSpec(
            topology="none" if topology == "mixed" else topology,
            generation=_NVLINK_GENERATION.get(model, 4),
            links_per_gpu=max(1, min(links, 36)),
        ),
        nic_gbps_per_switch=nic_gbps_per_switch,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
    )
