"""The metric map: the shipped file, strict decoding, relabelling and column names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesage.core.errors import ConfigError, InputError
from kubesage.core.telemetry.metric_map import (
    MAX_DIMENSIONS,
    MetricMap,
    MetricSpec,
    RelabelRule,
    load_metric_map,
)


def minimal() -> dict[str, Any]:
    return {
        "apiVersion": "kubesage.io/v1alpha1",
        "kind": "MetricMap",
        "spec": {
            "sources": {
                "node_exporter": {
                    "node": {"label": "instance"},
                    "metrics": {"load1": {"query": "node_load1", "unit": "tasks"}},
                }
            }
        },
    }


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "metric-map.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_shipped_map_covers_every_source_within_the_budget() -> None:
    metric_map = load_metric_map()
    assert set(metric_map.spec.sources) == {"node_exporter", "dcgm", "ebpf"}
    queries = {m.name: m.query for m in metric_map.metrics}
    for needed in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE"):
        assert any(needed in q for q in queries.values()), needed
    assert all("$window" not in q for q in queries.values())
    assert "[1m]" in queries["cpu_busy_fraction"]
    stats = len(metric_map.spec.stats)
    assert len(metric_map.columns) * (stats + 1) <= MAX_DIMENSIONS
    assert len(set(metric_map.columns)) == len(metric_map.columns)


def test_columns_are_named_by_source_metric_aggregate_and_device_slot() -> None:
    metric_map = load_metric_map()
    columns = metric_map.columns
    assert "node_exporter.load1" in columns  # one aggregate, no devices: no suffix
    assert "node_exporter.disk_io_time_fraction.max" in columns
    gpu = [c for c in columns if c.startswith("dcgm.gpu_util_percent")]
    assert gpu == [
        "dcgm.gpu_util_percent.mean",
        "dcgm.gpu_util_percent.max",
        *(f"dcgm.gpu_util_percent.gpu{i}" for i in range(8)),
    ]


def test_rate_window_is_substituted(tmp_path: Path) -> None:
    document = minimal()
    document["spec"]["rate_window"] = "30s"
    document["spec"]["sources"]["node_exporter"]["metrics"]["load1"]["query"] = (
        "rate(node_cpu_seconds_total[$window])"
    )
    metric_map = load_metric_map(write(tmp_path, document))
    assert metric_map.metrics[0].query == "rate(node_cpu_seconds_total[30s])"
    assert metric_map.with_rate_window("5s").metrics[0].query.endswith("[5s])")


@pytest.mark.parametrize("window", ["1h30m", "2d", "1w", "500ms", "1y"])
def test_rate_window_takes_what_promql_takes(tmp_path: Path, window: str) -> None:
    document = minimal()
    document["spec"]["rate_window"] = window
    document["spec"]["sources"]["node_exporter"]["metrics"]["load1"]["query"] = "rate(x[$window])"
    assert load_metric_map(write(tmp_path, document)).metrics[0].query == f"rate(x[{window}])"
    assert load_metric_map().with_rate_window(window).spec.rate_window == window


@pytest.mark.parametrize("window", ["90", "1.5m", "30m1h", "inf", "0s"])
def test_with_rate_window_refuses_what_promql_refuses(window: str) -> None:
    with pytest.raises(InputError, match=rf"^rate window: .*'{re.escape(window)}'"):
        load_metric_map().with_rate_window(window)


def test_the_shipped_map_keys_mig_instances_apart() -> None:
    [fb_used] = [m for m in load_metric_map().metrics if m.name == "fb_used_mib"]
    assert fb_used.spec.device_labels == ("gpu", "GPU_I_ID")
    assert fb_used.columns[2] == "dcgm.fb_used_mib.gpu0"  # slots named by the first label


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d["spec"].update(colour="red"), "spec.colour", "unknown key"),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(labels="x"),
            "spec.sources.node_exporter.metrics.load1.labels",
            "unknown key",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["node"].update(
                relabel=[{"regex": "([a-z"}]
            ),
            "spec.sources.node_exporter.node.relabel.0.regex",
            "not a valid regular expression",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                max_devices=4
            ),
            "spec.sources.node_exporter.metrics.load1",
            "needs a device_label",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                aggregate=["max", "max"]
            ),
            "spec.sources.node_exporter.metrics.load1",
            "repeats",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                aggregate=["median"]
            ),
            "spec.sources.node_exporter.metrics.load1.aggregate.0",
            "",
        ),
        (lambda d: d["spec"].update(rate_window="a minute"), "spec.rate_window", ""),
        (
            lambda d: d["spec"].update(rate_window="90"),
            "spec.rate_window",
            "'90' is not a PromQL duration (e.g. 30s, 1m, 1h30m or 2d)",
        ),
        (lambda d: d["spec"].update(rate_window="0s"), "spec.rate_window", "must be positive"),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["node"].update(
                relabel=[{"regex": "(.+):[0-9]+", "replacement": "$2"}]
            ),
            "spec.sources.node_exporter.node.relabel.0.replacement",
            "refers to group $2, but the regex '(.+):[0-9]+' has 1 group(s)",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                impute=float("nan")
            ),
            "spec.sources.node_exporter.metrics.load1.impute",
            "finite",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                impute=float("inf")
            ),
            "spec.sources.node_exporter.metrics.load1.impute",
            "finite",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                device_label=["gpu", "gpu"]
            ),
            "spec.sources.node_exporter.metrics.load1",
            "distinct, non-empty labels",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                query="rate(node_load1[$windw])"
            ),
            "spec.sources.node_exporter.metrics.load1.query",
            "unknown placeholder $windw: only $window is substituted",
        ),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"]["load1"].update(
                query="rate(node_load1[$__rate_interval])"
            ),
            "spec.sources.node_exporter.metrics.load1.query",
            "unknown placeholder $__rate_interval",
        ),
        (lambda d: d["spec"].update(max_dimensions=2), "spec", "exceed max_dimensions 2"),
        (lambda d: d["spec"].update(max_dimensions=4096), "spec.max_dimensions", ""),
        (lambda d: d["spec"].update(stats=[]), "spec", "not empty"),
        (lambda d: d.update(apiVersion="v2"), "apiVersion", "apiVersion must be"),
        (lambda d: d.update(kind="Simulation"), "kind", "kind must be"),
        (
            lambda d: d["spec"]["sources"]["node_exporter"]["metrics"].update(
                {"Bad-Name": {"query": "x", "unit": "y"}}
            ),
            "spec.sources.node_exporter.metrics",
            "must match",
        ),
    ],
)
def test_bad_maps_are_config_errors_naming_file_and_field(
    tmp_path: Path, edit: Any, field: str, message: str
) -> None:
    document = minimal()
    edit(document)
    path = write(tmp_path, document)
    with pytest.raises(ConfigError) as info:
        load_metric_map(path)
    assert info.value.field == field
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_unreadable_and_non_yaml_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_metric_map(tmp_path / "absent.yaml")
    path = tmp_path / "broken.yaml"
    path.write_text("spec: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_metric_map(path)


@pytest.mark.parametrize(
    ("regex", "replacement", "value", "expected"),
    [
        ("(.+):[0-9]+", "$1", "10.0.0.7:9100", "10.0.0.7"),
        ("(.+):[0-9]+", "$1", "gpu-node-0", "gpu-node-0"),  # no match: unchanged
        ("ip-([0-9]+)-([0-9]+)", "node-${1}-$2", "ip-10-3", "node-10-3"),
        ("dcgm-exporter-.*", "shared", "dcgm-exporter-abcde", "shared"),
        ("node-([0-9])", "$1", "my-node-1", "my-node-1"),  # anchored: partial is no match
    ],
)
def test_relabel_rules_behave_like_prometheus_replace(
    regex: str, replacement: str, value: str, expected: str
) -> None:
    assert RelabelRule(regex=regex, replacement=replacement).apply(value) == expected


def test_metric_columns_follow_aggregates_then_slots() -> None:
    spec = MetricSpec(
        query="q", unit="u", device_label="gpu", aggregate=("mean", "max"), max_devices=2
    )
    assert spec.columns("dcgm", "util") == (
        "dcgm.util.mean",
        "dcgm.util.max",
        "dcgm.util.gpu0",
        "dcgm.util.gpu1",
    )
    assert MetricMap(load_metric_map().spec).path is None


def test_a_map_reduced_to_some_columns_keeps_only_the_metrics_that_give_them() -> None:
    shipped = load_metric_map()
    wanted = ["dcgm.gpu_util_percent.gpu0", "node_exporter.load1"]
    reduced = shipped.only(wanted)
    assert [(m.source, m.name) for m in reduced.metrics] == [
        ("node_exporter", "load1"),
        ("dcgm", "gpu_util_percent"),
    ]
    assert set(wanted) <= set(reduced.columns) < set(shipped.columns)
    assert reduced.spec.rate_window == shipped.spec.rate_window
    assert len(shipped.only(shipped.columns).metrics) == len(shipped.metrics)
    with pytest.raises(InputError, match="no metric of the map gives any of nope"):
        shipped.only(["nope"])


def test_group_references_of_label_replace_are_not_placeholders(tmp_path: Path) -> None:
    document = minimal()
    query = 'label_replace(node_load1, "node", "$1", "instance", "(.+):[0-9]+")'
    document["spec"]["sources"]["node_exporter"]["metrics"]["load1"]["query"] = query
    (metric,) = [m for m in load_metric_map(write(tmp_path, document)).metrics if m.name == "load1"]
    assert metric.query == query
