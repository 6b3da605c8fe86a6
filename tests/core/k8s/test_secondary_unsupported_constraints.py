"""The secondary scheduler binds no pod whose required constraints it cannot honour
(inter-pod affinity, DoNotSchedule topology spread): it leaves the pod pending with one
``FailedScheduling`` event naming the field per waiting time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.k8s.namespaces import NamespaceCache
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.core.k8s.test_secondary import NAME, Harness, gang
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.apiserver.resources import wait_until

SELECTOR = {"matchLabels": {"app": "inference"}}
TERM = {"labelSelector": SELECTOR, "topologyKey": "kubernetes.io/hostname"}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture
def cluster() -> Iterator[Harness]:
    with FakeApiServer() as fake:
        fake.add_node(v1_node("n1", gpus=8))
        fake.add_node(v1_node("n2", gpus=8))
        h = Harness(fake)
        h.sync.start()
        assert h.sync.wait_until_ready(10)
        yield h
        h.sync.stop()


def replica(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    requests = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    pod = v1_pod(
        name,
        containers=[v1_container(requests=requests, limits=requests)],
        scheduler_name=NAME,
        annotations=annotations,
    )
    pod["metadata"]["labels"] = {"app": "inference"}
    pod["spec"].update(spec)
    return pod


def spread(when: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": when,
            "labelSelector": SELECTOR,
        }
    ]


def test_required_anti_affinity_and_spread_are_refused_with_one_event(cluster: Harness) -> None:
    cluster.fake.add_pod(replica("anti", affinity={"podAntiAffinity": {REQUIRED: [TERM]}}))
    cluster.fake.add_pod(replica("spread", topologySpreadConstraints=spread("DoNotSchedule")))
    cluster.fake.add_pod(replica("near", affinity={"podAffinity": {REQUIRED: [TERM]}}))
    cluster.seen(3)
    report = cluster.scheduler.schedule_once()
    assert report.bound == {}
    assert sorted(report.failed) == ["ml/anti", "ml/near", "ml/spread"]
    assert cluster.fake.requests_to("POST", r"/binding$") == []
    messages = {
        e["involvedObject"]["name"]: e["message"] for e in cluster.events("FailedScheduling")
    }
    assert messages == {
        "anti": f"kubesage does not implement: spec.affinity.podAntiAffinity.{REQUIRED}",
        "near": f"kubesage does not implement: spec.affinity.podAffinity.{REQUIRED}",
        "spread": "kubesage does not implement: spec.topologySpreadConstraints[0]"
        " (whenUnsatisfiable: DoNotSchedule)",
    }
    cluster.scheduler.schedule_once()
    assert len(cluster.events("FailedScheduling")) == 3  # once per waiting time (120 s)
    cluster.now[0] = 120.0
    cluster.scheduler.schedule_once()
    assert len(cluster.events("FailedScheduling")) == 6
    assert all(cluster.node_of(name) is None for name in ("anti", "near", "spread"))


def test_preferred_terms_and_schedule_anyway_are_ignored(cluster: Harness) -> None:
    preferred = {"podAntiAffinity": {PREFERRED: [{"weight": 5, "podAffinityTerm": TERM}]}}
    cluster.fake.add_pod(
        replica("soft", affinity=preferred, topologySpreadConstraints=spread("ScheduleAnyway"))
    )
    cluster.fake.add_pod(replica("hard", topologySpreadConstraints=spread("DoNotSchedule")))
    cluster.seen(2)
    report = cluster.scheduler.schedule_once()
    assert list(report.bound) == ["ml/soft"] and list(report.failed) == ["ml/hard"]


def test_a_refused_member_does_not_count_towards_its_gang(cluster: Harness) -> None:
    cluster.fake.add_pod(replica("w0", gang("job", 2)))
    refused = replica("w1", gang("job", 2), affinity={"podAntiAffinity": {REQUIRED: [TERM]}})
    cluster.fake.add_pod(refused)
    cluster.seen(2)
    report = cluster.scheduler.schedule_once()
    assert report.bound == {}
    assert report.waiting == {"ml/job": "gang ml/job: 1 of 2 members present"}
    assert cluster.fake.requests_to("POST", r"/binding$") == []


def test_a_running_pods_anti_affinity_keeps_a_pod_it_selects_off_its_node(
    cluster: Harness,
) -> None:
    """kube-scheduler's InterPodAffinity checks the running pods' terms too: a guard on n1
    that repels app=inference keeps kubesage's replica off n1 (it had been bound there)."""
    guard = v1_pod("guard", containers=[v1_container(requests={"cpu": "1"})])
    guard["metadata"]["labels"] = {"app": "guard"}
    guard["spec"]["nodeName"] = "n1"
    guard["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [TERM]}}
    cluster.fake.add_pod(guard)
    for index in range(3):
        cluster.fake.add_pod(replica(f"r{index}"))
    cluster.seen(3)
    report = cluster.scheduler.schedule_once()
    assert sorted(report.bound) == ["ml/r0", "ml/r1", "ml/r2"]
    assert {cluster.node_of(f"r{index}") for index in range(3)} == {"n2"}
    # n2 cordoned: n1, where the guard repels it, is the only node left, and is not taken
    cluster.fake.modify_node("n2", lambda node: node["spec"].update(unschedulable=True))
    wait_until(lambda: cluster.sync.nodes()["n2"]["spec"].get("unschedulable"), what="cordon")
    cluster.fake.add_pod(replica("r3"))
    cluster.seen(1)
    report = cluster.scheduler.schedule_once()
    assert report.bound == {} and cluster.node_of("r3") is None


def test_a_running_pods_namespace_selector_is_matched_on_the_namespaces_labels(
    cluster: Harness,
) -> None:
    """The guard on n1 repels app=inference pods of the namespaces labelled team=ml: with
    the namespaces' labels a replica in a team=web namespace may use n1; without them
    the term is taken to select it, and n1 is not taken."""
    cluster.fake.add_namespace("shop", {"team": "web"})
    guard = v1_pod("guard", containers=[v1_container(requests={"cpu": "1"})])
    guard["metadata"]["labels"] = {"app": "guard"}
    guard["spec"]["nodeName"] = "n1"
    term = {**TERM, "namespaceSelector": {"matchLabels": {"team": "ml"}}}
    guard["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [term]}}
    cluster.fake.add_pod(guard)
    cluster.fake.modify_node("n2", lambda node: node["spec"].update(unschedulable=True))
    wait_until(lambda: cluster.sync.nodes()["n2"]["spec"].get("unschedulable"), what="cordon")
    pod = replica("r0")
    pod["metadata"]["namespace"] = "shop"
    cluster.fake.add_pod(pod)
    cluster.seen(1)
    assert cluster.scheduler.schedule_once().bound == {}  # the safe side
    with NamespaceCache(cluster.api, backoff_s=0.02, max_backoff_s=0.1) as namespaces:
        assert namespaces.wait_until_synced(10)
        scheduler = SecondaryScheduler(
            cluster.api,
            cluster.sync,
            make_policy("bestfit", PolicyContext()),
            scheduler_name=NAME,
            namespace_labels=namespaces,
        )
        report = scheduler.schedule_once()
    assert list(report.bound) == ["shop/r0"]
    assert cluster.fake.pod("shop", "r0")["spec"]["nodeName"] == "n1"
