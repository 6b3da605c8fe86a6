"""The control loop's ``flink`` collector over recorded replies: every registered job
measured each tick, one JobManager down hides only its own jobs, and nothing readable
falls back to the last good snapshot, marked stale."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.loop_observe import RegisteredJobs, RegisteredJobsCollector
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.core.errors import DependencyError
from kubesage.core.perception import Collector

from .conftest import RECORDED, path_of, replay

RECORDED_JOB = "fdb4749fec8f525bb194110b606c1048"
JOB_A = RECORDED_JOB
JOB_B = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"
JM_A, JM_B = "http://jm-a:8081", "http://jm-b:8081"
VERTICES = {
    "cbc357ccb763df2852fee8c4fc7d55f2": "metrics_source",
    "59fa767824610e31f4a11d6125e09bf4": "metrics_slow",
    "2e588ce1c86a9d46e2e85186773ce4fd": "metrics_sink",
}


def reply(name: str, job_id: str) -> dict[str, Any]:
    """A recorded reply, as the JobManager of ``job_id`` would give it."""
    document: dict[str, Any] = json.loads(
        (RECORDED / f"{name}.json").read_text().replace(RECORDED_JOB, job_id)
    )
    return document


def jobmanager(job_id: str, *, state: str = "RUNNING") -> httpx.MockTransport:
    """A JobManager running the recorded sample job as ``job_id`` (in ``state``)."""
    overview = reply("jobs_overview", job_id)
    for job in overview["body"]["jobs"]:
        job["state"] = state
    routes: dict[tuple[str, str], dict[str, Any] | list[dict[str, Any]]] = {
        ("GET", "/jobs/overview"): overview,
        ("GET", "/overview"): reply("overview", job_id),
        ("GET", f"/jobs/{job_id}"): reply("job_running", job_id),
    }
    for vertex, metrics in VERTICES.items():
        path = f"/jobs/{job_id}/vertices/{vertex}/subtasks/metrics"
        routes[("GET", path)] = [reply("metric_names_source", job_id), reply(metrics, job_id)]
        details = reply(metrics.replace("metrics_", "vertex_"), job_id)
        routes[("GET", f"/jobs/{job_id}/vertices/{vertex}")] = details
    assert path_of("job_running") == f"/jobs/{RECORDED_JOB}"
    return replay(routes)


def down(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


class JobManagers:
    """Clients by URL over swappable transports (a JobManager can go down and back)."""

    def __init__(self, **transports: httpx.BaseTransport) -> None:
        self.transports = {url_of(name): t for name, t in transports.items()}

    def __call__(self, url: str) -> FlinkClient:
        def route(request: httpx.Request) -> httpx.Response:
            transport = self.transports[url]
            assert isinstance(transport, httpx.MockTransport)
            return transport.handle_request(request)

        return FlinkClient(url, transport=httpx.MockTransport(route), attempts=1, backoff_s=0.0)

    def take_down(self, name: str) -> None:
        self.transports[url_of(name)] = httpx.MockTransport(down)


def url_of(name: str) -> str:
    return {"a": JM_A, "b": JM_B}[name]


def register(path: Path, *runs: tuple[str, str, str]) -> JobRegistry:
    registry = JobRegistry(path)
    for number, (job_id, key, url) in enumerate(runs):
        registry.add(RunRecord(job_id=job_id, job_key=key, jobmanager=url, submitted_at_ms=number))
    return registry


def ticks(start: float = 1000.0, step: float = 5.0) -> Callable[[], float]:
    times: Iterator[float] = iter(start + step * n for n in range(1_000))
    return lambda: next(times)


@pytest.fixture
def two_jobs(tmp_path: Path) -> JobRegistry:
    return register(tmp_path / "flink-jobs.yaml", (JOB_A, "clicks", JM_A), (JOB_B, "orders", JM_B))


def test_it_is_a_collector_named_flink(two_jobs: JobRegistry) -> None:
    collector = RegisteredJobsCollector(two_jobs, JobManagers())
    assert isinstance(collector, Collector)
    assert collector.name == "flink" and collector.failures == 0


def test_every_running_job_is_measured_with_a_window_kept_across_ticks(
    two_jobs: JobRegistry,
) -> None:
    collector = RegisteredJobsCollector(
        two_jobs, JobManagers(a=jobmanager(JOB_A), b=jobmanager(JOB_B)), clock=ticks()
    )
    first = collector.collect()
    second = collector.collect()
    assert not second.stale and second.taken_at > first.taken_at
    data = second.data
    assert [(j.job_key, j.job_id, j.jobmanager) for j in data.jobs] == [
        ("clicks", JOB_A, JM_A),
        ("orders", JOB_B, JM_B),
    ]
    # The same collector per job: the second observation has rates over a window.
    assert all(job.observation.window_s > 0 for job in data.jobs)
    assert all(job.observation.window_s == 0 for job in first.data.jobs)
    assert data.failed == () and data.not_running == ()


def test_one_jobmanager_down_hides_only_its_own_jobs(two_jobs: JobRegistry) -> None:
    managers = JobManagers(a=jobmanager(JOB_A), b=jobmanager(JOB_B))
    collector = RegisteredJobsCollector(two_jobs, managers, clock=ticks())
    collector.collect()
    managers.take_down("b")
    snapshot = collector.collect()
    assert not snapshot.stale
    assert [job.job_id for job in snapshot.data.jobs] == [JOB_A]
    [problem] = snapshot.data.failed
    assert (problem.job_key, problem.job_id, problem.jobmanager) == ("orders", JOB_B, JM_B)
    assert "did not answer" in problem.reason and "connection refused" in problem.reason
    assert collector.failures == 1


def test_nothing_readable_is_the_last_good_snapshot_marked_stale(
    two_jobs: JobRegistry,
) -> None:
    managers = JobManagers(a=jobmanager(JOB_A), b=jobmanager(JOB_B))
    collector = RegisteredJobsCollector(two_jobs, managers, clock=ticks())
    good = collector.collect()
    managers.take_down("a")
    managers.take_down("b")
    stale = collector.collect()
    assert stale.stale and stale.data is good.data and stale.taken_at == good.taken_at
    assert stale.reason is not None
    assert f"job clicks ({JOB_A}) at {JM_A}: the JobManager did not answer" in stale.reason
    assert f"job orders ({JOB_B}) at {JM_B}" in stale.reason


def test_nothing_readable_before_a_first_snapshot_is_a_dependency_error(
    two_jobs: JobRegistry,
) -> None:
    managers = JobManagers(a=jobmanager(JOB_A), b=jobmanager(JOB_B))
    managers.take_down("a")
    managers.take_down("b")
    collector = RegisteredJobsCollector(two_jobs, managers)
    with pytest.raises(DependencyError, match="no Flink job could be read"):
        collector.collect()


def test_a_broken_registry_falls_back_to_the_last_snapshot(two_jobs: JobRegistry) -> None:
    collector = RegisteredJobsCollector(two_jobs, JobManagers(a=jobmanager(JOB_A)))
    two_jobs.path.write_text(
        "apiVersion: kubesage/v1\nkind: FlinkJobRegistry\nruns: []\n"
    )  # a readable, empty registry
    assert collector.collect().data == RegisteredJobs()
    two_jobs.path.write_text("runs: [{job_id: 1, bogus: true}]\n")
    stale = collector.collect()
    assert stale.stale and stale.reason is not None
    assert "the Flink job registry cannot be read" in stale.reason


def test_jobs_not_running_are_listed_and_only_the_latest_run_counts(tmp_path: Path) -> None:
    registry = register(
        tmp_path / "flink-jobs.yaml",
        ("1" * 32, "clicks", JM_A),  # an older run of clicks: superseded
        (JOB_A, "clicks", JM_A),
        (JOB_B, "orders", JM_B),
    )
    collector = RegisteredJobsCollector(
        registry, JobManagers(a=jobmanager(JOB_A), b=jobmanager(JOB_B, state="CANCELED"))
    )
    data = collector.collect().data
    assert [job.job_id for job in data.jobs] == [JOB_A]
    assert [(p.job_id, p.reason) for p in data.not_running] == [(JOB_B, "CANCELED")]
    assert collector.failures == 0


def test_a_job_its_jobmanager_does_not_know_is_not_running(tmp_path: Path) -> None:
    registry = register(tmp_path / "flink-jobs.yaml", (JOB_B, "orders", JM_A))
    data = RegisteredJobsCollector(registry, JobManagers(a=jobmanager(JOB_A))).collect().data
    assert data.jobs == ()
    assert [p.reason for p in data.not_running] == ["unknown to its JobManager (expired or lost)"]


def test_a_suspended_job_is_not_running_but_keeps_its_measurements(tmp_path: Path) -> None:
    # SUSPENDED: its JobManager lost leadership; an HA failover resumes the job. Unlike
    # CANCELED it is not dropped: back to RUNNING, its window goes on at once.
    registry = register(tmp_path / "flink-jobs.yaml", (JOB_A, "clicks", JM_A))
    running = jobmanager(JOB_A)
    managers = JobManagers(a=running)
    collector = RegisteredJobsCollector(registry, managers, clock=ticks())
    assert collector.collect().data.jobs[0].observation.window_s == 0
    managers.transports[JM_A] = jobmanager(JOB_A, state="SUSPENDED")
    data = collector.collect().data
    assert data.jobs == ()
    assert [(p.job_id, p.reason) for p in data.not_running] == [(JOB_A, "SUSPENDED, not RUNNING")]
    managers.transports[JM_A] = running  # the new leader: the same job, RUNNING
    assert collector.collect().data.jobs[0].observation.window_s > 0
