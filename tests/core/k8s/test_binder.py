"""Binder against the fake API server: retries, conflicts, never binding twice."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import RESTResponse

from kubesage.core.annotations import GPU_INDICES_ANNOTATION, MIG_START_ANNOTATION
from kubesage.core.k8s.apiclient import ApiException, load_api_client
from kubesage.core.k8s.binder import (
    BindConflictError,
    Binder,
    BindError,
    PodGatedError,
    PodGoneError,
    parse_gpu_indices,
    placement_annotations,
    retry_after_s,
)
from kubesage.core.types import Placement
from tests.core.k8s import v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer

BINDING = r"^/api/v1/namespaces/ml/pods/[^/]+/binding$"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(v1_node("n1"))
        server.add_node(v1_node("n2"))
        yield server


def make_binder(fake: FakeApiServer, attempts: int = 4) -> Binder:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    return Binder(api, attempts=attempts, backoff_s=0.01, max_backoff_s=0.02)


def add(fake: FakeApiServer, name: str = "p") -> dict[str, Any]:
    return fake.add_pod(v1_pod(name, scheduler_name="kubesage"))


def test_bind_sets_node_and_copies_gpu_annotations(fake: FakeApiServer) -> None:
    pod = add(fake)
    binder = make_binder(fake)
    placement = Placement(node="n2", node_index=1, gpu_milli_by_index=((2, 1000), (3, 1000)))
    binder.bind(
        "ml", "p", pod["metadata"]["uid"], "n2", annotations=placement_annotations(placement)
    )
    stored = fake.pod("ml", "p")
    assert stored["spec"]["nodeName"] == "n2"
    assert stored["metadata"]["annotations"][GPU_INDICES_ANNOTATION] == "2,3"
    assert parse_gpu_indices(stored["metadata"]["annotations"]) == ((2, 3), None)
    assert [c["type"] for c in stored["status"]["conditions"]] == ["PodScheduled"]
    assert binder.posts == 1


def test_server_errors_are_retried(fake: FakeApiServer) -> None:
    pod = add(fake)
    fake.fail("POST", BINDING, 503, times=2)
    binder = make_binder(fake)
    binder.bind("ml", "p", pod["metadata"]["uid"], "n1")
    assert fake.pod("ml", "p")["spec"]["nodeName"] == "n1"
    assert (binder.posts, binder.retries) == (3, 2)


def test_a_replica_that_stopped_leading_retries_no_bind(fake: FakeApiServer) -> None:
    """The Lease lost while a bind is failing: another replica schedules now, so no
    further attempt is made."""
    pod = add(fake)
    stop = threading.Event()
    # the Lease is lost while the first attempt fails: set before the 503 is answered
    fake.fail("POST", BINDING, 503, times=100, on_hit=stop.set)
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    binder = Binder(api, attempts=5, backoff_s=30.0, max_backoff_s=30.0)  # long waits
    started = time.monotonic()
    with pytest.raises(BindError, match=r"failed after 1 attempt; stopped"):
        binder.bind("ml", "p", pod["metadata"]["uid"], "n1", stop=stop)
    assert time.monotonic() - started < 10 and binder.posts == 1
    assert not fake.pod("ml", "p")["spec"].get("nodeName")


def test_a_lease_lost_during_the_wait_between_attempts_ends_the_wait(
    fake: FakeApiServer,
) -> None:
    """A 429 asking for 30 s makes the wait at least that long (not jittered), so the
    Lease is surely lost during it: the wait ends at once and nothing more is sent."""
    pod = add(fake)
    fake.fail("POST", BINDING, 429, times=100, retry_after_s=30)
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    binder = Binder(api, attempts=5, backoff_s=0.01, max_retry_after_s=30.0)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(BindError, match=r"stopped"):
        binder.bind("ml", "p", pod["metadata"]["uid"], "n1", stop=stop)
    assert time.monotonic() - started < 10 and binder.posts == 1
    assert not fake.pod("ml", "p")["spec"].get("nodeName")


def test_lost_response_then_conflict_on_same_node_counts_as_done(fake: FakeApiServer) -> None:
    pod = add(fake)
    fake.fail("POST", BINDING, 500, after_apply=True)  # bound, but the answer is lost
    binder = make_binder(fake)
    binder.bind("ml", "p", pod["metadata"]["uid"], "n1")
    assert fake.pod("ml", "p")["spec"]["nodeName"] == "n1"
    assert binder.posts == 2  # the retry met 409 "already assigned to n1": done
    assert len(fake.requests_to("GET", r"^/api/v1/namespaces/ml/pods/p$")) == 1


def test_pod_bound_elsewhere_is_a_conflict_not_retried(fake: FakeApiServer) -> None:
    pod = add(fake)

    def elsewhere(obj: dict[str, Any]) -> None:
        obj["spec"]["nodeName"] = "n2"

    fake.modify_pod("ml", "p", elsewhere)
    binder = make_binder(fake)
    with pytest.raises(BindConflictError, match="bound to n2") as caught:
        binder.bind("ml", "p", pod["metadata"]["uid"], "n1")
    assert caught.value.bound_node == "n2"
    assert binder.posts == 1


def test_a_pod_bound_once_is_never_posted_again(fake: FakeApiServer) -> None:
    pod = add(fake)
    binder = make_binder(fake)
    binder.bind("ml", "p", pod["metadata"]["uid"], "n1")
    binder.bind("ml", "p", pod["metadata"]["uid"], "n1")
    assert binder.posts == 1
    with pytest.raises(BindConflictError):
        binder.bind("ml", "p", pod["metadata"]["uid"], "n2")
    assert len(fake.requests_to("POST", BINDING)) == 1


@pytest.mark.parametrize(
    ("setup", "error", "match"),
    [
        ("missing", PodGoneError, "not found"),
        ("recreated", PodGoneError, "another UID"),
        ("forbidden", BindError, "HTTP 403"),
        ("always-down", BindError, "after 3 attempts"),
    ],
)
def test_failures_raise_typed_errors(
    fake: FakeApiServer, setup: str, error: type[Exception], match: str
) -> None:
    uid = "0000-not-a-real-uid"
    if setup != "missing":
        pod = add(fake)
        uid = pod["metadata"]["uid"]
    if setup == "recreated":
        fake.delete_pod("ml", "p")
        pod = fake.add_pod({**v1_pod("p"), "metadata": {"name": "p", "namespace": "ml"}})
    if setup == "forbidden":
        fake.fail("POST", BINDING, 403)
    if setup == "always-down":
        fake.fail("POST", BINDING, 500, times=100)
    binder = make_binder(fake, attempts=3)
    with pytest.raises(error, match=match):
        binder.bind("ml", "p", uid, "n1")
    if setup in ("forbidden", "missing"):
        assert binder.posts == 1  # not retried


def test_annotations_round_trip_for_mig() -> None:
    placement = Placement(node="n", node_index=0, gpu_milli_by_index=((1, 500),), mig_start=4)
    annotations = placement_annotations(placement)
    assert annotations == {GPU_INDICES_ANNOTATION: "1", MIG_START_ANNOTATION: "4"}
    assert parse_gpu_indices(annotations) == ((1,), 4)
    assert parse_gpu_indices({GPU_INDICES_ANNOTATION: "x"}) is None
    assert placement_annotations(Placement(node="n", node_index=0)) == {}


def test_a_gated_pod_is_refused_by_the_fake_and_the_binder_stops_at_once(
    fake: FakeApiServer,
) -> None:
    pod = v1_pod("gated", scheduler_name="kubesage")
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    uid = fake.add_pod(pod)["metadata"]["uid"]
    binder = make_binder(fake)
    with pytest.raises(PodGatedError, match=re.escape("kueue.x-k8s.io/admission")) as caught:
        binder.bind("ml", "gated", uid, "n1")
    # The API server's own refusal, carried in the error.
    assert 'pods/binding "gated": pod gated has non-empty .spec.schedulingGates' in str(
        caught.value
    )
    assert fake.pod("ml", "gated")["spec"].get("nodeName") is None
    assert (binder.posts, binder.retries) == (1, 0)


def test_a_terminating_pod_is_gone_after_one_post(fake: FakeApiServer) -> None:
    uid = add(fake)["metadata"]["uid"]

    def terminating(obj: dict[str, Any]) -> None:
        obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"

    fake.modify_pod("ml", "p", terminating)
    binder = make_binder(fake)
    with pytest.raises(PodGoneError, match="being deleted, cannot be assigned to a host"):
        binder.bind("ml", "p", uid, "n1")
    assert (binder.posts, binder.retries) == (1, 0)


def test_429_waits_as_long_as_retry_after_asks_capped(fake: FakeApiServer) -> None:
    uid = add(fake)["metadata"]["uid"]
    throttled = "Too many requests, please try again later."
    fake.fail("POST", BINDING, 429, times=2, message=throttled, retry_after_s=3)
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    waits: list[float] = []
    binder = Binder(
        api,
        attempts=4,
        backoff_s=0.01,
        max_backoff_s=0.02,
        max_retry_after_s=2.5,
        sleep=waits.append,
    )
    binder.bind("ml", "p", uid, "n1")
    assert fake.pod("ml", "p")["spec"]["nodeName"] == "n1"
    assert waits == [2.5, 2.5]  # Retry-After: 3, capped; not the 0.01-0.02 s backoff
    assert binder.posts == 3


def test_retry_after_is_read_from_the_status_details_without_the_header() -> None:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 4},
        "code": 429,
    }
    answer = urllib3.HTTPResponse(
        body=json.dumps(status).encode(), status=429, reason="Too Many Requests"
    )
    assert retry_after_s(client_error(answer)) == 4.0
    answer = urllib3.HTTPResponse(
        body=json.dumps(status).encode(),
        status=429,
        reason="Too Many Requests",
        headers={"Retry-After": "7"},
    )
    assert retry_after_s(client_error(answer)) == 7.0  # the header wins


def client_error(answer: urllib3.HTTPResponse) -> ApiException:
    """The ApiException the generated client raises for a non-2xx answer."""
    response = RESTResponse(answer)
    response.read()
    with pytest.raises(ApiException) as caught:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return caught.value
