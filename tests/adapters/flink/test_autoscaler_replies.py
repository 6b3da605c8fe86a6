"""The autoscaler's collector and loop over recorded Flink REST replies: rates from
counters, NaN metrics, forecasts feeding source demand, malformed replies that must
never end the loop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import httpx
import numpy as np
import pytest

from kubesage.adapters.flink.autoscale_loop import run_autoscaler
from kubesage.adapters.flink.autoscaler import (
    Autoscaler,
    AutoscalerSettings,
    ScalingDecision,
    decide,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.errors import FlinkNotFound
from kubesage.adapters.flink.observation import Observation
from kubesage.core.forecast.forecaster import BaselineForecaster

from .autoscaler_support import (
    SETTINGS,
    SLOW,
    SOURCE,
    observe,
    pipeline,
)
from .conftest import recorded, vertex_times


def scaled(name: str, factor: float) -> dict[str, object]:
    """A recorded metrics reply with every aggregate multiplied by ``factor``."""
    entry = recorded(name)
    body = [
        {**m, **{k: m[k] * factor for k in ("min", "max", "avg", "sum")}} for m in entry["body"]
    ]
    return {**entry, "body": body}


JOB = recorded("job_running")["body"]
SOURCE_ID, SLOW_ID, SINK_ID = (v["id"] for v in JOB["vertices"])
NAMES = {SOURCE_ID: "source", SLOW_ID: "slow", SINK_ID: "sink"}


def two_samples(
    replay_client: Callable[..., FlinkClient], **replies: list[dict[str, object]]
) -> ObservationCollector:
    """A collector over the recorded sample job, polled 10 s apart: each vertex's
    metrics scaled by 1.5 and its subtasks' times 10 s on between the two polls, except
    the replies given (``"<metrics|vertex>_<source|slow|sink>"``: the two replies)."""
    base = f"/jobs/{JOB['jid']}/vertices"
    routes: dict[str, list[dict[str, object]]] = {}
    for vertex, name in NAMES.items():
        metrics = replies.get(f"metrics_{name}") or [
            recorded(f"metrics_{name}"),
            scaled(f"metrics_{name}", 1.5),
        ]
        routes[f"GET {base}/{vertex}/subtasks/metrics"] = [
            recorded("metric_names_source"),
            *metrics,
        ]
        routes[f"GET {base}/{vertex}"] = replies.get(f"vertex_{name}") or [
            vertex_times(f"vertex_{name}"),
            vertex_times(f"vertex_{name}", 10.0),
        ]
    clock = iter([1000.0, 1010.0])
    client = replay_client("job_running", "overview", **routes)
    return ObservationCollector(client, JOB["jid"], clock=lambda: next(clock))


def test_collector_reads_rates_from_counters(replay_client: Callable[..., FlinkClient]) -> None:
    collector = two_samples(replay_client)
    first = collector.collect()
    assert first.window_s == 0.0
    second = collector.collect()
    assert second.window_s == pytest.approx(10.0)
    slow_values = {m["id"]: m for m in recorded("metrics_slow")["body"]}
    observed = second.vertex(SLOW_ID)
    assert observed.records_in_per_s == pytest.approx(slow_values["numRecordsIn"]["sum"] * 0.5 / 10)
    assert observed.inputs == (SOURCE_ID,)
    source_view = second.vertex(SOURCE_ID)
    assert source_view.pending_records is not None and source_view.pending_growth_per_s is not None


def test_busy_time_is_the_busiest_subtasks_own_rate_not_the_largest_totals(
    replay_client: Callable[..., FlinkClient],
) -> None:
    # Subtask 0 was busy for 20 s and is idle now; subtask 1 is busy 800 ms/s now. The
    # largest cumulative total (subtask 0's) did not move: read as the vertex's, it
    # would say the vertex is idle and head for a scale-down.
    collector = two_samples(
        replay_client,
        vertex_slow=[
            vertex_times("vertex_slow", s0=20_000.0, s1=0.0),
            vertex_times("vertex_slow", 10.0, s0=20_000.0, s1=8_000.0),
        ],
    )
    collector.collect()
    observed = collector.collect().vertex(SLOW_ID)
    assert observed.busy_ms_per_s == pytest.approx(800.0)  # subtask 1: 8 s in 10 s


def test_a_sources_backlog_is_converted_to_its_chains_output_records(
    replay_client: Callable[..., FlinkClient],
) -> None:
    # The sample's source chain reports its backlog from `pace` (pace.pendingRecords);
    # pace's own numRecordsOut is in the backlog's records. Here pace emits twice what
    # the task does (a filter after it in the chain): each backlog record is half an
    # output record.
    def with_reporter(factor: float) -> dict[str, object]:
        entry = scaled("metrics_source", factor)
        body = list(entry["body"])  # type: ignore[call-overload]
        out = next(m for m in body if m["id"] == "numRecordsOut")
        body.append({**out, "id": "pace.numRecordsOut", "sum": out["sum"] * 2})
        return {**entry, "body": body}

    collector = two_samples(replay_client, metrics_source=[with_reporter(1.0), with_reporter(1.5)])
    collector.collect()
    view = collector.collect().vertex(SOURCE_ID)
    assert view.output_per_pending == pytest.approx(0.5)
    assert view.pending_records is not None and view.pending_growth_per_s is not None
    pending, growth = view.backlog_as_output
    assert pending == pytest.approx(view.pending_records / 2)
    assert growth == pytest.approx(view.pending_growth_per_s / 2)


def test_a_source_reporting_nan_busy_time_still_lets_the_job_decide(
    replay_client: Callable[..., FlinkClient],
) -> None:
    """Flink answers "NaN" for what a source does not measure; the first query after a
    (re)start may lack a vertex entirely. Neither stops the other vertices' rates."""
    job = recorded("job_running")["body"]
    jid = job["jid"]
    source, slow, sink = (v["id"] for v in job["vertices"])
    base = f"/jobs/{jid}/vertices"
    unmeasured = {"accumulateBusyTimeMs", "busyTimeMsPerSecond", "pace.pendingRecords"}

    def source_reply(factor: float) -> dict[str, object]:
        entry = recorded("metrics_source")
        body = [
            {**m, **{k: "NaN" for k in ("min", "max", "avg", "sum")}}
            if m["id"] in unmeasured
            else {**m, **{k: m[k] * factor for k in ("min", "max", "avg", "sum")}}
            for m in entry["body"]
        ]
        return {**entry, "body": body}

    filling = recorded("metrics_slow")
    filling = {**filling, "body": [m for m in filling["body"] if m["id"].endswith("PerSecond")]}
    clock = iter([1000.0, 1010.0, 1020.0])
    client = replay_client(
        "job_running",
        "overview",
        **{
            f"GET {base}/{source}/subtasks/metrics": [
                recorded("metric_names_source"),
                source_reply(1.0),
                source_reply(1.5),
                source_reply(2.0),
            ],
            f"GET {base}/{slow}/subtasks/metrics": [
                recorded("metric_names_source"),
                filling,  # the metric store has no counters for this vertex yet
                scaled("metrics_slow", 1.5),
                scaled("metrics_slow", 2.0),
            ],
            f"GET {base}/{sink}/subtasks/metrics": [
                recorded("metric_names_source"),
                recorded("metrics_sink"),
                scaled("metrics_sink", 1.5),
                scaled("metrics_sink", 2.0),
            ],
            f"GET {base}/{source}": vertex_times("vertex_source", s0="NaN"),
            **{
                f"GET {base}/{vertex}": [vertex_times(name, a) for a in (0.0, 10.0, 20.0)]
                for vertex, name in ((slow, "vertex_slow"), (sink, "vertex_sink"))
            },
        },
    )
    collector = ObservationCollector(client, jid, clock=lambda: next(clock))
    collector.collect()
    collector.collect()
    third = collector.collect()
    source_view = next(v for v in third.vertices if v.vertex_id == source)
    assert source_view.busy_ms_per_s is None and source_view.records_out_per_s is not None
    slow_values = {m["id"]: m for m in recorded("metrics_slow")["body"]}
    slow_view = next(v for v in third.vertices if v.vertex_id == slow)
    # measured from the oldest sample that has the slow vertex's counters (t = 1010)
    assert slow_view.records_in_per_s == pytest.approx(
        slow_values["numRecordsIn"]["sum"] * 0.5 / 10
    )
    decision, _ = decide(
        replace(third, running_since_s=0.0), settings=AutoscalerSettings(settle_s=0.0)
    )
    assert decision.action != "skip"
    source_decision = next(v for v in decision.vertices if v.vertex_id == source)
    assert "busy time (busyTimeMsPerSecond) not reported: source held" in source_decision.reasons


def test_forecaster_feeds_source_demand() -> None:
    observed = ObservationCollector(
        FlinkClient("http://unused.test"), "job", forecaster=BaselineForecaster(kind="linear")
    )
    predictions = [observed._forecast("src", rate) for rate in np.linspace(10.0, 40.0, 40)]
    assert predictions[0] is None
    assert predictions[-1] is not None and predictions[-1] > 40.0


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(200, content=b"{not json"),
        httpx.Response(200, json={"jid": "x"}),
        httpx.Response(404, json=recorded("job_not_found")["body"]),
        httpx.Response(503, json={"errors": ["leader changing"]}),
    ],
    ids=["bad-json", "missing-fields", "unknown-job", "unavailable"],
)
def test_loop_survives_malformed_replies(reply: httpx.Response) -> None:
    client = FlinkClient(
        "http://flink.test",
        transport=httpx.MockTransport(lambda request: reply),
        attempts=2,
        backoff_s=0.0,
    )
    decisions: list[ScalingDecision] = []
    stats = run_autoscaler(
        client,
        "0123456789abcdef0123456789abcdef",
        dry_run=True,
        on_decision=lambda decision, outcome: decisions.append(decision),
        stop=threading.Event(),
        interval_s=0.0,
        max_ticks=3,
    )
    assert stats.ticks == 3 and stats.errors == 3 and decisions == []
    assert stats.last_error


def test_vertex_lookup_by_name_or_id() -> None:
    observation = observe(pipeline())
    assert observation.vertex("slow") is observation.vertex(SLOW)
    assert observation.vertex("Source").vertex_id == SOURCE
    with pytest.raises(FlinkNotFound, match="job job has no vertex 'nope'"):
        observation.vertex("nope")


def test_drained_needs_a_small_backlog_no_backpressure_and_a_full_window() -> None:
    def source_state(pending: float | None, backpressured: float | None) -> Observation:
        vertices = pipeline(slow_parallelism=3, pending=pending)
        source = replace(vertices[0], backpressured_ms_per_s=backpressured)
        return observe((source, *vertices[1:]))

    assert source_state(10.0, 50.0).drained("Source", max_pending_records=80.0)
    assert not source_state(500.0, 50.0).drained("Source", max_pending_records=80.0)
    assert not source_state(10.0, 600.0).drained("Source", max_pending_records=80.0)
    assert not source_state(None, 50.0).drained("Source", max_pending_records=80.0)
    short = replace(source_state(10.0, 50.0), window_s=5.0)
    assert not short.drained("Source", max_pending_records=80.0)


def test_a_forecast_below_the_measured_rate_scales_down_only_while_the_source_keeps_up() -> None:
    # 60 rec/s measured on 5 subtasks, the forecast says 20: the load is falling.
    falling = pipeline(rate=60.0, slow_parallelism=5, pending=0.0, forecast=20.0)
    settings = replace(SETTINGS, scale_down_delay_s=0.0)
    decision = Autoscaler(settings).decide(observe(falling))
    assert decision.changes == {SLOW: 2}  # ceil(20 / 20 / 0.8), not the measured 4
    # A backlog building (the forecast is wrong), or none measured: the measured rate stands.
    for vertices in (
        pipeline(rate=60.0, slow_parallelism=2, pending=500.0, forecast=20.0),
        pipeline(rate=60.0, slow_parallelism=5, pending=None, forecast=20.0),
    ):
        decision = Autoscaler(settings).decide(observe(vertices))
        assert decision.changes.get(SLOW, 0) >= 4, decision.reasons
