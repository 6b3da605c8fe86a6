"""FlinkClient against recorded real replies (MockTransport) and a real cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import (
    FlinkError,
    FlinkNotFound,
    FlinkResponseError,
    FlinkUnavailable,
)
from kubesage.adapters.flink.rest_models import ParallelismBounds
from kubesage.core.errors import DependencyError

from .conftest import path_of, recorded

Build = Callable[..., FlinkClient]
JOB = recorded("job_running")["body"]["jid"]
SOURCE, SLOW, SINK = (v["id"] for v in recorded("job_running")["body"]["vertices"])


def test_overview_and_jobs(replay_client: Build) -> None:
    client = replay_client("overview", "jobs_overview")
    overview = client.overview()
    assert (overview.slots_total, overview.taskmanagers) == (8, 1)
    assert overview.slots_available == recorded("overview")["body"]["slots-available"]
    jobs = client.jobs()
    assert [job.job_id for job in jobs] == [JOB]
    assert jobs[0].state == "RUNNING"


def test_job_detail_gives_vertices_in_topological_order(replay_client: Build) -> None:
    job = replay_client("job_running").job(JOB)
    assert job.state == "RUNNING"
    assert job.topological_order() == [SOURCE, SLOW, SINK]
    assert job.vertex(SLOW).max_parallelism == 128
    assert [edge.ship_strategy for edge in job.inputs()[SLOW]] == ["REBALANCE"]
    assert job.inputs()[SOURCE] == ()
    assert job.running_since_ms == recorded("job_running")["body"]["timestamps"]["RUNNING"]


def test_restarting_job_is_reported_as_such(replay_client: Build) -> None:
    job = replay_client("job_restarting").job(JOB)
    assert job.state == "RESTARTING"
    assert {vertex.status for vertex in job.vertices} == {"CANCELING"}


def test_metrics_and_backpressure(replay_client: Build) -> None:
    client = replay_client("metrics_source", "backpressure_source_high")
    metrics = client.subtask_metrics(JOB, SOURCE, ["numRecordsOut", "pace.pendingRecords"])
    assert metrics["pace.pendingRecords"].sum > 0
    assert metrics["numRecordsOut"].max > 0
    pressure = client.backpressure(JOB, SOURCE)
    assert pressure.level == "high" and pressure.subtasks[0].ratio > 0.5


def test_missing_metric_falls_back_to_the_known_ones(replay_client: Build) -> None:
    # Flink answers [] when any requested name is unknown; the client asks again
    # with the names the vertex reports.
    requested: list[str] = []
    known = recorded("metric_names_source")["body"]
    values = recorded("metrics_source")["body"]

    def handler(request: httpx.Request) -> httpx.Response:
        wanted = request.url.params.get("get")
        requested.append(wanted or "")
        if wanted is None:
            return httpx.Response(200, json=known)
        names = wanted.split(",")
        if any(name not in {m["id"] for m in known} for name in names):
            return httpx.Response(200, json=recorded("metrics_one_missing")["body"])
        return httpx.Response(200, json=[m for m in values if m["id"] in names])

    client = FlinkClient("http://flink.test", transport=httpx.MockTransport(handler))
    metrics = client.subtask_metrics(JOB, SOURCE, ["numRecordsOut", "noSuchMetric"])
    assert list(metrics) == ["numRecordsOut"]
    assert requested == ["numRecordsOut,noSuchMetric", "", "numRecordsOut"]
    assert client.subtask_metrics(JOB, SOURCE, ["noSuchMetric"]) == {}


def test_checkpoints_and_config(replay_client: Build) -> None:
    client = replay_client("checkpoints", "checkpoint_config")
    stats = client.checkpoints(JOB)
    assert stats.counts.completed == len([c for c in stats.history if c.status == "COMPLETED"])
    assert stats.latest.completed is not None
    assert stats.latest.completed.end_to_end_duration_ms > 0
    config = client.checkpoint_config(JOB)
    assert config.unaligned and config.interval_ms == 10_000


def test_failed_checkpoint_in_history(replay_client: Build) -> None:
    stats = replay_client("checkpoints_after_restart").checkpoints(JOB)
    assert stats.latest.failed is not None
    assert stats.latest.failed.failure_message
    assert stats.counts.restored >= 1


@pytest.mark.parametrize(
    ("name", "succeeded", "status"),
    [
        ("checkpoint_trigger_completed", True, "COMPLETED"),
        ("checkpoint_trigger_in_progress", False, "IN_PROGRESS"),
        ("checkpoint_trigger_failed", False, "COMPLETED"),
    ],
)
def test_checkpoint_trigger_status(
    replay_client: Build, name: str, succeeded: bool, status: str
) -> None:
    trigger = replay_client(name).checkpoint_trigger_status(JOB, path_of(name).rsplit("/", 1)[1])
    assert (trigger.status, trigger.succeeded) == (status, succeeded)
    if name == "checkpoint_trigger_failed":
        assert trigger.checkpoint_id is None
        assert trigger.failure_cause and "CheckpointException" in trigger.failure_cause


def test_trigger_checkpoint_returns_request_id(replay_client: Build) -> None:
    request_id = replay_client("checkpoint_trigger").trigger_checkpoint(JOB)
    assert request_id == recorded("checkpoint_trigger")["body"]["request-id"]


def test_resource_requirements_round_trip(replay_client: Build) -> None:
    client = replay_client("resource_requirements", "set_resource_requirements")
    requirements = client.resource_requirements(JOB)
    assert requirements[SLOW] == ParallelismBounds(lower=1, upper=1)
    client.set_resource_requirements(JOB, requirements)


def test_refused_resource_requirements_name_the_reason(replay_client: Build) -> None:
    client = replay_client("set_resource_requirements_unknown_vertex")
    with pytest.raises(FlinkResponseError, match="was not found in the JobGraph"):
        client.set_resource_requirements(JOB, {SLOW: ParallelismBounds(lower=1, upper=2)})


def test_unknown_job_is_not_found(replay_client: Build) -> None:
    with pytest.raises(FlinkNotFound, match="Job 0123456789abcdef0123456789abcdef not found"):
        replay_client("job_not_found").job("0123456789abcdef0123456789abcdef")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {k: v for k, v in recorded("overview")["body"].items() if k != "slots-total"},
            "slots-total",
        ),
        (
            {**recorded("job_running")["body"], "vertices": [{"id": "x", "name": "y"}]},
            "vertices.0.parallelism",
        ),
        ({"jobs": [{"jid": "x"}]}, "jobs.0.state"),
    ],
)
def test_missing_fields_name_endpoint_and_field(body: Any, field: str) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    client = FlinkClient("http://flink.test", transport=transport)
    call = {"slots-total": client.overview, "jobs.0.state": client.jobs}.get(
        field, lambda: client.job(JOB)
    )
    with pytest.raises(FlinkResponseError) as caught:
        call()
    assert caught.value.field == field
    assert caught.value.endpoint is not None and caught.value.endpoint in str(caught.value)
    assert str(caught.value).endswith(f"field '{field}': Field required")


def test_bad_json_is_a_response_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html>"))
    with pytest.raises(FlinkResponseError, match="not JSON"):
        FlinkClient("http://flink.test", transport=transport).overview()


def test_5xx_is_retried_then_succeeds() -> None:
    replies = [
        httpx.Response(503, json={"errors": ["busy"]}),
        httpx.Response(200, json=recorded("overview")["body"]),
    ]
    transport = httpx.MockTransport(lambda request: replies.pop(0))
    client = FlinkClient("http://flink.test", transport=transport, backoff_s=0.0)
    assert client.overview().slots_total == 8
    assert client.retries == 1


def test_connection_errors_are_bounded_then_unavailable() -> None:
    calls = 0

    def refuse(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("connection refused", request=request)

    client = FlinkClient(
        "http://flink.test", transport=httpx.MockTransport(refuse), attempts=3, backoff_s=0.0
    )
    with pytest.raises(FlinkUnavailable, match="after 3 attempts") as caught:
        client.overview()
    assert calls == 3
    assert isinstance(caught.value, FlinkError) and isinstance(caught.value, DependencyError)


def _read_timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def _server_error(request: httpx.Request) -> httpx.Response:
    return httpx.Response(500, json={"errors": ["internal"]})


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("failure", "calls_made"),
    [
        # Sent, and then no answer or a failure: Flink may have started a checkpoint;
        # asking again would start a second, off the plan.
        (_read_timeout, 1),
        (_server_error, 1),
        (_refused, 3),  # never reached Flink: safe to send again
    ],
)
def test_a_trigger_is_sent_again_only_when_it_never_reached_flink(
    failure: Callable[[httpx.Request], httpx.Response], calls_made: int
) -> None:
    calls: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.content)
        return failure(request)

    client = FlinkClient(
        "http://flink.test", transport=httpx.MockTransport(answer), attempts=3, backoff_s=0.0
    )
    with pytest.raises(FlinkUnavailable) as caught:
        client.trigger_checkpoint("job1")
    assert len(calls) == calls_made
    if calls_made == 1:
        assert "not sent again, since Flink may have acted on it" in str(caught.value)


def test_4xx_is_not_retried() -> None:
    calls = 0

    def bad_request(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(400, json=recorded("set_resource_requirements_partial")["body"])

    client = FlinkClient("http://flink.test", transport=httpx.MockTransport(bad_request))
    with pytest.raises(FlinkResponseError, match="missing job vertex"):
        client.set_resource_requirements(JOB, {})
    assert calls == 1


def test_real_cluster_happy_path(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient
) -> None:
    overview = flink_client.overview()
    assert overview.taskmanagers == 1
    assert overview.slots_total == flink_cluster.task_slots
    assert isinstance(flink_client.jobs(), list)
    with pytest.raises(FlinkNotFound):
        flink_client.job("0123456789abcdef0123456789abcdef")
