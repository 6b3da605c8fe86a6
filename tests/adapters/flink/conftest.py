"""A real Flink session cluster for the Flink adapter's tests, and recorded replies.

``flink_cluster`` starts one LocalFlinkCluster per test session (Flink from the
``.venv-flink`` that ``make services`` makes; the cluster and the sample job live in
``benchmarks/flink_support``, shared with the Flink benchmarks). Without Flink it skips
with the reason, except under ``CI=true``, where a missing Flink is a failure.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from benchmarks.flink_support.samples import SAMPLE_JOB
from kubesage.adapters.flink.client import FlinkClient
from tests.services import require_flink

RECORDED = Path(__file__).parent / "recorded"
TASK_SLOTS = 16


def recorded(name: str) -> dict[str, Any]:
    """A recorded reply: ``method``, ``path``, ``status``, ``body``."""
    document: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text())
    return document


def replay(
    routes: dict[tuple[str, str], dict[str, Any] | list[dict[str, Any]]],
) -> httpx.MockTransport:
    """A transport answering (method, path-without-query) with recorded replies.

    A list of replies is served in order (the last one repeats); unknown requests get
    Flink's own 404 body.
    """
    served: dict[tuple[str, str], int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path)
        entry = routes.get(key)
        if entry is None:
            return httpx.Response(404, json=recorded("job_not_found")["body"])
        if isinstance(entry, list):
            index = min(served.get(key, 0), len(entry) - 1)
            served[key] = served.get(key, 0) + 1
            entry = entry[index]
        body = entry["body"]
        if isinstance(body, str):
            return httpx.Response(entry["status"], content=body.encode())
        return httpx.Response(entry["status"], json=body)

    return httpx.MockTransport(handler)


def path_of(name: str) -> str:
    return str(recorded(name)["path"]).split("?", 1)[0]


def one_subtask_times(name: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The recorded vertex reply ``name`` as a one-subtask vertex whose cumulative times
    are the aggregated ``metrics`` reply's (for one subtask the max over subtasks is that
    subtask's own value): what the vertex endpoint answers beside that metrics reply."""
    entry = json.loads(json.dumps(recorded(name)))
    by_id = {metric["id"]: metric for metric in metrics}
    subtask = entry["body"]["subtasks"][0]
    for key, metric in (
        ("accumulated-busy-time", "accumulateBusyTimeMs"),
        ("accumulated-backpressured-time", "accumulateBackPressuredTimeMs"),
    ):
        subtask["metrics"][key] = by_id[metric]["max"] if metric in by_id else "NaN"
    entry["body"]["subtasks"] = [subtask]
    entry["body"]["parallelism"] = 1
    return dict(entry)


def vertex_times(name: str, advance_s: float = 0.0, **busy_ms: float | str) -> dict[str, Any]:
    """The recorded vertex reply ``name`` ``advance_s`` seconds later: every subtask
    accounts for that much more running time (busy + idle + backpressured), busy keeping
    its recorded share of it, except where ``busy_ms`` sets ``s<subtask>``'s accumulated
    busy time (``"NaN"`` as Flink sends what it does not measure); idle takes the rest."""
    entry = json.loads(json.dumps(recorded(name)))
    for subtask in entry["body"]["subtasks"]:
        metrics = subtask["metrics"]
        busy, idle = metrics["accumulated-busy-time"], metrics["accumulated-idle-time"]
        pressured = metrics["accumulated-backpressured-time"]
        total = busy + idle + pressured
        later = total + 1000.0 * advance_s
        given = busy_ms.get(f"s{subtask['subtask']}")
        if given == "NaN":
            metrics["accumulated-busy-time"] = "NaN"
            continue
        new_busy = float(given) if given is not None else busy * later / total
        metrics["accumulated-busy-time"] = new_busy
        metrics["accumulated-idle-time"] = later - new_busy - pressured
    return dict(entry)


@pytest.fixture
def replay_client() -> Callable[..., FlinkClient]:
    """Builds a FlinkClient over recorded replies (no backoff sleeps)."""

    def build(*names: str, **extra: dict[str, Any] | list[dict[str, Any]]) -> FlinkClient:
        routes: dict[tuple[str, str], dict[str, Any] | list[dict[str, Any]]] = {}
        for name in names:
            entry = recorded(name)
            routes[(entry["method"], path_of(name))] = entry
        for key, value in extra.items():
            method, _, path = key.partition(" ")
            routes[(method, path)] = value
        return FlinkClient("http://flink.test", transport=replay(routes), backoff_s=0.0)

    return build


def submit_sample(
    cluster: LocalFlinkCluster, client: FlinkClient, *, rate: float, capacity: float
) -> str:
    """Submits the sample job at parallelism 1 and waits until all its vertices run.

    Module-scoped fixtures submit before the per-test TaskManager check runs, and the
    crash an earlier test's cancel causes can come seconds after it: a lost TaskManager
    is replaced before the submission and while waiting (the job is then scheduled on
    the new one; a replacement takes up to a heartbeat timeout, hence the longer wait).
    """
    cluster.ensure_taskmanager()
    job_id = cluster.submit_python(
        SAMPLE_JOB, ["--rate", str(rate), "--capacity", str(capacity)], parallelism=1
    )
    wait_running(client, job_id, timeout_s=150, cluster=cluster)
    return job_id


def wait_running(
    client: FlinkClient,
    job_id: str,
    *,
    timeout_s: float,
    cluster: LocalFlinkCluster | None = None,
) -> None:
    """Waits until the job and every one of its vertices are RUNNING; with ``cluster``,
    a TaskManager lost meanwhile is replaced."""

    def running() -> bool:
        if cluster is not None:
            cluster.ensure_taskmanager()
        job = client.job(job_id)
        return job.state == "RUNNING" and all(v.status == "RUNNING" for v in job.vertices)

    wait_until(running, timeout_s=timeout_s, what=f"job {job_id} RUNNING")


def wait_until(check: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def vertex_ids(client: FlinkClient, job_id: str) -> dict[str, str]:
    """Vertex name → id (names: 'Source: sequence -> pace', 'slow', 'sink: Writer')."""
    return {vertex.name: vertex.id for vertex in client.job(job_id).vertices}


@pytest.fixture(scope="session")
def flink_cluster() -> Iterator[LocalFlinkCluster]:
    require_flink()
    with LocalFlinkCluster(task_slots=TASK_SLOTS) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _live_taskmanager(request: pytest.FixtureRequest) -> None:
    """Before each test on the real cluster: a TaskManager is registered.

    A PyFlink thread-mode crash when an earlier test cancelled its job takes the
    TaskManager down (see ``LocalFlinkCluster.ensure_taskmanager``); a new one is
    started, and the test run says so rather than failing every later test.
    """
    if "flink_cluster" not in request.fixturenames:
        return
    cluster: LocalFlinkCluster = request.getfixturevalue("flink_cluster")
    if cluster.ensure_taskmanager():
        warnings.warn(
            f"the Flink TaskManager had died (JVM crash report in {cluster.log_dir}); "
            "a new one was started",
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def flink_client(flink_cluster: LocalFlinkCluster) -> Iterator[FlinkClient]:
    with FlinkClient(flink_cluster.rest_url) as client:
        yield client
