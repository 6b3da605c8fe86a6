"""The HTTP app: routes, status codes, size limit, health, metrics, webhook delegation."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from kubesage.core.errors import DependencyError
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.policy_source import default_policy_dir
from kubesage.core.k8s.server import create_app
from kubesage.core.observability import metrics
from kubesage.core.state.cluster_state import ClusterState
from tests.core.k8s import v1_container, v1_pod
from tests.core.k8s.test_extender import NAMES, args, gpu_pod, make_extender

with warnings.catch_warnings():
    # Starlette asks for httpx2 in its test client; httpx is what is installed.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture
def client() -> Iterator[TestClient]:
    extender, _ = make_extender()
    with TestClient(create_app(extender, max_body_bytes=64 * 1024)) as test_client:
        yield test_client


def counter(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_filter_prioritize_bind_round_trip(client: TestClient) -> None:
    pod = gpu_pod("trainer-0", gpus="2")
    filtered = client.post("/scheduler/filter", content=args(pod))
    assert filtered.status_code == 200
    passing = filtered.json()["NodeNames"]
    assert passing == ["h100-a", "h100-b", "h100-small"]
    scores = client.post("/scheduler/prioritize", content=args(pod, passing)).json()
    best = max(scores, key=lambda host: host["Score"])["Host"]
    bound_before = counter("kubesage_binds_total", outcome="bound")
    binding = {
        "PodName": "trainer-0",
        "PodNamespace": "ml",
        "PodUID": pod["metadata"]["uid"],
        "Node": best,
    }
    answer = client.post("/scheduler/bind", content=orjson.dumps(binding))
    assert answer.status_code == 200 and answer.json() == {"Error": ""}
    assert counter("kubesage_binds_total", outcome="bound") == bound_before + 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/scheduler/filter", b"{not json"),
        ("/scheduler/prioritize", b'{"Pod": 3, "NodeNames": []}'),
        ("/scheduler/bind", b'{"PodName": "", "Node": "h100-a"}'),
        ("/scheduler/bind", b"[]"),
    ],
)
def test_malformed_input_is_400_with_a_message(client: TestClient, path: str, body: bytes) -> None:
    verb = path.rsplit("/", 1)[1]
    before = counter("kubesage_errors_total", component=verb, kind="bad_request")
    response = client.post(path, content=body)
    assert response.status_code == 400
    assert response.json()["error"] and response.json()["Error"] == response.json()["error"]
    assert counter("kubesage_errors_total", component=verb, kind="bad_request") == before + 1


def test_body_over_the_limit_is_413(client: TestClient) -> None:
    names = [f"node-{i:06d}" for i in range(10_000)]
    response = client.post("/scheduler/filter", content=args(gpu_pod("p"), names))
    assert response.status_code == 413
    assert "limit" in response.json()["error"]


def test_wrong_method_and_unknown_path(client: TestClient) -> None:
    assert client.get("/scheduler/filter").status_code == 405
    assert client.post("/scheduler/preempt", content=b"{}").status_code == 404


def test_healthz_and_metrics(client: TestClient) -> None:
    client.post("/scheduler/filter", content=args(gpu_pod("p")))
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    exposition = client.get("/metrics")
    assert exposition.status_code == 200
    assert exposition.headers["content-type"].startswith("text/plain")
    text = exposition.text
    assert 'kubesage_decisions_total{outcome="feasible",verb="filter"}' in text
    assert 'kubesage_request_duration_seconds_bucket{handler="filter"' in text


def test_healthz_is_503_while_the_state_is_not_ready() -> None:
    extender, _ = make_extender()
    app = create_app(extender, health=lambda: (False, "nodes and pods not listed yet"))
    with TestClient(app) as test_client:
        response = test_client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "detail": "nodes and pods not listed yet"}


class NotReadyView:
    """A view whose state is not synced yet (what ClusterSync raises before its first list)."""

    @contextmanager
    def locked(self) -> Iterator[tuple[ClusterState, list[str]]]:
        raise DependencyError("the cluster state is not ready: nodes and pods not listed yet")
        yield  # pragma: no cover


def test_dependency_down_is_503_and_counted() -> None:
    extender, _ = make_extender()
    extender.view = NotReadyView()
    with TestClient(create_app(extender)) as test_client:
        before = counter("kubesage_fallbacks_total", component="filter", reason="dependency_down")
        response = test_client.post("/scheduler/filter", content=args(gpu_pod("p")))
    assert response.status_code == 503
    assert "not ready" in response.json()["Error"]
    assert counter("kubesage_fallbacks_total", component="filter", reason="dependency_down") == (
        before + 1
    )


def test_unexpected_failure_is_a_counted_500_not_a_crash() -> None:
    extender, _ = make_extender()

    class Broken(Extender):
        def filter(self, body: bytes) -> tuple[int, bytes]:
            raise RuntimeError("boom")

    broken = Broken(extender.view, extender.policy)
    with TestClient(create_app(broken), raise_server_exceptions=False) as test_client:
        before = counter("kubesage_errors_total", component="filter", kind="internal")
        response = test_client.post("/scheduler/filter", content=args(gpu_pod("p")))
        assert test_client.get("/healthz").status_code == 200  # still serving
    assert response.status_code == 500
    assert response.json()["error"] == "internal error: RuntimeError"
    assert counter("kubesage_errors_total", component="filter", kind="internal") == before + 1


def test_mutate_is_404_without_a_webhook(client: TestClient) -> None:
    response = client.post("/mutate", content=b"{}")
    assert response.status_code == 404
    assert "not enabled" in response.json()["error"]


def admission_review(pod: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": pod["metadata"]["name"],
                "namespace": pod["metadata"]["namespace"],
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:ml:trainer", "groups": []},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    )


def test_mutate_delegates_to_the_admission_webhook() -> None:
    from kubesage.core.k8s.policy_source import FilePolicySource
    from kubesage.core.k8s.webhook import AdmissionWebhook

    policy_dir: Path = default_policy_dir()
    webhook = AdmissionWebhook(FilePolicySource(policy_dir))
    extender, _ = make_extender()
    try:
        with TestClient(create_app(extender, mutate=webhook.handle)) as test_client:
            pod = v1_pod("trainer-0", containers=[v1_container(requests={"cpu": "1"})])
            response = test_client.post("/mutate", content=admission_review(pod))
            malformed = test_client.post("/mutate", content=b'{"kind": "AdmissionReview"}')
    finally:
        webhook.close()
    assert response.status_code == 200
    review = response.json()
    assert review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert review["response"]["allowed"] is True
    assert malformed.status_code == 400 and malformed.json()["error"]


def test_names_beyond_the_cluster_are_echoed_not_lost(client: TestClient) -> None:
    names = [*NAMES, "new-node"]
    response = client.post("/scheduler/prioritize", content=args(gpu_pod("p", gpus="1"), names))
    assert [entry["Host"] for entry in response.json()] == names


def test_healthz_is_503_when_the_health_check_itself_fails() -> None:
    extender, _ = make_extender()

    def no_nodes() -> tuple[bool, str]:
        raise DependencyError("the cluster state is not ready: no schedulable nodes")

    with TestClient(create_app(extender, health=no_nodes)) as test_client:
        response = test_client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["detail"] == "the cluster state is not ready: no schedulable nodes"
