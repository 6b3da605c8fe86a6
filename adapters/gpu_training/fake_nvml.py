"""FakeNvml: a stand-in for the ``pynvml`` module where no NVIDIA GPU exists.

It answers the same function names with the same shapes (objects with ``total``,
``used``, ``gpu``, ``busId`` attributes; ``NVMLError`` with NVML's codes) for a
described set of GPUs, so :class:`NvmlCollector` runs unchanged against it. It is
a fake: it models the answers, not the hardware. ``driver_loaded=False`` behaves
like a machine without the NVIDIA library. Method names are NVML's, hence camelCase.
"""

# ruff: noqa: N802

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import ClassVar


class NVMLError(Exception):
    """Mirrors ``pynvml.NVMLError``: ``value`` is the NVML return code."""

    def __init__(self, value: int):
        super().__init__(FakeNvml.MESSAGES.get(value, f"NVML error {value}"))
        self.value = value


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_mib: int = 81_559
    memory_used_mib: int = 0
    utilization_pct: int = 0
    mig: bool | None = False
    nvlink_peers: list[str | None] = field(default_factory=list)
    """Per NVLink, the remote PCI bus id (a GPU's, or an NVSwitch's)."""


class FakeNvml:
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    MESSAGES: ClassVar[dict[int, str]] = {
        12: "NVML Shared Library Not Found",
        3: "Not Supported",
        2: "Invalid Argument",
    }
    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        topology_level: list[list[int]] | None = None,
        driver_loaded: bool = True,
    ):
        self.gpus = gpus or []
        self.topology_level = topology_level
        self.driver_loaded = driver_loaded
        self.initialised = 0

    @staticmethod
    def bus_id(index: int) -> str:
        return f"00000000:{0x18 + index * 0x10:02X}:00.0"

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise NVMLError(self.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle].name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-00000000-0000-0000-0000-{handle:012d}"

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.bus_id(handle).encode())

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self.gpus[handle]
        total, used = gpu.memory_total_mib << 20, gpu.memory_used_mib << 20
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.gpus[handle].utilization_pct, memory=0)

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        mig = self.gpus[handle].mig
        if mig is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        mode = self.NVML_DEVICE_MIG_ENABLE if mig else self.NVML_DEVICE_MIG_DISABLE
        return mode, mode

    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        if self.topology_level is None:
            return 10  # NVML_TOPOLOGY_SINGLE: one PCIe switch
        return self.topology_level[first][second]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        peers = self.gpus[handle].nvlink_peers
        if link >= len(peers):
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.NVML_FEATURE_ENABLED if peers[link] else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=(self.gpus[handle].nvlink_peers[link] or "").encode())
