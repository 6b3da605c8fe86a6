"""In-place rescale on a real Flink cluster: success, refusal, and a rescale that cannot
finish (more slots than exist) — the last two leave the job at its old parallelism."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.rescale import rescale_in_place

from .conftest import recorded, submit_sample, vertex_ids

UNKNOWN_VERTEX = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def running_job(flink_cluster: LocalFlinkCluster, flink_client: FlinkClient) -> Iterator[str]:
    job_id = submit_sample(flink_cluster, flink_client, rate=20.0, capacity=40.0)
    yield job_id
    flink_client.cancel(job_id)


def parallelism(client: FlinkClient, job_id: str) -> dict[str, int]:
    return {v.name: v.parallelism for v in client.job(job_id).vertices}


@pytest.mark.slow
def test_rescale_reaches_running_at_new_parallelism(
    flink_client: FlinkClient, running_job: str
) -> None:
    slow = vertex_ids(flink_client, running_job)["slow"]
    outcome = rescale_in_place(flink_client, running_job, {slow: 2}, timeout_s=60)
    assert outcome.succeeded, outcome.message
    assert outcome.parallelism[slow] == 2
    job = flink_client.job(running_job)
    assert job.state == "RUNNING" and job.vertex(slow).parallelism == 2
    assert flink_client.resource_requirements(running_job)[slow].upper == 2
    back = rescale_in_place(flink_client, running_job, {slow: 1}, timeout_s=60)
    assert back.succeeded, back.message


def test_refused_rescale_leaves_the_job_as_it_was(
    flink_client: FlinkClient, running_job: str
) -> None:
    before = parallelism(flink_client, running_job)
    requirements = flink_client.resource_requirements(running_job)
    outcome = rescale_in_place(flink_client, running_job, {UNKNOWN_VERTEX: 2}, timeout_s=20)
    assert not outcome.succeeded
    assert "refused" in outcome.message and "not found in the JobGraph" in outcome.message
    assert parallelism(flink_client, running_job) == before
    assert flink_client.resource_requirements(running_job) == requirements
    assert flink_client.job(running_job).state == "RUNNING"


def test_rescale_beyond_the_slots_is_rolled_back(
    flink_cluster: LocalFlinkCluster, flink_client: FlinkClient, running_job: str
) -> None:
    slow = vertex_ids(flink_client, running_job)["slow"]
    before = parallelism(flink_client, running_job)
    requirements = flink_client.resource_requirements(running_job)
    too_many = flink_cluster.task_slots + 4
    outcome = rescale_in_place(flink_client, running_job, {slow: too_many}, timeout_s=15)
    assert not outcome.succeeded and outcome.restored
    assert f"did not reach {{'{slow}': {too_many}}}" in outcome.message
    assert "previous requirements restored" in outcome.message
    assert flink_client.resource_requirements(running_job) == requirements
    assert parallelism(flink_client, running_job) == before
    assert flink_client.job(running_job).state == "RUNNING"


def test_refusal_from_recorded_reply(replay_client: Callable[..., FlinkClient]) -> None:
    job = recorded("job_running")["body"]
    client = replay_client(
        "resource_requirements", "job_running", "set_resource_requirements_unknown_vertex"
    )
    outcome = rescale_in_place(client, job["jid"], {UNKNOWN_VERTEX: 2}, timeout_s=1)
    assert not outcome.succeeded and not outcome.restored
    assert outcome.parallelism == {v["id"]: v["parallelism"] for v in job["vertices"]}
