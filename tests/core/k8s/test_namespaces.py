"""NamespaceCache and the webhook's namespaceSelector, against the FAKE API server through
the real kubernetes client: policies come from SchedulingPolicy objects and namespace
labels from list + watch of /api/v1/namespaces, as in a cluster."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from kubernetes import client as k8s_client

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.namespaces import NamespaceCache
from kubesage.core.k8s.policy_source import ApiPolicySource
from kubesage.core.k8s.webhook import APPLIED_ANNOTATION, AdmissionWebhook
from kubesage.core.observability import metrics
from tests.core.k8s import v1_pod
from tests.fakes.apiserver import SCHEDULING_POLICIES, FakeApiServer, wait_until

TEAM_ML_POLICY = {
    "apiVersion": "kubesage.io/v1alpha1",
    "kind": "SchedulingPolicy",
    "metadata": {"name": "team-ml"},
    "spec": {
        "podSelector": {},
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "inject": {"schedulerName": "kubesage", "labels": {"kubesage.io/team": "ml"}},
    },
}


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_custom(SCHEDULING_POLICIES, TEAM_ML_POLICY)
        server.add_namespace("research", {"team": "ml"})
        server.add_namespace("shop", {"team": "web"})
        yield server


def api_client(fake: FakeApiServer) -> k8s_client.ApiClient:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    return api


@pytest.fixture
def cache(fake: FakeApiServer) -> Iterator[NamespaceCache]:
    with NamespaceCache(api_client(fake), backoff_s=0.02, max_backoff_s=0.1) as started:
        assert started.wait_until_synced(10)
        yield started


@pytest.fixture
def webhook(fake: FakeApiServer, cache: NamespaceCache) -> Iterator[AdmissionWebhook]:
    hook = AdmissionWebhook(
        ApiPolicySource(api_client(fake)), budget_s=30.0, namespace_labels=cache
    )
    yield hook
    hook.close()


def admitted(webhook: AdmissionWebhook, namespace: str) -> dict[str, Any]:
    """The pod the API server would store after the webhook patched its CREATE."""
    pod = v1_pod("trainer-0", namespace=namespace)
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d3c1e5a-8b3f-4f0e-9d5c-2a1b3c4d5e6f",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "dryRun": False,
        },
    }
    status, answer = webhook.handle(json.dumps(body).encode())
    assert status == 200, answer
    response = answer["response"]
    assert response["allowed"] is True
    if "patch" not in response:
        return pod
    patch = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, patch)
    return result


def mutated(pod: dict[str, Any]) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(APPLIED_ANNOTATION) != "team-ml":
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        return False
    assert pod["spec"]["schedulerName"] == "kubesage"
    assert pod["metadata"]["labels"]["kubesage.io/team"] == "ml"
    return True


def fallbacks(reason: str) -> float:
    labels = {"component": "namespace_cache", "reason": reason}
    return metrics.REGISTRY.get_sample_value("kubesage_fallbacks_total", labels) or 0.0


def team(cache: NamespaceCache, namespace: str) -> str | None:
    labels = cache.get(namespace)
    return None if labels is None else labels.get("team")


def test_fake_namespaces_have_the_labels_the_api_server_sets(fake: FakeApiServer) -> None:
    listed = k8s_client.CoreV1Api(api_client(fake)).list_namespace(label_selector="team=ml")
    assert [ns.metadata.name for ns in listed.items] == ["research"]
    (research,) = listed.items
    assert research.metadata.labels == {"team": "ml", "kubernetes.io/metadata.name": "research"}
    assert research.status.phase == "Active"
    # The name label is immutable: an update cannot remove it.
    fake.label_namespace("research", {"kubernetes.io/metadata.name": None, "team": None})
    assert fake.namespace("research")["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "research"
    }


def test_selector_on_a_namespace_label_mutates_only_pods_of_matching_namespaces(
    webhook: AdmissionWebhook, cache: NamespaceCache
) -> None:
    assert cache.get("research") == {"team": "ml", "kubernetes.io/metadata.name": "research"}
    assert mutated(admitted(webhook, "research"))
    assert not mutated(admitted(webhook, "shop"))


def test_relabels_new_and_deleted_namespaces_are_picked_up_by_the_watch(
    fake: FakeApiServer, webhook: AdmissionWebhook, cache: NamespaceCache
) -> None:
    fake.label_namespace("shop", {"team": "ml"})
    fake.label_namespace("research", {"team": None})
    wait_until(lambda: team(cache, "shop") == "ml" and team(cache, "research") is None)
    assert mutated(admitted(webhook, "shop"))
    assert not mutated(admitted(webhook, "research"))

    fake.add_namespace("vision", {"team": "ml"})
    wait_until(lambda: team(cache, "vision") == "ml", what="the new namespace")
    assert mutated(admitted(webhook, "vision"))
    fake.delete_namespace("vision")
    wait_until(lambda: cache.get("vision") is None, what="the deleted namespace")
    assert cache.relists == 1  # all of it through the one watch


def test_api_down_keeps_the_last_good_labels_and_counts_the_fallbacks(
    fake: FakeApiServer, webhook: AdmissionWebhook, cache: NamespaceCache
) -> None:
    api_errors, stale = fallbacks("api_error"), fallbacks("stale_labels")
    fake.wait_for_watches(1)  # a watch still connecting would miss both the fault and the drop
    fake.fail("GET", r"^/api/v1/namespaces$", 503, times=10**6, message="etcd unavailable")
    fake.drop_watches()
    wait_until(lambda: cache.stale and cache.failures >= 2, what="the cache to see the outage")
    assert "503" in (cache.error or "")
    fake.label_namespace("research", {"team": "web"})  # not seen while the API is down
    assert mutated(admitted(webhook, "research"))
    assert not mutated(admitted(webhook, "shop"))
    assert fallbacks("api_error") >= api_errors + 2
    assert fallbacks("stale_labels") == stale + 2

    fake.clear_faults()
    wait_until(lambda: not cache.stale and team(cache, "research") == "web", what="recovery")
    assert not mutated(admitted(webhook, "research"))


def test_unknown_namespace_is_matched_on_its_name_only(cache: NamespaceCache) -> None:
    counted = fallbacks("unknown_namespace")
    assert cache("nowhere") == {"kubernetes.io/metadata.name": "nowhere"}
    assert fallbacks("unknown_namespace") == counted + 1
    assert cache("research")["team"] == "ml"
    assert fallbacks("unknown_namespace") == counted + 1


def test_before_the_first_list_every_namespace_is_unknown(fake: FakeApiServer) -> None:
    fake.fail("GET", r"^/api/v1/namespaces$", 500, times=10**6)
    with NamespaceCache(api_client(fake), backoff_s=0.02, max_backoff_s=0.1) as cache:
        wait_until(lambda: cache.failures >= 1)
        assert not cache.wait_until_synced(0.05)
        assert cache("research") == {"kubernetes.io/metadata.name": "research"}
        fake.clear_faults()
        assert cache.wait_until_synced(10)
        assert team(cache, "research") == "ml"


def test_an_expired_resource_version_relists(fake: FakeApiServer, cache: NamespaceCache) -> None:
    fake.label_namespace("shop", {"team": "data"})
    wait_until(lambda: team(cache, "shop") == "data")
    fake.add_pod(v1_pod("trainer-0", namespace="shop"))  # newer than the cache's version
    fake.compact()  # history gone: resuming from the cache's version is 410 Expired
    fake.drop_watches()
    fake.label_namespace("shop", {"team": "ml"})  # made while disconnected
    wait_until(lambda: team(cache, "shop") == "ml", what="the relabel after relisting")
    assert cache.relists == 2


def test_memory_is_bounded_by_max_namespaces(fake: FakeApiServer) -> None:
    fake.add_namespace("alpha", {"team": "ml"})
    with NamespaceCache(api_client(fake), max_namespaces=2) as cache:
        assert cache.wait_until_synced(10)
        assert len(cache) == 2 and cache.overflow == 1
        assert cache.get("alpha") is not None and cache.get("research") is not None
        assert cache("shop") == {"kubernetes.io/metadata.name": "shop"}  # over the cap
        fake.add_namespace("beta")
        wait_until(lambda: cache.overflow == 2, what="the new namespace to overflow")
        assert len(cache) == 2


@pytest.mark.parametrize("options", [{"resync_s": 0}, {"max_namespaces": 0}])
def test_bad_options_are_rejected(fake: FakeApiServer, options: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="NamespaceCache"):
        NamespaceCache(api_client(fake), **options)
