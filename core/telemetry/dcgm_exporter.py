"""A small exporter that serves dcgm-exporter's metrics replayed from the GenAI trace.

No NVIDIA GPU or DCGM runs on the machines that test kubesage, so this stands in for
NVIDIA's dcgm-exporter on one GPU node: it speaks the same Prometheus text format,
with dcgm-exporter's metric names (``DCGM_FI_DEV_*``, ``DCGM_FI_PROF_*``), HELP texts
and labels (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``Hostname``, ``DCGM_FI_DRIVER_VERSION`` and, with Kubernetes pod mapping,
``container``/``namespace``/``pod``). It is a fake, named as one; its values are not.

Values come from the Alibaba GenAI serving trace (``genai/`` in the shared data
folder, read with :func:`kubesage.core.forecast.panel.read_panel`): GPU ``i`` of the
simulated host replays pod ``pods[i]``.

- ``DCGM_FI_DEV_GPU_UTIL`` = the pod's ``gpu_duty_cycle`` (%), as an integer.
- ``DCGM_FI_DEV_FB_USED`` = ``gpu_memory_used_bytes`` in MiB; ``DCGM_FI_DEV_FB_FREE``
  = the declared frame-buffer size minus that.
- ``DCGM_FI_PROF_*``: the trace holds no profiling counters, so these are *derived*
  from the duty cycle with the declared :class:`DerivedRatios` (documented
  assumptions, not measurements). ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is the duty
  cycle as a ratio; SM, tensor-pipe and DRAM activity are fixed shares of it.

A step where the pod is not running shows an idle GPU without pod labels. A step
where the pod runs but the trace lacks a metric repeats the pod's latest earlier
reading, as DCGM serves the latest sample of a field; with no earlier reading the
series is left out, as dcgm-exporter does for a blank field. Replay speed is trace seconds per wall
second (``speed=57`` plays one 57 s trace step per second); the trace loops.

Run one by hand::

    python -m kubesage.core.telemetry.dcgm_exporter --data-dir DIR/genai \
        --hostname gpu-node-0 --gpus 8 --port 9400 --speed 57

``--data-dir`` defaults to ``$KUBESAGE_SHARED_DATA/genai`` when that variable is set;
with neither, the command stops and says so (the trace is not part of the package).
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError, KubesageError
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.paths import SHARED_DATA_ENV, shared_trace_dir

LOG = logging.getLogger(__name__)

DUTY_CYCLE = "gpu_duty_cycle"
MEMORY_USED = "gpu_memory_used_bytes"
MIB = 1 << 20

HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is active.",
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "Ratio of cycles the device memory interface is active sending or receiving data."
    ),
}
"""The metrics served, with dcgm-exporter's own HELP texts (etc/dcp-metrics-included.csv)."""

LABELS = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "container",
    "namespace",
    "pod",
)


@dataclass(frozen=True, slots=True)
class DerivedRatios:
    """Declared shares that turn the trace's duty cycle into DCGM profiling ratios."""

    sm_active_per_gr_engine: float = 0.85
    """SM activity ≤ graphics-engine activity: not every active cycle keeps all SMs busy."""
    tensor_active_per_sm_active: float = 0.45
    """Diffusion serving is convolution/attention heavy: about half the SM time in HMMA."""
    dram_active_per_gr_engine: float = 0.35
    """Memory-interface activity as a share of engine activity."""


@dataclass(frozen=True, slots=True)
class GpuModel:
    """What the replay reports as the GPU (the trace does not name one)."""

    name: str = "NVIDIA L20"
    """A 48 GB part: the trace's largest frame-buffer reading is 47.3 GiB."""
    fb_total_mib: int = 49_152
    driver_version: str = "535.161.08"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's readings at one trace step; ``None`` where the trace has no value."""

    index: int
    pod: str | None
    values: dict[str, float | None]


def _held(panel: MetricPanel, columns: IntArray, metric: str) -> FloatArray:
    """``[steps, gpus]`` readings of ``metric`` with each gap holding the latest earlier
    reading of the same pod, and the steps before its first reading holding that first
    one: DCGM reports a pod's GPU from the start, the trace's sampling of it may begin
    later. NaN only for a pod the trace never read."""
    m = panel.metrics.index(metric)
    observed = panel.mask[:, columns, m]
    steps = np.arange(panel.steps)[:, np.newaxis]
    latest = np.maximum.accumulate(np.where(observed, steps, -1), axis=0)
    values = panel.values[:, columns, m]
    held = np.take_along_axis(values, np.maximum(latest, 0), axis=0)
    first = np.take_along_axis(values, np.argmax(observed, axis=0)[np.newaxis, :], axis=0)
    before = np.where(observed.any(axis=0), first, np.nan)
    return np.where(latest >= 0, held, before)


def busiest_pods(panel: MetricPanel, count: int) -> list[str]:
    """The ``count`` pods with the highest mean GPU duty cycle (ties by name): the
    replay then shows busy GPUs rather than the trace's many idle ones."""
    if DUTY_CYCLE not in panel.metrics:
        raise InputError(f"the trace has no {DUTY_CYCLE} metric (has {', '.join(panel.metrics)})")
    if not 0 < count <= len(panel.entities):
        raise InputError(f"asked for {count} pods; the trace has {len(panel.entities)}")
    m = panel.metrics.index(DUTY_CYCLE)
    observed = panel.mask[:, :, m]
    sums = np.where(observed, panel.values[:, :, m], 0.0).sum(axis=0)
    means = sums / np.maximum(observed.sum(axis=0), 1)
    order = sorted(range(len(panel.entities)), key=lambda n: (-means[n], panel.entities[n]))
    return [panel.entities[n] for n in order[:count]]


class DcgmReplay:
    """The replay's state: which trace step a wall-clock time shows, and its samples."""

    def __init__(
        self,
        panel: MetricPanel,
        *,
        hostname: str,
        pods: Sequence[str],
        speed: float = 1.0,
        start_step: int = 0,
        gpu_model: GpuModel | None = None,
        ratios: DerivedRatios | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        missing = [m for m in (DUTY_CYCLE, MEMORY_USED) if m not in panel.metrics]
        if missing:
            raise InputError(f"the trace lacks metric(s) {', '.join(missing)}")
        if not pods:
            raise InputError("a replayed host needs at least one GPU (pod)")
        index = {entity: n for n, entity in enumerate(panel.entities)}
        unknown = [pod for pod in pods if pod not in index]
        if unknown:
            raise InputError(f"pod(s) not in the trace: {', '.join(unknown[:5])}")
        if not (math.isfinite(speed) and speed > 0):
            raise InputError(f"replay speed must be a positive number, got {speed}")
        self.panel = panel
        self.hostname = hostname
        self.pods = tuple(pods)
        self.speed = speed
        self.start_step = start_step % panel.steps
        self.gpu_model = gpu_model or GpuModel()
        self.ratios = ratios or DerivedRatios()
        self._clock = clock
        self._started_s = clock()
        columns = np.array([index[pod] for pod in pods], dtype=np.int64)
        self._duty = _held(panel, columns, DUTY_CYCLE)
        self._memory = _held(panel, columns, MEMORY_USED)
        self._alive = panel.alive[:, columns]

    def step_at(self, now_s: float) -> int:
        """The trace step shown at wall time ``now_s`` (the trace loops at its end)."""
        elapsed = max(0.0, now_s - self._started_s) * self.speed
        return (self.start_step + int(elapsed // self.panel.step_s)) % self.panel.steps

    def samples(self, step: int) -> list[GpuSample]:
        """Every GPU's readings at trace ``step``."""
        out = []
        for gpu, pod in enumerate(self.pods):
            if not self._alive[step, gpu]:
                out.append(GpuSample(gpu, None, self._readings(0.0, 0.0)))
                continue
            duty, memory = self._duty[step, gpu], self._memory[step, gpu]
            out.append(
                GpuSample(
                    gpu,
                    pod,
                    self._readings(
                        None if np.isnan(duty) else float(duty),
                        None if np.isnan(memory) else float(memory),
                    ),
                )
            )
        return out

    def _readings(
        self, duty_percent: float | None, memory_bytes: float | None
    ) -> dict[str, float | None]:
        ratios = self.ratios
        engine = None if duty_percent is None else min(max(duty_percent, 0.0), 100.0) / 100.0
        used_mib = None if memory_bytes is None else round(max(memory_bytes, 0.0) / MIB)
        return {
            "DCGM_FI_DEV_GPU_UTIL": None if engine is None else round(engine * 100.0),
            "DCGM_FI_DEV_FB_USED": used_mib,
            "DCGM_FI_DEV_FB_FREE": (
                None if used_mib is None else max(self.gpu_model.fb_total_mib - used_mib, 0)
            ),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": engine,
            "DCGM_FI_PROF_SM_ACTIVE": (
                None if engine is None else engine * ratios.sm_active_per_gr_engine
            ),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
                None
                if engine is None
                else engine * ratios.sm_active_per_gr_engine * ratios.tensor_active_per_sm_active
            ),
            "DCGM_FI_PROF_DRAM_ACTIVE": (
                None if engine is None else engine * ratios.dram_active_per_gr_engine
            ),
        }

    def labels(self, gpu: int, pod: str | None) -> list[str]:
        """dcgm-exporter's label values for GPU ``gpu``, in :data:`LABELS` order."""
        gpu_uuid = uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.hostname}/gpu{gpu}")
        return [
            str(gpu),
            f"GPU-{gpu_uuid}",
            f"00000000:{0x18 + 0x10 * gpu:02X}:00.0",
            f"nvidia{gpu}",
            self.gpu_model.name,
            self.hostname,
            self.gpu_model.driver_version,
            "" if pod is None else "inference",
            "" if pod is None else "genai-serving",
            "" if pod is None else pod,
        ]

    def metric_families(self) -> list[Metric]:
        """The families served now (the step the clock points at)."""
        step = self.step_at(self._clock())
        families = {
            name: GaugeMetricFamily(name, text, labels=LABELS) for name, text in HELP.items()
        }
        for sample in self.samples(step):
            labels = self.labels(sample.index, sample.pod)
            for name, value in sample.values.items():
                if value is not None:
                    families[name].add_metric(labels, value)
        return list(families.values())


class _ReplayCollector:
    """prometheus_client collector over a :class:`DcgmReplay` (a fresh reading per scrape)."""

    def __init__(self, replay: DcgmReplay) -> None:
        self._replay = replay

    def collect(self) -> Iterable[Metric]:
        return self._replay.metric_families()


class DcgmReplayExporter:
    """Serves one replayed GPU host at ``http://HOST:PORT/metrics`` from a daemon thread.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, replay: DcgmReplay, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.replay = replay
        self.host = host
        self._requested_port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise InputError("the exporter is not running")
        return int(self._server.server_port)

    @property
    def address(self) -> str:
        """``host:port``, as a Prometheus scrape target."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def start(self) -> DcgmReplayExporter:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ReplayCollector(self.replay))
        self._server, self._thread = start_http_server(
            self._requested_port, addr=self.host, registry=registry
        )
        LOG.info("dcgm replay for %s serving %s", self.replay.hostname, self.url)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> DcgmReplayExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def default_genai_dir() -> Path | None:
    """The shared GenAI trace (:func:`kubesage.core.paths.shared_trace_dir`), or None."""
    return shared_trace_dir("genai")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Serve DCGM metrics replayed from the GenAI trace."
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"the trace's genai/ folder (default: ${SHARED_DATA_ENV}/genai when set, "
        "else shared/data/genai beside the checkout)",
    )
    parser.add_argument("--hostname", default="gpu-node-0", help="the Hostname label")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs on the host (busiest pods)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--speed", type=float, default=1.0, help="trace seconds per second")
    args = parser.parse_args(argv)
    try:
        data_dir = args.data_dir or default_genai_dir()
        if data_dir is None:
            parser.error(
                f"give --data-dir (the GenAI trace's genai/ folder) or set {SHARED_DATA_ENV}"
            )
        panel = read_panel(data_dir)
    except KubesageError as exc:  # a bad folder or trace file: one line, not a traceback
        parser.error(str(exc))
    replay = DcgmReplay(
        panel, hostname=args.hostname, pods=busiest_pods(panel, args.gpus), speed=args.speed
    )
    exporter = DcgmReplayExporter(replay, host=args.host, port=args.port).start()
    print(f"serving {exporter.url} (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        exporter.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
