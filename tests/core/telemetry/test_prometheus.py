"""PrometheusCollector against a real Prometheus scraping a real node-exporter and the
DCGM replay: node columns, per-GPU slots, history, and the stale fallback when
Prometheus stops."""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubesage.core.errors import DependencyError
from kubesage.core.observability.metrics import REGISTRY
from kubesage.core.perception import Collector
from kubesage.core.telemetry.dcgm_exporter import DcgmReplayExporter, GpuModel
from kubesage.core.telemetry.features import MetricHistory
from kubesage.core.telemetry.metric_map import MappedMetric, MetricMap, MetricMapSpec
from kubesage.core.telemetry.prometheus import (
    MAX_POINTS_PER_SERIES,
    PrometheusCollector,
    PrometheusUnavailableError,
    chunk_points,
    reduce_series,
)
from tests.core.telemetry.conftest import (
    GPU_NODES,
    HISTORY_S,
    PrometheusServer,
    free_port,
    start_prometheus,
    wait_until,
)


def failures_metric() -> float:
    value = REGISTRY.get_sample_value(
        "kubesage_collector_failures_total", {"collector": "prometheus"}
    )
    return value or 0.0


def meminfo_total_bytes() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return float(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_collector_implements_the_protocol(test_map: MetricMap) -> None:
    collector = PrometheusCollector("http://127.0.0.1:9", test_map)
    assert isinstance(collector, Collector)
    assert collector.name == "prometheus" and collector.failures == 0


def test_snapshot_has_node_exporter_and_dcgm_columns_per_node(
    prometheus: PrometheusServer, test_map: MetricMap
) -> None:
    collector = PrometheusCollector(prometheus.url, test_map)
    snapshot = collector.collect()
    data = snapshot.data
    assert not snapshot.stale and snapshot.reason is None
    assert data.nodes == tuple(sorted(GPU_NODES))
    assert data.columns == test_map.columns
    node = data.nodes.index("gpu-node-0")
    busy = data.column("node_exporter.cpu_busy_fraction")[node]
    assert 0.0 <= busy <= 1.0
    available = data.column("node_exporter.memory_available_bytes")[node]
    assert 0 < available <= meminfo_total_bytes()
    assert data.column("node_exporter.load1")[node] >= 0
    # gpu-node-1 runs no node-exporter: its node columns are absent, not zero
    assert np.isnan(data.column("node_exporter.cpu_busy_fraction")[data.nodes.index("gpu-node-1")])
    # no eBPF exporter runs here: those columns are absent everywhere
    assert np.isnan(data.column("ebpf.run_queue_latency_p99_s")).all()


def test_gpu_columns_hold_per_gpu_slots_and_their_aggregates(
    prometheus: PrometheusServer, test_map: MetricMap
) -> None:
    data = PrometheusCollector(prometheus.url, test_map).collect().data
    for hostname, gpus in GPU_NODES.items():
        n = data.nodes.index(hostname)
        used = np.array([data.column(f"dcgm.fb_used_mib.gpu{i}")[n] for i in range(8)])
        assert np.isfinite(used[:gpus]).all() and np.isnan(used[gpus:]).all()
        assert data.column("dcgm.fb_used_mib.sum")[n] == pytest.approx(used[:gpus].sum())
        assert data.column("dcgm.fb_used_mib.max")[n] == pytest.approx(used[:gpus].max())
        free_sum = data.column("dcgm.fb_free_mib.sum")[n]
        assert used[:gpus].sum() + free_sum == pytest.approx(gpus * GpuModel().fb_total_mib)
        util = np.array([data.column(f"dcgm.gpu_util_percent.gpu{i}")[n] for i in range(gpus)])
        assert ((util >= 0) & (util <= 100)).all()


def test_history_is_a_regular_grid_of_every_column(
    real_history: MetricHistory, test_map: MetricMap
) -> None:
    assert real_history.columns == test_map.columns
    assert np.allclose(np.diff(real_history.times_s), 1.0)
    node = real_history.nodes.index("gpu-node-0")
    busy = real_history.values[:, node, test_map.columns.index("node_exporter.cpu_busy_fraction")]
    assert np.isfinite(busy).mean() > 0.8
    util = real_history.values[:, node, test_map.columns.index("dcgm.gpu_util_percent.gpu0")]
    assert np.unique(util[np.isfinite(util)]).size > 1  # the replay moves through the trace


def test_a_long_history_is_read_in_chunks_that_stitch_back_exactly(
    prometheus: PrometheusServer, test_map: MetricMap
) -> None:
    assert prometheus.samples_since is not None
    end = prometheus.samples_since + HISTORY_S
    time.sleep(max(0.0, end + 5 - time.time()))  # every sample of the range has landed
    whole = PrometheusCollector(prometheus.url, test_map)
    chunked = PrometheusCollector(prometheus.url, test_map, max_samples_per_query=8)
    queries: list[tuple[float, float]] = []
    real_query = chunked._client.custom_query_range

    def counted(query: str, *, start_time: datetime, end_time: datetime, step: str) -> Any:
        queries.append((start_time.timestamp(), end_time.timestamp()))
        return real_query(query, start_time=start_time, end_time=end_time, step=step)

    chunked._client.custom_query_range = counted  # type: ignore[method-assign]
    try:
        expected = whole.history(end - HISTORY_S, end, 1.0)
        got = chunked.history(end - HISTORY_S, end, 1.0)
    finally:
        whole.close()
        chunked.close()
    assert len(queries) > 2 * len(test_map.metrics)  # several queries per metric
    assert got.nodes == expected.nodes and got.columns == expected.columns
    assert np.array_equal(got.times_s, expected.times_s)
    assert np.array_equal(got.values, expected.values, equal_nan=True)
    assert np.isfinite(got.values).any()


@pytest.mark.parametrize(
    ("step_s", "wanted", "total", "points"),
    [
        (5.0, 100, 4320, 100),
        (5.0, 50_000, 100_000, MAX_POINTS_PER_SERIES),  # Prometheus's own limit
        (5.0, 0, 4320, 1),
        (0.5, 101, 4320, 100),  # two half-second steps make a whole second
        (0.3, 25, 4320, 20),
        (0.3, 5, 4320, 10),
        (math.pi, 100, 4320, 4320),  # no whole-second multiple: one query
    ],
)
def test_chunks_start_on_whole_seconds_within_prometheus_limits(
    step_s: float, wanted: int, total: int, points: int
) -> None:
    assert chunk_points(step_s, wanted, total) == points


def test_prometheus_stopped_mid_test_gives_the_stale_snapshot_and_counts(
    tmp_path: Path,
    node_exporter: str,
    dcgm_exporters: dict[str, DcgmReplayExporter],
    test_map: MetricMap,
) -> None:
    server = start_prometheus(tmp_path, node_exporter, [e.address for e in dcgm_exporters.values()])
    reasons: list[str] = []
    try:
        query = test_map.metrics[0].query
        wait_until(lambda: bool(server.query(query)), timeout_s=30, what=query)
        collector = PrometheusCollector(server.url, test_map, on_failure=reasons.append)
        good = collector.collect()
        assert not good.stale
    finally:
        server.stop()
    counted = failures_metric()
    stale = collector.collect()
    assert stale.stale
    assert stale.reason is not None and "unreachable" in stale.reason
    assert stale.data is good.data and stale.taken_at == good.taken_at
    assert collector.failures == 1 and len(reasons) == 1
    assert failures_metric() == counted + 1
    assert collector.collect().stale and collector.failures == 2
    with pytest.raises(PrometheusUnavailableError):
        collector.history(time.time() - 5, time.time(), 1.0)


def test_no_good_snapshot_yet_is_a_dependency_error(test_map: MetricMap) -> None:
    reasons: list[str] = []
    collector = PrometheusCollector(
        f"http://127.0.0.1:{free_port()}", test_map, on_failure=reasons.append
    )
    with pytest.raises(DependencyError, match="no earlier good snapshot"):
        collector.collect()
    assert collector.failures == 1 and reasons == [collector.last_error]


def test_a_query_prometheus_rejects_is_a_failure_not_a_crash(
    prometheus: PrometheusServer,
) -> None:
    spec = MetricMapSpec.model_validate(
        {
            "sources": {
                "node_exporter": {
                    "node": {"label": "instance"},
                    "metrics": {"broken": {"query": "rate(node_load1[", "unit": "x"}},
                }
            }
        }
    )
    collector = PrometheusCollector(prometheus.url, MetricMap(spec))
    with pytest.raises(PrometheusUnavailableError, match="400"):
        collector.collect()
    assert collector.failures == 1


def dcgm_metric(device_label: str | list[str], aggregate: list[str], slots: int) -> MappedMetric:
    spec = MetricMapSpec.model_validate(
        {
            "sources": {
                "dcgm": {
                    "node": {"label": "Hostname", "relabel": [{"regex": "(.*)\\.example"}]},
                    "metrics": {
                        "util": {
                            "query": "DCGM_FI_DEV_GPU_UTIL",
                            "unit": "percent",
                            "device_label": device_label,
                            "aggregate": aggregate,
                            "max_devices": slots,
                        }
                    },
                }
            }
        }
    )
    [metric] = MetricMap(spec).metrics
    return metric


def one_step(labels: dict[str, str], value: float) -> tuple[dict[str, str], np.ndarray]:
    return {"Hostname": "a.example", **labels}, np.array([value])


def test_series_reduce_to_aggregates_and_slots_by_gpu_index() -> None:
    metric = dcgm_metric("gpu", ["mean", "max"], 3)
    reduced = reduce_series(
        metric,
        [
            one_step({"gpu": "10"}, 40.0),
            one_step({"gpu": "2"}, 20.0),
            one_step({"gpu": "2"}, 30.0),  # a second scrape job: averaged with the first
            one_step({"gpu": "0"}, float("nan")),
            ({"gpu": "1"}, np.array([99.0])),  # no node label: dropped
        ],
        1,
    )
    assert list(reduced) == ["a"]  # relabelled: the ".example" suffix is gone
    mean, top, slot0, slot1, slot2 = reduced["a"][0]
    assert mean == pytest.approx((25.0 + 40.0) / 2) and top == 40.0
    # Slot i is GPU i: GPU 1 reported nothing here, so its slot stays empty rather than
    # GPU 2 moving into it; GPU 10 has no slot of its own.
    assert np.isnan(slot0) and np.isnan(slot1) and slot2 == 25.0


def test_a_per_node_metric_scraped_twice_is_averaged_not_added() -> None:
    spec = MetricMapSpec.model_validate(
        {
            "sources": {
                "node_exporter": {
                    "node": {"label": "instance"},
                    "metrics": {"load1": {"query": "node_load1", "unit": "tasks"}},
                }
            }
        }
    )
    [metric] = MetricMap(spec).metrics
    reduced = reduce_series(
        metric,
        [
            ({"instance": "a", "job": "node-exporter"}, np.array([2.0, np.nan])),
            ({"instance": "a", "job": "kubernetes-nodes"}, np.array([4.0, 5.0])),
        ],
        2,
    )
    assert reduced["a"][:, 0].tolist() == [3.0, 5.0]


def test_a_gpus_mig_instances_share_its_slot_and_names_fill_slots_in_order() -> None:
    metric = dcgm_metric(["gpu", "GPU_I_ID"], ["sum", "max"], 2)
    reduced = reduce_series(
        metric,
        [
            one_step({"gpu": "0", "GPU_I_ID": "1"}, 10.0),
            one_step({"gpu": "0", "GPU_I_ID": "2"}, 5.0),
            one_step({"gpu": "1"}, 95.0),  # GPU 1 is not in MIG mode
        ],
        1,
    )
    total, top, gpu0, gpu1 = reduced["a"][0]
    assert (total, top) == (110.0, 95.0)
    assert (gpu0, gpu1) == (15.0, 95.0)  # GPU 0's two instances, by the first aggregate
    named = dcgm_metric("device", ["max"], 2)
    reduced = reduce_series(
        named,
        [one_step({"device": "nvme1"}, 2.0), one_step({"device": "nvme0"}, 1.0)],
        1,
    )
    assert list(reduced["a"][0]) == [2.0, 1.0, 2.0]  # not indices: natural order
