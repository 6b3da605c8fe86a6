"""Per-node feature vectors: the statistics against numpy, explicit missing values, and
features from real node-exporter and DCGM-replay data read back from Prometheus."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.telemetry.features import (
    FeatureBuilder,
    MetricHistory,
    NodeMetrics,
)
from kubesage.core.telemetry.metric_map import MAX_DIMENSIONS, MetricMap, MetricMapSpec

NAN = np.nan


def small_map(impute: float = -1.0) -> MetricMap:
    return MetricMap(
        MetricMapSpec.model_validate(
            {
                "sources": {
                    "node_exporter": {
                        "node": {"label": "instance"},
                        "metrics": {
                            "load1": {"query": "node_load1", "unit": "tasks", "impute": impute},
                            "util": {
                                "query": "DCGM_FI_DEV_GPU_UTIL",
                                "unit": "percent",
                                "device_label": "gpu",
                                "aggregate": ["mean"],
                                "max_devices": 1,
                            },
                        },
                    }
                }
            }
        )
    )


def history(values: list[list[list[float]]], times: list[float] | None = None) -> MetricHistory:
    array = np.array(values, dtype=np.float64)  # [t, n, c]
    steps, nodes, columns = array.shape
    builder = FeatureBuilder(small_map())
    assert columns == len(builder.columns)
    return MetricHistory(
        np.array(times if times is not None else np.arange(steps), dtype=np.float64),
        tuple(f"n{i}" for i in range(nodes)),
        builder.columns,
        array,
    )


def test_names_are_column_then_stat_and_a_missing_flag() -> None:
    builder = FeatureBuilder(small_map())
    assert builder.columns == ("node_exporter.load1", "node_exporter.util.mean",
                               "node_exporter.util.gpu0")  # fmt: skip
    assert builder.names[:6] == tuple(
        f"node_exporter.load1:{s}" for s in ("last", "mean", "max", "p95", "slope", "missing")
    )
    assert builder.width == 3 * 6


def test_statistics_match_numpy_on_a_complete_window() -> None:
    series = [1.0, 3.0, 2.0, 6.0, 5.0]
    times = [0.0, 2.0, 4.0, 6.0, 8.0]
    window = history([[[v, 10 * v, 10 * v]] for v in series], times)
    features = FeatureBuilder(small_map()).node_features(window)
    row = dict(zip(features.names, features.row("n0"), strict=True))
    assert row["node_exporter.load1:last"] == 5.0
    assert row["node_exporter.load1:mean"] == pytest.approx(np.mean(series))
    assert row["node_exporter.load1:max"] == 6.0
    assert row["node_exporter.load1:p95"] == pytest.approx(np.percentile(series, 95))
    assert row["node_exporter.load1:slope"] == pytest.approx(np.polyfit(times, series, 1)[0])
    assert row["node_exporter.load1:missing"] == 0.0
    assert row["node_exporter.util.mean:max"] == 60.0


def test_gaps_are_skipped_flagged_and_never_silently_zero() -> None:
    # node 0: load1 missing at two of four steps; node 1: util never seen
    window = history(
        [
            [[2.0, 50.0, 50.0], [1.0, NAN, NAN]],
            [[NAN, 60.0, 60.0], [1.0, NAN, NAN]],
            [[4.0, 70.0, 70.0], [1.0, NAN, NAN]],
            [[NAN, 80.0, 80.0], [1.0, NAN, NAN]],
        ]
    )
    features = FeatureBuilder(small_map(impute=-1.0)).node_features(window)
    n0 = dict(zip(features.names, features.row("n0"), strict=True))
    assert n0["node_exporter.load1:last"] == 4.0  # held over the trailing gap
    assert n0["node_exporter.load1:mean"] == 3.0
    assert n0["node_exporter.load1:slope"] == pytest.approx(1.0)  # two points, 2 s apart
    assert n0["node_exporter.load1:missing"] == 0.5
    n1 = dict(zip(features.names, features.row("n1"), strict=True))
    assert n1["node_exporter.util.gpu0:missing"] == 1.0
    assert n1["node_exporter.util.gpu0:mean"] == 0.0  # the map's declared impute (default 0)
    assert n1["node_exporter.load1:slope"] == 0.0  # flat
    assert np.isfinite(features.values).all()


@pytest.mark.parametrize("infinity", [np.inf, -np.inf])
def test_an_infinite_sample_counts_as_missing_in_every_statistic(infinity: float) -> None:
    window = history([[[v, 1.0, 1.0]] for v in (10.0, 20.0, infinity, 30.0)])
    features = FeatureBuilder(small_map()).node_features(window)
    row = dict(zip(features.names, features.row("n0"), strict=True))
    assert np.isfinite(features.values).all()
    assert row["node_exporter.load1:p95"] == pytest.approx(np.percentile([10, 20, 30], 95))
    assert row["node_exporter.load1:max"] == 30.0 and row["node_exporter.load1:last"] == 30.0
    assert row["node_exporter.load1:missing"] == 0.25


def test_imputed_value_comes_from_the_map() -> None:
    window = history([[[NAN, 1.0, 1.0]]])
    features = FeatureBuilder(small_map(impute=-1.0)).node_features(window)
    assert features.feature("node_exporter.load1:mean")[0] == -1.0
    assert features.feature("node_exporter.load1:missing")[0] == 1.0


def test_snapshots_stack_into_a_window_over_the_union_of_nodes() -> None:
    builder = FeatureBuilder(small_map())
    columns = builder.columns
    first = NodeMetrics(("a",), columns, np.array([[1.0, 2.0, 3.0]]), taken_at=10.0)
    second = NodeMetrics(("b", "a"), columns, np.array([[5.0, 5.0, 5.0], [3.0, 2.0, 3.0]]), 11.0)
    stacked = MetricHistory.from_snapshots([first, second])
    assert stacked.nodes == ("a", "b")
    assert np.isnan(stacked.values[0, 1]).all()
    features = builder.node_features(stacked)
    assert features.feature("node_exporter.load1:slope")[0] == pytest.approx(2.0)
    assert features.feature("node_exporter.load1:missing")[1] == 0.5
    aligned = stacked.aligned(["c", "a"])
    assert np.isnan(aligned.values[:, 0]).all()
    assert builder.instant_features(first).feature("node_exporter.load1:last")[0] == 1.0


def test_columns_of_another_map_are_rejected() -> None:
    window = history([[[1.0, 2.0, 3.0]]])
    other = MetricHistory(window.times_s, window.nodes, ("x", "y", "z"), window.values)
    with pytest.raises(InputError, match="not the metric map's"):
        FeatureBuilder(small_map()).node_features(other)
    with pytest.raises(InputError, match="fewer than one window"):
        FeatureBuilder(small_map()).training_matrix(window, 4)


def test_features_from_real_node_exporter_and_dcgm_data(
    real_history: MetricHistory, test_map: MetricMap
) -> None:
    builder = FeatureBuilder(test_map)
    assert builder.width <= MAX_DIMENSIONS
    features = builder.node_features(real_history)
    assert features.values.shape == (len(real_history.nodes), builder.width)
    assert np.isfinite(features.values).all()
    node0 = dict(zip(features.names, features.row("gpu-node-0"), strict=True))
    assert 0.0 <= node0["node_exporter.cpu_busy_fraction:mean"] <= 1.0
    assert node0["node_exporter.cpu_busy_fraction:missing"] < 0.2
    assert node0["node_exporter.memory_available_bytes:last"] > 0
    assert node0["dcgm.gpu_util_percent.gpu0:missing"] < 0.2
    assert node0["dcgm.gpu_util_percent.gpu7:missing"] == 1.0  # 4 GPUs: slots 4-7 padded
    node1 = dict(zip(features.names, features.row("gpu-node-1"), strict=True))
    assert node1["node_exporter.cpu_busy_fraction:missing"] == 1.0
    assert node1["dcgm.fb_used_mib.gpu1:missing"] < 0.2
    assert node0["ebpf.tcp_retransmits_per_s:missing"] == 1.0
