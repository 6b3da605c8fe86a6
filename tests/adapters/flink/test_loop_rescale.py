"""The ``flink-rescale`` actuator over recorded replies — done, refused (by Flink, or
rolled back), failed — and the Flink adapter's loop parts, registered only when the job
registry lists a run."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from benchmarks.flink_support.cluster import free_port
from kubesage.adapters.flink import cli
from kubesage.adapters.flink.autoscale_loop import run_autoscaler
from kubesage.adapters.flink.autoscaler import AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.loop_observe import RegisteredJobsCollector
from kubesage.adapters.flink.loop_rescale import FlinkRescaleActuator
from kubesage.adapters.flink.loop_scaling import FlinkAutoscaler
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.adapters.flink.rescale import RescaleOutcome
from kubesage.core.adapter import adapter_parts
from kubesage.core.loop.actions import ActionKind, FlinkRescale, PodRef
from kubesage.core.loop.actions import Evict as EvictAction
from kubesage.core.loop.reconciler import Actuator, Outcome
from kubesage.core.loop.settings import ReconcilerContext

from .conftest import one_subtask_times, recorded

JOB = "fdb4749fec8f525bb194110b606c1048"
SLOW = "59fa767824610e31f4a11d6125e09bf4"
UNKNOWN_VERTEX = "0123456789abcdef0123456789abcdef"
JM = "http://flink.test"


def rescale(parallelism: dict[str, int], jobmanager: str = JM) -> FlinkRescale:
    return FlinkRescale(
        reconciler="flink-autoscaler",
        explanation="test",
        jobmanager=jobmanager,
        job_id=JOB,
        parallelism=parallelism,
    )


def actuator(client: FlinkClient, timeout_s: float = 5.0) -> FlinkRescaleActuator:
    def clients(url: str) -> FlinkClient:
        assert url == JM, "the client of the action's JobManager"
        return client

    return FlinkRescaleActuator(clients, timeout_s=timeout_s, poll_s=0.0)


def test_it_executes_flink_rescale_actions() -> None:
    built = FlinkRescaleActuator()
    assert isinstance(built, Actuator)
    assert built.kinds == frozenset({ActionKind.FLINK_RESCALE})


def test_done_when_the_job_runs_at_the_new_parallelism(
    replay_client: Callable[..., FlinkClient],
) -> None:
    client = replay_client(
        "resource_requirements",
        "set_resource_requirements",
        **{f"GET /jobs/{JOB}": [recorded("job_running"), recorded("job_rescaled")]},
    )
    result = actuator(client).execute(rescale({SLOW: 2}))
    assert result.outcome is Outcome.DONE, result.detail
    assert "RUNNING at the new parallelism" in result.detail
    assert f"{SLOW}=2" in result.detail


def test_refused_when_flink_refuses_the_request(
    replay_client: Callable[..., FlinkClient],
) -> None:
    client = replay_client(
        "resource_requirements", "job_running", "set_resource_requirements_unknown_vertex"
    )
    attempt = actuator(client).rescale(rescale({UNKNOWN_VERTEX: 2}))
    assert attempt.result.outcome is Outcome.REFUSED
    assert "Flink refused the rescale" in attempt.result.detail
    assert attempt.outcome is not None and attempt.outcome.refused


def test_refused_when_the_job_does_not_get_there_and_is_rolled_back(
    replay_client: Callable[..., FlinkClient],
) -> None:
    # The job stays at parallelism 1: the wait times out, the requirements are put back.
    client = replay_client("resource_requirements", "job_running", "set_resource_requirements")
    result = actuator(client, timeout_s=0.0).execute(rescale({SLOW: 2}))
    assert result.outcome is Outcome.REFUSED
    assert "previous requirements restored" in result.detail


def test_failed_when_the_rollback_fails_too(replay_client: Callable[..., FlinkClient]) -> None:
    put = f"PUT /jobs/{JOB}/resource-requirements"
    client = replay_client(
        "resource_requirements",
        "job_running",
        **{
            put: [
                recorded("set_resource_requirements"),
                recorded("set_resource_requirements_unknown_vertex"),
            ]
        },
    )
    result = actuator(client, timeout_s=0.0).execute(rescale({SLOW: 2}))
    assert result.outcome is Outcome.FAILED
    assert "restoring the previous requirements failed" in result.detail


def test_failed_never_raised_when_the_jobmanager_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = FlinkRescaleActuator(timeout_s=1.0).execute(rescale({SLOW: 2}, jobmanager=url))
    assert result.outcome is Outcome.FAILED
    assert f"JobManager {url}" in result.detail


def test_failed_never_raised_for_an_unexpected_error() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom")

    client = FlinkClient(JM, transport=httpx.MockTransport(broken), attempts=1)
    result = actuator(client).execute(rescale({SLOW: 2}))
    assert (result.outcome, result.detail) == (Outcome.FAILED, "RuntimeError: boom")


def test_an_action_of_another_kind_is_failed_not_raised() -> None:
    evict = EvictAction(reconciler="x", explanation="x", pod=PodRef("default", "p"))
    result = FlinkRescaleActuator().execute(evict)
    assert result.outcome is Outcome.FAILED and "not a flink-rescale action" in result.detail


# -- the adapter's loop parts --------------------------------------------------------


def test_the_adapter_adds_nothing_while_the_registry_is_empty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBESAGE_CACHE_DIR", str(tmp_path))
    parts = adapter_parts([cli.ADAPTER], ReconcilerContext())
    assert (parts.reconcilers, parts.collectors, parts.actuators, parts.warnings) == (
        [],
        [],
        [],
        [],
    )


def test_the_adapter_adds_its_loop_parts_once_a_run_is_registered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBESAGE_CACHE_DIR", str(tmp_path))
    JobRegistry().add(RunRecord(job_id=JOB, job_key="clicks", jobmanager=JM, submitted_at_ms=1))
    parts = adapter_parts([cli.ADAPTER], ReconcilerContext())
    assert parts.warnings == []
    [reconciler] = parts.reconcilers
    [collector] = parts.collectors
    [rescaler] = parts.actuators
    assert isinstance(reconciler, FlinkAutoscaler) and reconciler.name == "flink-autoscaler"
    assert isinstance(collector, RegisteredJobsCollector) and collector.name == "flink"
    assert collector.registry.path == tmp_path / "flink-jobs.yaml"
    assert isinstance(rescaler, FlinkRescaleActuator)


# -- the stand-alone loop acts through the same step and actuator --------------------


def test_flink_autoscale_rescales_through_the_loop_step_and_actuator(
    replay_client: Callable[..., FlinkClient],
) -> None:
    job = recorded("job_running")["body"]
    source, slow, sink = (vertex["id"] for vertex in job["vertices"])
    started_s = job["timestamps"]["RUNNING"] / 1000.0
    times = iter([started_s + 100.0, started_s + 110.0])

    def scaled(name: str, factor: float) -> dict[str, object]:
        entry = recorded(name)
        body = [
            {**m, **{k: m[k] * factor for k in ("min", "max", "avg", "sum")}} for m in entry["body"]
        ]
        return {**entry, "body": body}

    metrics = {source: "metrics_source", slow: "metrics_slow", sink: "metrics_sink"}
    # The rule asks 4 subtasks of the slow operator for these counters; Flink gets there.
    rescaled = copy.deepcopy(recorded("job_rescaled"))
    for vertex in rescaled["body"]["vertices"]:
        vertex["parallelism"] = 4 if vertex["id"] == slow else vertex["parallelism"]
    client = replay_client(
        "overview",
        "resource_requirements",
        "set_resource_requirements",
        **{
            f"GET /jobs/{JOB}": [recorded("job_running")] * 3 + [rescaled],
            **{
                f"GET /jobs/{JOB}/vertices/{vertex}/subtasks/metrics": [
                    recorded("metric_names_source"),
                    recorded(name),
                    scaled(name, 1.5),
                ]
                for vertex, name in metrics.items()
            },
            **{
                f"GET /jobs/{JOB}/vertices/{vertex}": [
                    one_subtask_times(name.replace("metrics_", "vertex_"), reply["body"])
                    for reply in (recorded(name), scaled(name, 1.5))
                ]
                for vertex, name in metrics.items()
            },
        },
    )
    seen: list[tuple[str, object]] = []
    stats = run_autoscaler(
        client,
        JOB,
        dry_run=False,
        settings=AutoscalerSettings(
            exclude=frozenset({"Source: sequence -> pace"}), settle_s=0.0, stable_observations=1
        ),
        on_decision=lambda decision, outcome: seen.append((decision.action, outcome)),
        interval_s=0.0,
        rescale_timeout_s=5.0,
        max_ticks=2,
        clock=lambda: next(times),
    )
    assert [action for action, _ in seen] == ["skip", "rescale"]
    outcome = seen[1][1]
    assert isinstance(outcome, RescaleOutcome) and outcome.succeeded, outcome
    assert outcome.requested == {slow: 4}
    assert (stats.rescales, stats.failed_rescales, stats.errors) == (1, 0, 0)
