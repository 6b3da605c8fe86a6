"""Binder against the fake API server: retries, conflicts, never binding twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.binder import (
    GPU_INDICES_ANNOTATION,
    MIG_START_ANNOTATION,
    BindConflictError,
    Binder,
    BindError,
    PodGoneError,
    parse_gpu_indices,
    placement_annotations,
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
