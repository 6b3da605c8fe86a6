"""The secondary scheduler end to end: fake API server, real client, ClusterSync, Binder."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.leader import LeaderElector
from kubesage.core.k8s.node_eligibility import node_fits_pod
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.observability import metrics
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

NAME = "kubesage"


class Harness:
    """A fake cluster, a ClusterSync on it and a scheduler with a controllable clock."""

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.now = [0.0]
        api = load_api_client(str(fake.kubeconfig))
        assert api is not None
        self.api = api
        self.sync = ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1)
        self.scheduler = SecondaryScheduler(
            api,
            self.sync,
            make_policy("bestfit", PolicyContext()),
            scheduler_name=NAME,
            binder=Binder(api, backoff_s=0.01, max_backoff_s=0.02, attempts=3),
            clock=lambda: self.now[0],
        )

    def add(self, name: str, *, gpus: int = 1, **kwargs: Any) -> dict[str, Any]:
        requests = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": str(gpus)}
        pod = v1_pod(
            name, containers=[v1_container(requests=requests)], scheduler_name=NAME, **kwargs
        )
        return self.fake.add_pod(pod)

    def seen(self, pending: int) -> None:
        wait_until(lambda: len(self.sync.pending_pods(NAME)) == pending, what=f"{pending} pending")

    def node_of(self, name: str) -> str | None:
        node = self.fake.pod("ml", name)["spec"].get("nodeName")
        return str(node) if node else None

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.fake.events("ml") if e["reason"] == reason]


@pytest.fixture
def harness() -> Iterator[Harness]:
    with FakeApiServer() as fake:
        fake.add_node(v1_node("n1", gpus=4))
        fake.add_node(v1_node("n2", gpus=4))
        h = Harness(fake)
        h.sync.start()
        assert h.sync.wait_until_ready(10)
        yield h
        h.sync.stop()


def bound_total() -> float:
    return metrics.REGISTRY.get_sample_value("kubesage_binds_total", {"outcome": "bound"}) or 0.0


def gang(name: str, minimum: int, waiting: str = "60s") -> dict[str, str]:
    return {
        "kubesage.io/gang": name,
        "kubesage.io/gang-min-available": str(minimum),
        "kubesage.io/gang-waiting-time": waiting,
    }


def test_binds_its_own_pods_only_with_gpu_annotations_and_events(harness: Harness) -> None:
    harness.add("mine", gpus=2)
    harness.fake.add_pod(v1_pod("theirs"))  # default-scheduler's
    harness.seen(1)
    binds_before = bound_total()
    report = harness.scheduler.schedule_once()
    assert list(report.bound) == ["ml/mine"]
    assert bound_total() == binds_before + 1
    node = harness.node_of("mine")
    assert node in ("n1", "n2")
    annotations = harness.fake.pod("ml", "mine")["metadata"]["annotations"]
    assert annotations[GPU_INDICES_ANNOTATION] == "0,1"
    assert harness.node_of("theirs") is None
    (event,) = harness.events("Scheduled")
    assert event["involvedObject"]["name"] == "mine"
    assert event["message"] == f"Successfully assigned ml/mine to {node}"
    assert event["type"] == "Normal" and event["source"]["component"] == NAME
    # The next cycle sees the pod assumed (then bound): nothing is bound twice.
    assert harness.scheduler.schedule_once().bound == {}
    assert len(harness.fake.requests_to("POST", r"/binding$")) == 1


def test_a_gang_waits_for_all_members_then_binds_them_together(harness: Harness) -> None:
    for i in range(2):
        harness.add(f"w{i}", annotations=gang("job", 3))
    harness.seen(2)
    report = harness.scheduler.schedule_once()
    assert report.bound == {}
    assert report.waiting == {"ml/job": "gang ml/job: 2 of 3 members present"}
    harness.add("w2", annotations=gang("job", 3))
    harness.seen(3)
    report = harness.scheduler.schedule_once()
    assert sorted(report.bound) == ["ml/w0", "ml/w1", "ml/w2"]
    assert all(harness.node_of(f"w{i}") for i in range(3))


def test_a_gang_that_does_not_fit_binds_nothing_until_room_appears(harness: Harness) -> None:
    for i in range(3):
        harness.add(f"big{i}", gpus=4, annotations=gang("big", 3))
    harness.seen(3)
    report = harness.scheduler.schedule_once()
    assert report.bound == {} and "ml/big" in report.waiting
    assert all(harness.node_of(f"big{i}") is None for i in range(3))
    failed = harness.events("FailedScheduling")
    assert len(failed) == 3 and "0/3 placed" in failed[0]["message"]
    # kube-scheduler's condition, which the Cluster Autoscaler scales up for.
    for i in range(3):
        conditions = harness.fake.pod("ml", f"big{i}")["status"].get("conditions") or []
        (scheduled,) = [c for c in conditions if c["type"] == "PodScheduled"]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert "0/3 placed" in scheduled["message"]
    assert harness.scheduler.schedule_once().bound == {}
    assert len(harness.events("FailedScheduling")) == 3  # reported once per waiting time

    harness.fake.add_node(v1_node("n3", gpus=4))
    wait_until(lambda: len(harness.sync.nodes()) == 3, what="n3")
    report = harness.scheduler.schedule_once()
    assert len(report.bound) == 3
    assert sorted(harness.node_of(f"big{i}") or "" for i in range(3)) == ["n1", "n2", "n3"]


def test_waiting_past_the_timeout_reports_and_waits_again(harness: Harness) -> None:
    harness.add("lonely", annotations=gang("pair", 2, waiting="30s"))
    harness.seen(1)
    harness.scheduler.schedule_once()
    assert harness.events("FailedScheduling") == []
    harness.now[0] = 31.0
    harness.scheduler.schedule_once()
    (event,) = harness.events("FailedScheduling")
    assert "1 of 2 members present after 30s; waiting again" in event["message"]
    harness.now[0] = 40.0
    harness.scheduler.schedule_once()
    assert len(harness.events("FailedScheduling")) == 1  # the wait restarted at 31 s


def test_node_selector_taints_and_cordons_are_honoured(harness: Harness) -> None:
    def cordon(node: dict[str, Any]) -> None:
        node["spec"]["unschedulable"] = True

    def taint(node: dict[str, Any]) -> None:
        node["spec"]["taints"] = [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}]

    harness.fake.modify_node("n1", cordon)
    harness.fake.add_node(v1_node("n3", gpus=4, extra_labels={"pool": "a"}))
    harness.fake.modify_node("n3", taint)
    wait_until(lambda: len(harness.sync.nodes()) == 3, what="n3")
    harness.add("anywhere")
    selective = v1_pod(
        "pool-a",
        containers=[v1_container(requests={"cpu": "1", "nvidia.com/gpu": "1"})],
        scheduler_name=NAME,
        node_selector={"pool": "a"},
    )
    selective["spec"]["tolerations"].append(
        {"key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule"}
    )
    harness.fake.add_pod(selective)
    harness.seen(2)
    report = harness.scheduler.schedule_once()
    assert report.bound == {"ml/anywhere": "n2", "ml/pool-a": "n3"}


@pytest.mark.parametrize(
    ("pod_spec", "node_spec", "labels", "fits"),
    [
        ({}, {"taints": [{"key": "k", "effect": "NoExecute"}]}, {}, False),
        (
            {"tolerations": [{"operator": "Exists"}]},
            {"taints": [{"key": "k", "effect": "NoExecute"}]},
            {},
            True,
        ),
        ({}, {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}, {}, True),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gen", "operator": "Gt", "values": ["3"]}
                                    ]
                                },
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["x"]}
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            {},
            {"gen": "4"},
            True,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gen", "operator": "NotIn", "values": ["4"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            {},
            {"gen": "4"},
            False,
        ),
        (  # an operator other than Exists/Equal (Lt, behind a feature gate) tolerates nothing
            {"tolerations": [{"key": "a", "operator": "Lt", "value": "5", "effect": "NoSchedule"}]},
            {"taints": [{"key": "a", "value": "5", "effect": "NoSchedule"}]},
            {},
            False,
        ),
    ],
)
def test_node_filters(
    pod_spec: dict[str, Any], node_spec: dict[str, Any], labels: dict[str, str], fits: bool
) -> None:
    node = {"metadata": {"name": "n", "labels": labels}, "spec": node_spec}
    assert node_fits_pod({"spec": pod_spec}, node) is fits


@pytest.mark.parametrize(
    ("allocatable", "fits"),
    [
        ({"nvidia.com/gpu": "8"}, True),
        ({"nvidia.com/gpu": "0"}, False),  # a node all in MIG mode
        ({}, False),  # GPUs published only through DRA: no device plugin to admit it
    ],
)
def test_a_pod_asking_for_nvidia_gpu_needs_a_node_that_advertises_it(
    allocatable: dict[str, str], fits: bool
) -> None:
    pod = {
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8", **allocatable}}}
    assert node_fits_pod(pod, node) is fits
    assert node_fits_pod({"spec": {"containers": [{"name": "c"}]}}, node)  # no GPU asked


def test_a_failed_member_bind_is_forgotten_and_retried(harness: Harness) -> None:
    for i in range(2):
        harness.add(f"m{i}", annotations=gang("duo", 2))
    harness.seen(2)
    harness.fake.fail("POST", r"/pods/m1/binding$", 403)
    report = harness.scheduler.schedule_once()
    assert list(report.bound) == ["ml/m0"] and "HTTP 403" in report.failed["ml/m1"]
    wait_until(lambda: len(harness.sync.pending_pods(NAME)) == 1, what="m1 pending again")
    wait_until(lambda: len(harness.sync.bound_pods()) == 1, what="m0 bound")
    # m0 is bound, so the gang has its minimum met with m1: m1 goes alone now.
    report = harness.scheduler.schedule_once()
    assert list(report.bound) == ["ml/m1"]


def test_no_bind_after_the_lease_is_lost_mid_cycle(harness: Harness) -> None:
    # The stop signal (the Lease lost) comes while a gang is being bound: the member
    # bound stays bound, the rest are given back unbound, and the run ends.
    for i in range(2):
        harness.add(f"m{i}", annotations=gang("duo", 2))
    harness.seen(2)
    stop = threading.Event()
    binder = harness.scheduler.binder
    real_bind = binder.bind

    def bind_then_lose_the_lease(*args: Any, **kwargs: Any) -> Any:
        done = real_bind(*args, **kwargs)
        stop.set()
        return done

    binder.bind = bind_then_lose_the_lease  # type: ignore[method-assign]
    harness.scheduler.run(stop)
    assert [harness.node_of(f"m{i}") is not None for i in range(2)] == [True, False]
    wait_until(lambda: len(harness.sync.bound_pods()) == 1, what="m0 bound")
    binder.bind = real_bind  # type: ignore[method-assign]
    # Given back: the next leader's cycle binds m1 (the gang's minimum met with m0).
    assert list(harness.scheduler.schedule_once().bound) == ["ml/m1"]


def test_bad_annotations_are_reported_once_and_skipped(harness: Harness) -> None:
    harness.add("odd", annotations={"kubesage.io/gang": "g", "kubesage.io/gang-min-available": "x"})
    harness.add("fine")
    harness.seen(2)
    report = harness.scheduler.schedule_once()
    assert list(report.bound) == ["ml/fine"] and "whole number" in report.failed["ml/odd"]
    harness.scheduler.schedule_once()
    assert len(harness.events("FailedScheduling")) == 1


def test_two_replicas_under_leader_election_bind_each_pod_once(harness: Harness) -> None:
    stop = threading.Event()
    threads = []
    for identity in ("replica-a", "replica-b"):
        sync = ClusterSync(harness.api, backoff_s=0.02, max_backoff_s=0.1)
        sync.start()
        scheduler = SecondaryScheduler(
            harness.api,
            sync,
            make_policy("bestfit", PolicyContext()),
            scheduler_name=NAME,
            interval_s=0.1,
            identity=identity,
        )
        elector = LeaderElector(
            harness.api,
            lease_name="kubesage",
            namespace="kube-system",
            identity=identity,
            lease_s=5.0,  # long: no change of leader on a busy machine in this test
            renew_s=3.0,
            retry_s=0.05,
        )
        thread = threading.Thread(target=elector.lead, args=(scheduler.run, stop), daemon=True)
        thread.start()
        threads.append((thread, sync))
    try:
        for i in range(6):
            harness.add(f"job-{i}")
        wait_until(lambda: all(harness.node_of(f"job-{i}") for i in range(6)), what="all bound")
        posts = harness.fake.requests_to("POST", r"/binding$")
        assert sorted(r.path for r in posts) == sorted(
            f"/api/v1/namespaces/ml/pods/job-{i}/binding" for i in range(6)
        )
        reporters = {e["reportingInstance"] for e in harness.events("Scheduled")}
        assert len(reporters) == 1  # only the leader scheduled
    finally:
        stop.set()
        for thread, sync in threads:
            thread.join(5)
            sync.stop()


def test_gated_pods_are_not_pending_nor_counted_in_their_gang(harness: Harness) -> None:
    def gated(pod: dict[str, Any]) -> None:
        pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]

    member = v1_pod("w1", scheduler_name=NAME, annotations=gang("job", 2))
    gated(member)
    harness.fake.add_pod(member)
    lone = v1_pod("lone", scheduler_name=NAME)
    gated(lone)
    harness.fake.add_pod(lone)
    harness.add("w0", annotations=gang("job", 2))  # last: once it is seen, all are
    harness.seen(1)
    assert [p["metadata"]["name"] for p in harness.sync.pending_pods(NAME)] == ["w0"]
    report = harness.scheduler.schedule_once()
    assert report.bound == {} and report.failed == {}
    assert report.waiting == {"ml/job": "gang ml/job: 1 of 2 members present"}
    assert harness.fake.requests_to("POST", r"/binding$") == []

    def ungate(pod: dict[str, Any]) -> None:  # what Kueue does on admission
        pod["spec"].pop("schedulingGates")

    harness.fake.modify_pod("ml", "w1", ungate)
    harness.seen(2)
    report = harness.scheduler.schedule_once()
    assert sorted(report.bound) == ["ml/w0", "ml/w1"]
    assert harness.node_of("lone") is None
