"""``kubesage telemetry snapshot`` and ``fit-pca`` against the real Prometheus, node-exporter
and DCGM replays of tests/core/conftest.py."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from rich.console import Console
from typer.testing import CliRunner

from kubesage.core.cli.telemetry import (
    PrometheusUnreachableError,
    components_for,
    print_snapshot,
    snapshots,
    summarise,
    telemetry_app,
)
from kubesage.core.telemetry.dcgm_exporter import DcgmReplayExporter
from kubesage.core.telemetry.features import FeatureBuilder
from kubesage.core.telemetry.metric_map import MetricMap
from kubesage.core.telemetry.pca import load_pca
from kubesage.core.telemetry.prometheus import PrometheusCollector
from tests.core.conftest import (
    GPU_NODES,
    HISTORY_S,
    RATE_WINDOW,
    PrometheusServer,
    free_port,
    start_prometheus,
    wait_until,
)
from tests.core.telemetry.fake_prometheus import Reply, empty, fake_prometheus
from tests.core.telemetry.test_prometheus_replies import hostname_lower


def telemetry(*args: str) -> Result:
    return CliRunner().invoke(telemetry_app, list(args))


def one_line_error(result: Result) -> str:
    """The ``error: …`` message of a failed command, as one line (rich wraps at 80)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: ") and text.count("error:") == 1, result.output
    return text


def expected_dcgm_seen(test_map: MetricMap, exporter: DcgmReplayExporter, gpus: int) -> str:
    """``seen/total`` DCGM columns on a node whose exporter serves ``gpus`` GPUs: every
    aggregate and one slot per GPU, for each metric of the map the exporter serves."""
    served = set(re.findall(r"^(DCGM_\w+)\{", httpx.get(exporter.url).text, re.MULTILINE))
    metrics = [m for m in test_map.metrics if m.source == "dcgm"]
    total = sum(len(m.columns) for m in metrics)
    seen = sum(
        len(m.spec.aggregate) + min(gpus, m.spec.max_devices)
        for m in metrics
        if m.query.split("{", 1)[0] in served  # the metric a query reads, matchers aside
    )
    return f"{seen}/{total}"


def test_snapshot_json_summarises_every_node(
    prometheus: PrometheusServer,
    dcgm_exporters: dict[str, DcgmReplayExporter],
    test_map: MetricMap,
) -> None:
    url = prometheus.url
    result = telemetry(
        *f"snapshot --prometheus {url} --rate-window {RATE_WINDOW} --format json".split()
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["prometheus"] == prometheus.url
    assert report["stale"] is False and report["reason"] is None
    assert report["columns"] == len(test_map.columns)
    names = FeatureBuilder(test_map).names
    assert report["feature_names"] == list(names)
    nodes = {node["node"]: node for node in report["nodes"]}
    assert sorted(nodes) == sorted(GPU_NODES)
    for hostname, gpus in GPU_NODES.items():
        node = nodes[hostname]
        assert len(node["features"]) == len(names)
        expected = expected_dcgm_seen(test_map, dcgm_exporters[hostname], gpus)
        assert node["sources_seen"]["dcgm"] == expected
        assert node["sources_seen"]["ebpf"] == "0/3"  # no eBPF exporter runs here
        assert 0 <= node["headline"]["gpu"] <= 100
    worker = nodes["gpu-node-0"]
    assert 0 <= worker["headline"]["cpu"] <= 1
    assert 0 < worker["headline"]["mem"] < 1
    # gpu-node-1 runs no node-exporter: its node columns are missing, flagged, not zero
    idle = nodes["gpu-node-1"]
    assert idle["sources_seen"]["node_exporter"].startswith("0/")
    assert idle["headline"]["cpu"] is None
    missing = idle["features"][names.index("node_exporter.cpu_busy_fraction:missing")]
    assert missing == 1.0


def test_snapshot_table_and_repeated_snapshots(
    prometheus: PrometheusServer, test_map: MetricMap
) -> None:
    table = telemetry("snapshot", "--prometheus", prometheus.url, "--rate-window", RATE_WINDOW)
    assert table.exit_code == 0, table.output
    assert "fresh" in table.stdout and "STALE" not in table.stdout
    for hostname in GPU_NODES:
        assert hostname in table.stdout
    url = prometheus.url
    repeated = telemetry(
        *f"snapshot --prometheus {url} --format json --count 2 --interval 100ms".split()
    )
    assert repeated.exit_code == 0, repeated.output
    taken = [s["taken_at"] for s in json.loads(repeated.stdout)["snapshots"]]
    assert len(taken) == 2 and taken[1] > taken[0]


def test_snapshots_after_prometheus_stops_are_marked_stale(
    tmp_path: Path,
    node_exporter: str,
    dcgm_exporters: dict[str, DcgmReplayExporter],
    test_map: MetricMap,
) -> None:
    server = start_prometheus(tmp_path, node_exporter, [e.address for e in dcgm_exporters.values()])
    try:
        query = test_map.metrics[0].query
        wait_until(lambda: bool(server.query(query)), timeout_s=30, what=query)
        collector = PrometheusCollector(server.url, test_map)
        builder = FeatureBuilder(test_map)
        # Prometheus goes down between the first and the second snapshot.
        taken = list(snapshots(collector, 2, 15.0, sleep=lambda _: server.stop()))
    finally:
        server.stop()
    fresh, stale = (summarise(server.url, test_map, s, builder) for s in taken)
    assert not fresh.stale
    assert stale.stale and stale.reason is not None and "unreachable" in stale.reason
    assert stale.taken_at == fresh.taken_at and stale.nodes == fresh.nodes
    console = Console(file=io.StringIO(), width=200)
    print_snapshot(stale, console)
    rendered = console.file.getvalue()  # type: ignore[attr-defined]
    assert "STALE" in rendered and "unreachable" in rendered


def test_the_first_snapshot_has_nothing_to_fall_back_to(test_map: MetricMap) -> None:
    collector = PrometheusCollector(f"http://127.0.0.1:{free_port()}", test_map)
    with pytest.raises(PrometheusUnreachableError, match="Connection refused"):
        next(snapshots(collector, 1, 1.0))


def test_fit_pca_saves_a_model_and_says_what_it_kept(
    prometheus: PrometheusServer, test_map: MetricMap, tmp_path: Path
) -> None:
    assert prometheus.samples_since is not None
    time.sleep(max(0.0, prometheus.samples_since + HISTORY_S - time.time()))
    out = tmp_path / "pca.safetensors"
    result = telemetry(
        *f"fit-pca --prometheus {prometheus.url} --range {HISTORY_S}s --step 1s --window 5".split(),
        *("--rate-window", RATE_WINDOW, "--out", str(out)),
    )
    assert result.exit_code == 0, result.output
    model = load_pca(out)
    assert model.feature_names == FeatureBuilder(test_map).names
    # 21 steps → 17 windows × 2 nodes: fewer rows than the 128 asked for, and it says so.
    assert model.samples == 17 * len(GPU_NODES)
    kept = re.search(r"kept (\d+) of 128 requested components: limited by (.+)", result.stdout)
    assert kept is not None, result.stdout
    assert int(kept.group(1)) == model.n_components == model.samples - 1
    assert kept.group(2).startswith(f"{model.samples} samples")
    first = f"first {float(model.explained_variance_ratio[0]):.1%}"
    assert first in result.stdout
    assert f"all {model.n_components} 100.0%" in result.stdout
    assert f"90% in {components_for(model, 0.9)}" in result.stdout
    assert f"saved {out}" in result.stdout


def test_fit_pca_keeps_what_is_asked_when_the_data_allows(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    assert prometheus.samples_since is not None
    time.sleep(max(0.0, prometheus.samples_since + HISTORY_S - time.time()))
    out = tmp_path / "pca.safetensors"
    result = telemetry(
        *f"fit-pca --prometheus {prometheus.url} --range {HISTORY_S}s --step 1s".split(),
        *("--components", "4", "--rate-window", RATE_WINDOW, "--out", str(out)),
    )
    assert result.exit_code == 0, result.output
    assert "kept 4 of 4 requested components: as requested" in result.stdout
    assert load_pca(out).n_components == 4


@pytest.mark.parametrize("command", ["snapshot", "fit-pca"])
def test_unreachable_prometheus_is_a_one_line_error(command: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    args = ["--range", "1h", "--out", str(tmp_path / "pca")] if command == "fit-pca" else []
    message = one_line_error(telemetry(command, "--prometheus", url, *args))
    assert message == f"error: cannot read Prometheus at {url}: Connection refused"
    assert not (tmp_path / "pca").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["snapshot", "--prometheus", "prometheus:9090"], "must be an http:// or https:// URL"),
        (
            ["snapshot", "--prometheus", "http://x", "--interval", "soon"],
            "--interval: 'soon' is not a duration",
        ),
        (
            ["snapshot", "--prometheus", "http://x", "--rate-window", "1x"],
            "--rate-window: '1x' is not a PromQL duration (e.g. 30s, 1m, 1h30m or 2d)",
        ),
        (["fit-pca", "--prometheus", "http://x", "--range", "1 hour", "--out", "m"], "--range"),
        (
            ["fit-pca", "--prometheus", "http://x", "--range", "1m", "--step", "5m", "--out", "m"],
            "--step 5m is longer than --range 1m",
        ),
        (
            ["snapshot", "--prometheus", "http://x", "--metric-map", "missing.yaml"],
            "missing.yaml",
        ),
    ],
)
def test_bad_options_are_named(args: list[str], words: str) -> None:
    assert words in one_line_error(telemetry(*args))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["snapshot", "--rate-window", "90"], "--rate-window: '90' is not a PromQL duration"),
        (["snapshot", "--rate-window", "1.5m"], "--rate-window: '1.5m' is not a PromQL duration"),
        (
            ["snapshot", "--interval", "inf", "--count", "2"],
            "--interval: duration 'inf' must be finite",
        ),
        (
            ["snapshot", "--interval", "1e10", "--count", "2"],
            "--interval: duration '1e10' is longer",
        ),
        (["fit-pca", "--range", "inf", "--out", "m"], "--range: duration 'inf' must be finite"),
        (
            ["fit-pca", "--range", "1e400", "--step", "1e399", "--out", "m"],
            "--range: duration '1e400'",
        ),
        (["fit-pca", "--range", "30d", "--step", "1s", "--out", "m"], "more than 1,000,000"),
    ],
)
def test_durations_prometheus_cannot_take_are_refused_up_front(args: list[str], words: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the options fail first
    assert words in one_line_error(telemetry(*args, "--prometheus", url))


@pytest.mark.parametrize("option", ["--timeout-s", "--timeout"])  # the older name still works
def test_an_infinite_timeout_is_refused_naming_the_option(option: str) -> None:
    result = telemetry("snapshot", "--prometheus", "http://x", option, "inf")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--timeout-s" in result.output


def test_a_compound_rate_window_reaches_prometheus_as_written() -> None:
    queries: list[str] = []

    def handler(path: str, params: Mapping[str, str]) -> Reply:
        queries.append(params.get("query", ""))
        return empty(path, params)

    with fake_prometheus(handler) as url:
        result = telemetry("snapshot", "--prometheus", url, "--rate-window", "1h30m")
    assert result.exit_code == 0, result.output
    assert any("[1h30m]" in query for query in queries)


def test_prometheus_error_text_is_shown_whole_in_one_line() -> None:
    error = "query processing would load too many samples into memory in query execution"
    body = {"status": "error", "errorType": "execution", "error": error}
    with fake_prometheus(lambda path, params: (422, body)) as url:
        message = one_line_error(telemetry("snapshot", "--prometheus", url))
    assert message.startswith(
        f"error: cannot read Prometheus at {url}: HTTP 422 execution: {error} (query '"
    )


def test_a_200_that_is_not_an_api_response_is_a_one_line_error() -> None:
    with fake_prometheus(lambda path, params: (200, [])) as url:
        message = one_line_error(telemetry("snapshot", "--prometheus", url))
    assert "the reply is not a Prometheus API response" in message


def test_dropped_series_are_said_in_the_table_and_the_json() -> None:
    with fake_prometheus(hostname_lower) as url:
        table = telemetry("snapshot", "--prometheus", url)
        document = json.loads(telemetry("snapshot", "--prometheus", url, "--format", "json").stdout)
    assert table.exit_code == 0, table.output
    assert "no node reported any metric of the map" in table.stdout
    said = " ".join(table.stdout.split())
    assert "dropped: dcgm: " in said and "had no 'Hostname' label" in said
    assert document["nodes"] == []
    [line] = document["dropped"]
    assert line.startswith("dcgm: ") and "hostname" in line
