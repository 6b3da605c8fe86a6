"""PrometheusCollector against canned Prometheus HTTP API replies (fake_prometheus):
dcgm-exporter's MIG series, 200 replies that are not API responses, error bodies and
series the map cannot place."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from kubesage.core.observability.metrics import REGISTRY
from kubesage.core.telemetry.metric_map import MetricMap, MetricMapSpec, load_metric_map
from kubesage.core.telemetry.prometheus import PrometheusCollector, PrometheusUnavailableError
from tests.core.telemetry.fake_prometheus import Reply, empty, fake_prometheus, matrix, vector


def dcgm_labels(gpu: int, metric: str, **extra: str) -> dict[str, str]:
    """dcgm-exporter's label set for one GPU (as Prometheus stores it)."""
    return {
        "__name__": metric,
        "gpu": str(gpu),
        "UUID": f"GPU-5f3c1a2b-0000-0000-0000-00000000000{gpu}",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA A100-SXM4-80GB",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "instance": "10.0.0.5:9400",
        "job": "dcgm-exporter",
        **extra,
    }


def mig_reply(path: str, params: Mapping[str, str]) -> Reply:
    """gpu-node-0: 2 A100s in MIG mode, two 3g.40gb instances each; every instance uses
    10000 MiB; the whole-GPU power reading is repeated on each instance's series."""
    query = params.get("query", "")
    if not query.startswith("DCGM_FI_") or 'GPU_I_ID=""' in query:
        return empty(path, params)  # every series here has a GPU_I_ID
    value = {"DCGM_FI_DEV_FB_USED": "10000", "DCGM_FI_DEV_POWER_USAGE": "200"}.get(query, "30")
    return vector(
        [
            (
                dcgm_labels(
                    gpu,
                    query,
                    Hostname="gpu-node-0",
                    GPU_I_ID=str(instance),
                    GPU_I_PROFILE="3g.40gb",
                ),
                value,
            )
            for gpu in (0, 1)
            for instance in (1, 2)
        ]
    )


def failures_metric() -> float:
    value = REGISTRY.get_sample_value(
        "kubesage_collector_failures_total", {"collector": "prometheus"}
    )
    return value or 0.0


def test_mig_instances_of_one_gpu_are_devices_of_their_own() -> None:
    with fake_prometheus(mig_reply) as url:
        collector = PrometheusCollector(url, load_metric_map())
        data = collector.collect().data
        collector.close()
    assert data.nodes == ("gpu-node-0",)
    assert data.column("dcgm.fb_used_mib.sum")[0] == 40_000  # 4 instances, not 2 averaged
    slots = [data.column(f"dcgm.fb_used_mib.gpu{i}")[0] for i in range(8)]
    assert slots[:2] == [20_000] * 2 and np.isnan(slots[2:]).all()  # slot i is GPU i
    # DCGM does not measure utilisation per instance: missing, not a false 0.
    assert np.isnan(data.column("dcgm.gpu_util_percent.mean")[0])
    assert data.column("dcgm.gr_engine_active.max")[0] == 30
    # a whole-GPU reading copied onto each instance is counted once per GPU
    assert data.column("dcgm.power_usage_watts")[0] == 400


@pytest.mark.parametrize(
    "body",
    [
        {"status": "error", "errorType": "bad_data", "error": "x"},  # a 200 with no data
        [],  # a 200 whose body is a list (a proxy's)
        {"status": "success", "data": None},
        b"<html><body>Sign in to continue</body></html>",  # a proxy's login page
    ],
)
def test_a_200_reply_without_data_result_is_a_failure_with_the_fallback(body: object) -> None:
    replies: dict[str, object] = {"body": None}

    def handler(path: str, params: Mapping[str, str]) -> Reply:
        return empty(path, params) if replies["body"] is None else (200, replies["body"])

    with fake_prometheus(handler) as url:
        collector = PrometheusCollector(url, load_metric_map())
        good = collector.collect()
        replies["body"] = body
        counted = failures_metric()
        stale = collector.collect()
        collector.close()
    assert stale.stale and stale.data is good.data
    assert collector.failures == 1 and failures_metric() == counted + 1
    assert stale.reason is not None
    assert "not a Prometheus API response" in stale.reason
    first_query = load_metric_map().metrics[0].query
    assert f"query {first_query!r}" in stale.reason


def test_before_a_good_snapshot_a_bad_200_is_a_dependency_error() -> None:
    with fake_prometheus(lambda path, params: (200, [])) as url:
        collector = PrometheusCollector(url, load_metric_map())
        with pytest.raises(PrometheusUnavailableError, match="not a Prometheus API response"):
            collector.collect()
    assert collector.failures == 1


LONG_ERROR = (
    "query processing would load too many samples into memory in query execution; "
    "raise --query.max-samples or narrow the query " + "x" * 150
)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            422,
            {"status": "error", "errorType": "execution", "error": LONG_ERROR},
            f"HTTP 422 execution: {LONG_ERROR} (query ",
        ),
        (
            400,
            {
                "status": "error",
                "errorType": "bad_data",
                "error": 'invalid parameter "query": 1:1: parse error: unexpected character',
            },
            'HTTP 400 bad_data: invalid parameter "query": 1:1: parse error: unexpected character',
        ),
        (404, b"", "HTTP 404: no Prometheus API at "),
        (502, "Bad gateway: café".encode(), "HTTP 502: Bad gateway: café"),
    ],
)
def test_error_bodies_are_decoded_and_their_text_kept_whole(
    status: int, body: object, expected: str
) -> None:
    with fake_prometheus(lambda path, params: (status, body)) as url:
        collector = PrometheusCollector(url, load_metric_map(), attempts=1)
        with pytest.raises(PrometheusUnavailableError) as caught:
            collector.collect()
    message = str(caught.value)
    assert expected in message
    assert "b'" not in message and "\\x" not in message


def hostname_lower(path: str, params: Mapping[str, str]) -> Reply:
    """dcgm-exporter series labelled ``hostname`` (lower case), not ``Hostname``."""
    query = params.get("query", "")
    if not query.startswith("DCGM_FI_"):
        return empty(path, params)
    return vector([(dcgm_labels(gpu, query, hostname="gpu-node-0"), "5") for gpu in (0, 1)])


def test_series_without_the_node_label_are_counted_with_the_labels_they_had() -> None:
    with fake_prometheus(hostname_lower) as url:
        collector = PrometheusCollector(url, load_metric_map())
        snapshot = collector.collect()
        collector.close()
    assert snapshot.data.nodes == ()
    dcgm_metrics = sum(1 for m in load_metric_map().metrics if m.source == "dcgm")
    assert list(collector.dropped) == ["dcgm"]
    line = collector.dropped["dcgm"].describe()
    assert line.startswith(f"dcgm: {2 * dcgm_metrics} series had no 'Hostname' label")
    assert "hostname" in line and "UUID" in line and "__name__" not in line


def test_series_that_appear_part_way_through_a_history_are_read_in_halved_chunks() -> None:
    # 40 GPUs' series appear 100 s into a 600 s history (an exporter deployed then).
    # The first chunks see none and grow; Prometheus, like a real one past
    # --query.max-samples, refuses a chunk of too many samples: it is asked again in
    # halves, and every later chunk is sized for the 40 series.
    appear, limit, asked = 1_000_100.0, 2_000, []

    def handler(path: str, params: Mapping[str, str]) -> Reply:
        if path != "/api/v1/query_range":
            return empty(path, params)
        start, end, step = (float(params[k]) for k in ("start", "end", "step"))
        times = np.arange(start, end + step / 2, step)
        shown = times[times >= appear]
        asked.append(len(times))
        if len(shown) * 40 > limit:
            return 422, {
                "status": "error",
                "errorType": "execution",
                "error": "query processing would load too many samples into memory in "
                "query execution",
            }
        gpus = range(40) if len(shown) else range(0)  # a series without points is left out
        return matrix([({"Hostname": "n", "gpu": str(g)}, [(t, "1") for t in shown]) for g in gpus])

    spec = {
        "sources": {
            "dcgm": {
                "node": {"label": "Hostname"},
                "metrics": {"fb": {"query": "DCGM_FI_DEV_FB_USED", "unit": "mib",
                                   "device_label": "gpu", "aggregate": ["sum"]}},
            }
        }
    }  # fmt: skip
    metric_map = MetricMap(MetricMapSpec.model_validate(spec))
    with fake_prometheus(handler) as url:
        collector = PrometheusCollector(url, metric_map, max_samples_per_query=400)
        history = collector.history(1_000_000.0, 1_000_600.0, 1.0)
        collector.close()
    total = history.values[:, 0, 0]
    assert np.isnan(total[:100]).all() and (total[100:] == 40).all()
    assert max(asked) <= 400 and asked[0] == 60  # the probe, then never over our limit
    assert all(points <= 10 for points in asked[-5:])  # 400 samples / 40 series
