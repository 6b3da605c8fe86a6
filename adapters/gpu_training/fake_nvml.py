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
    """Mirrors ``pynvml.NVMLError``: ``value`` is the NVML return code, and
    ``NVMLError(code)`` is an instance of the code's subclass where one exists
    (``NVMLError(3)`` is an :class:`NVMLError_NotSupported`), as in pynvml."""

    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}
    code: ClassVar[int | None] = None
    value: int

    def __new__(cls, value: int | None = None) -> NVMLError:
        code = cls.code if value is None else value
        if code is None:
            raise TypeError("NVMLError needs an NVML return code")
        if cls is NVMLError:
            cls = NVMLError._by_code.get(code, cls)
        error = Exception.__new__(cls)
        error.value = code
        return error

    def __init__(self, value: int | None = None):
        super().__init__(FakeNvml.MESSAGES.get(self.value, f"NVML error {self.value}"))

    def __init_subclass__(cls) -> None:
        if cls.code is not None:
            NVMLError._by_code[cls.code] = cls


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801, N818 - pynvml's name
    code = 2


class NVMLError_NotSupported(NVMLError):  # noqa: N801, N818 - pynvml's name
    code = 3


class NVMLError_NoPermission(NVMLError):  # noqa: N801, N818 - pynvml's name
    code = 4


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801, N818 - pynvml's name
    code = 12


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_mib: int = 81_559
    memory_used_mib: int = 0
    utilization_pct: int = 0
    mig: bool | None = False
    """Current MIG mode; None where the GPU does not support MIG."""
    mig_pending: bool | None = None
    """MIG mode after the next GPU reset (None: the current mode)."""
    mig_mode_error: int | None = None
    """An NVML code ``nvmlDeviceGetMigMode`` fails with (4: no permission)."""
    nvlink_peers: list[str | None] = field(default_factory=list)
    """Per NVLink, the remote PCI bus id (a GPU's, or an NVSwitch's)."""
    nvlink_error: int | None = None
    """An NVML code every NVLink query of this GPU fails with (4: no permission)."""


class FakeNvml:
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NO_PERMISSION = 4
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    MESSAGES: ClassVar[dict[int, str]] = {
        12: "NVML Shared Library Not Found",
        3: "Not Supported",
        2: "Invalid Argument",
        4: "Insufficient Permissions",
    }
    NVMLError = NVMLError
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        topology_level: list[list[int]] | None = None,
        driver_loaded: bool = True,
        hidden_gpu_bus_ids: frozenset[str] = frozenset(),
    ):
        self.gpus = gpus or []
        self.topology_level = topology_level
        self.driver_loaded = driver_loaded
        self.hidden_gpu_bus_ids = hidden_gpu_bus_ids
        """GPUs on the node this process does not see (not in ``gpus``)."""
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
        gpu = self.gpus[handle]
        if gpu.mig:  # NVML: utilisation is not supported on a GPU in MIG mode
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.utilization_pct, memory=0)

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        gpu = self.gpus[handle]
        if gpu.mig_mode_error is not None:
            raise NVMLError(gpu.mig_mode_error)
        if gpu.mig is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        pending = gpu.mig if gpu.mig_pending is None else gpu.mig_pending
        return self._mig_mode(gpu.mig), self._mig_mode(pending)

    def _mig_mode(self, enabled: bool) -> int:
        return self.NVML_DEVICE_MIG_ENABLE if enabled else self.NVML_DEVICE_MIG_DISABLE

    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        if self.topology_level is None:
            return 10  # NVML_TOPOLOGY_SINGLE: one PCIe switch
        return self.topology_level[first][second]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if self.gpus[handle].nvlink_error is not None:
            raise NVMLError(self.gpus[handle].nvlink_error)
        peers = self.gpus[handle].nvlink_peers
        if link >= len(peers):
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return self.NVML_FEATURE_ENABLED if peers[link] else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=(self.gpus[handle].nvlink_peers[link] or "").encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        remote = self.gpus[handle].nvlink_peers[link] or ""
        gpus = {self.bus_id(i) for i in range(len(self.gpus))} | self.hidden_gpu_bus_ids
        if remote in gpus:
            return self.NVML_NVLINK_DEVICE_TYPE_GPU
        return self.NVML_NVLINK_DEVICE_TYPE_SWITCH
