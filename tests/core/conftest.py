"""Real Prometheus, real node-exporter and the DCGM replay exporter, for the tests of the
telemetry modules (tests/core/telemetry) and of their CLI (tests/core/cli).

Session fixtures: each service starts at most once per test run, on first use.

The binaries come from Debian's ``prometheus`` and ``prometheus-node-exporter``
packages (``make services``). Everything listens on 127.0.0.1 on free ports and keeps
its data in pytest's temporary folders; Prometheus scrapes every second. The
node-exporter target is relabelled to ``instance="gpu-node-0"``, as kube-prometheus
relabels it to the node name, so it joins the DCGM replay of the same ``Hostname``;
``gpu-node-1`` has GPUs (a second replay) but no node-exporter. Under ``CI=true`` a
missing binary (or the trace) fails the run; elsewhere the tests that need it skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.telemetry.dcgm_exporter import DcgmReplay, DcgmReplayExporter, busiest_pods
from kubesage.core.telemetry.features import MetricHistory
from kubesage.core.telemetry.metric_map import MetricMap, load_metric_map
from kubesage.core.telemetry.prometheus import PrometheusCollector
from tests.builders import shared_data_dir

SCRAPE_INTERVAL_S = 1
RATE_WINDOW = "4s"
"""Four 1 s scrapes: every rate() has samples two scrapes after start."""
TRACE_STEP_PER_S = 57.0
"""Replay speed: one 57 s GenAI trace step per wall second."""
NODE_EXPORTER_COLLECTORS = ("cpu", "loadavg", "meminfo", "netdev", "diskstats", "uname")
HISTORY_S = 20
"""Seconds of scraped history the feature and PCA tests fit on."""
REPLAY_START_STEP = 300
"""Where the replay starts: a busy stretch of the trace (hour 4.75)."""
GPU_NODES = {"gpu-node-0": 4, "gpu-node-1": 2}
"""Replayed GPU hosts and their GPU counts (gpu-node-0 also runs node-exporter)."""


def _missing(what: str, remedy: str = "install it with `make services`") -> None:
    message = f"{what}; {remedy}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def binary(*names: str) -> str:
    """Path of the first installed binary among ``names`` (fails under CI, else skips)."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    _missing(f"{' / '.join(names)} not found on PATH")
    raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Process:
    """A started service process with its log file; ``stop`` ends it (and only it)."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.args = list(args)
        self.log = log
        self._handle = log.open("wb")
        self.popen = subprocess.Popen(
            self.args, stdout=self._handle, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        self._handle.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


@dataclass
class PrometheusServer:
    """A running Prometheus: its URL and process."""

    url: str
    process: Process
    started_at: float
    """Unix time when it became ready."""
    samples_since: float | None = None
    """Unix time from which every rate() of the test map has samples."""

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def stop(self) -> None:
        self.process.stop()


def prometheus_config(node_exporter: str | None, dcgm_targets: Sequence[str]) -> dict[str, Any]:
    """A prometheus.yml scraping node-exporter (relabelled to gpu-node-0) and the replays."""
    jobs: list[dict[str, Any]] = []
    if node_exporter is not None:
        jobs.append(
            {
                "job_name": "node-exporter",
                "static_configs": [{"targets": [node_exporter]}],
                "relabel_configs": [{"target_label": "instance", "replacement": "gpu-node-0"}],
            }
        )
    jobs.append({"job_name": "dcgm-exporter", "static_configs": [{"targets": list(dcgm_targets)}]})
    return {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": "10s",
        },
        "scrape_configs": jobs,
    }


def start_prometheus(
    folder: Path, node_exporter: str | None, dcgm_targets: Sequence[str]
) -> PrometheusServer:
    """Start Prometheus on a free port with temporary storage; wait until it is ready."""
    executable = binary("prometheus")
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(node_exporter, dcgm_targets)))
    port = free_port()
    process = Process(
        [
            executable,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        folder / "prometheus.log",
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, time.time())
    try:
        wait_until(
            lambda: httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200,
            timeout_s=30,
            what=f"Prometheus /-/ready ({process.tail()})",
        )
        server.started_at = time.time()
        expected = len(dcgm_targets) + (node_exporter is not None)
        wait_until(
            lambda: sum(float(r["value"][1]) for r in server.query("up")) == expected,
            timeout_s=30,
            what=f"{expected} targets up",
        )
    except BaseException:
        process.stop()
        raise
    return server


@pytest.fixture(scope="session")
def genai_panel() -> MetricPanel:
    """The real GenAI serving trace (``../shared/data/genai``)."""
    root = shared_data_dir()
    if root is None or not (root / "genai").is_dir():
        _missing(
            "the GenAI trace is not in ../shared/data/genai",
            "place the shared data beside the checkout or set KUBESAGE_SHARED_DATA",
        )
    assert root is not None
    return read_panel(root / "genai")


@pytest.fixture(scope="session")
def dcgm_exporters(genai_panel: MetricPanel) -> Iterator[dict[str, DcgmReplayExporter]]:
    """One replay exporter per GPU node in :data:`GPU_NODES`, busiest trace pods first."""
    pods = busiest_pods(genai_panel, sum(GPU_NODES.values()))
    exporters = {}
    try:
        taken = 0
        for hostname, gpus in GPU_NODES.items():
            replay = DcgmReplay(
                genai_panel,
                hostname=hostname,
                pods=pods[taken : taken + gpus],
                speed=TRACE_STEP_PER_S,
                start_step=REPLAY_START_STEP,
            )
            taken += gpus
            exporters[hostname] = DcgmReplayExporter(replay).start()
        yield exporters
    finally:
        for exporter in exporters.values():
            exporter.stop()


@pytest.fixture(scope="session")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real prometheus-node-exporter on 127.0.0.1; yields its ``host:port``."""
    executable = binary("prometheus-node-exporter", "node_exporter")
    port = free_port()
    args = [executable, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults"]
    args += [f"--collector.{name}" for name in NODE_EXPORTER_COLLECTORS]
    process = Process(args, tmp_path_factory.mktemp("node-exporter") / "node-exporter.log")
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code == 200,
            timeout_s=20,
            what=f"node-exporter ({process.tail()})",
        )
        yield f"127.0.0.1:{port}"
    finally:
        process.stop()


@pytest.fixture(scope="session")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory,
    node_exporter: str,
    dcgm_exporters: dict[str, DcgmReplayExporter],
    test_map: MetricMap,
) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping node-exporter and the DCGM replays every second, with
    enough samples for every rate() of the test metric map."""
    server = start_prometheus(
        tmp_path_factory.mktemp("prometheus"),
        node_exporter,
        [exporter.address for exporter in dcgm_exporters.values()],
    )
    try:
        cpu_query = test_map.metrics[0].query
        wait_until(lambda: bool(server.query(cpu_query)), timeout_s=30, what=cpu_query)
        server.samples_since = time.time()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def real_history(prometheus: PrometheusServer, test_map: MetricMap) -> MetricHistory:
    """:data:`HISTORY_S` seconds of every map column at 1 s steps, read back from the
    session Prometheus through the collector (waits until that much has been scraped)."""
    assert prometheus.samples_since is not None
    ready = prometheus.samples_since + HISTORY_S
    time.sleep(max(0.0, ready - time.time()))
    collector = PrometheusCollector(prometheus.url, test_map)
    try:
        return collector.history(ready - HISTORY_S, ready, 1.0)
    finally:
        collector.close()


@pytest.fixture(scope="session")
def test_map() -> MetricMap:
    """The shipped metric map with a rate window that suits 1 s scrapes."""
    return load_metric_map().with_rate_window(RATE_WINDOW)
