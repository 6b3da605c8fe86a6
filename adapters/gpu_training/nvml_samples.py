"""This node's GPUs, read through NVML, as samples for the control loop's forecast panel.

When ``kubesage serve`` (or ``kubesage loop``) runs where a GPU is present, the GPU
adapter adds :class:`NodeGpuCollector` to the loop (name ``nvml``): every tick it reads
NVML (:class:`~kubesage.adapters.gpu_training.nvml.NvmlCollector`) and lists, for the
node it runs on (``$NODE_NAME``, as the Downward API sets it, else the host name), each
GPU's utilisation under the same metric name dcgm-exporter's column has
(:data:`~kubesage.core.loop.forecasts.GPU_UTIL_METRIC`, percent) and its framebuffer in
use (:data:`FB_USED_METRIC`, MiB) — so forecast-aware placement and ``gpu-elastic``
read NVML and DCGM alike. Where NVML cannot be read the collector raises (the loop falls
back to its last snapshot, marked stale); where it never could — no driver, no GPU —
:func:`node_gpu_collectors` adds nothing.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubesage.adapters.gpu_training.nvml import NvmlCollector, NvmlSnapshot
from kubesage.core.errors import DependencyError
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC
from kubesage.core.perception import Snapshot

NAME = "nvml"
FB_USED_METRIC = "dcgm.fb_used_mib.gpu{gpu}"
"""The metric map's per-GPU framebuffer-in-use column (MiB)."""
NODE_NAME_ENV = "NODE_NAME"


@dataclass(frozen=True)
class NodeGpuSamples:
    """One NVML reading of one node's GPUs (the loop's MetricSamples shape)."""

    node: str
    reading: NvmlSnapshot

    def metric_samples(self) -> Iterable[tuple[str, str, float]]:
        for gpu in self.reading.gpus:
            if gpu.utilization_pct is not None:  # not readable in MIG mode
                yield self.node, GPU_UTIL_METRIC.format(gpu=gpu.index), float(gpu.utilization_pct)
            yield self.node, FB_USED_METRIC.format(gpu=gpu.index), float(gpu.memory_used_mib)


def this_node() -> str:
    """The node this process runs on: ``$NODE_NAME``, else the host name."""
    return os.environ.get(NODE_NAME_ENV) or socket.gethostname()


class NodeGpuCollector:
    """The loop's collector of this node's GPUs (see the module docstring)."""

    def __init__(
        self,
        node: str,
        nvml: Any | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self._reader = NvmlCollector(nvml)
        self._clock = clock

    @property
    def name(self) -> str:
        return NAME

    @property
    def failures(self) -> int:
        return self._reader.failures

    def collect(self) -> Snapshot[NodeGpuSamples]:
        reading = self._reader.collect()
        if not reading.available:
            raise DependencyError(f"NVML on {self.node}: {reading.reason}")
        return Snapshot(NodeGpuSamples(self.node, reading), self._clock())


def node_gpu_collectors(nvml: Any | None = None, node: str | None = None) -> list[NodeGpuCollector]:
    """The NVML collector when this machine's NVML answers with at least one GPU; else none."""
    collector = NodeGpuCollector(node or this_node(), nvml)
    try:
        probe = collector.collect()
    except DependencyError:
        return []
    return [collector] if probe.data.reading.gpus else []
