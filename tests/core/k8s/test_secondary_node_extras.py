"""The secondary scheduler and the loop's binds honour what the core's model does not
count: other resources (RDMA devices, hugepages, ephemeral storage), the node's pod count
and host ports, as kube-scheduler's NodeResourcesFit and NodePorts do, so the kubelet
does not refuse what kubesage binds (``OutOfpods``, a host-port conflict)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubesage.core.k8s.actuators import live_actuators
from kubesage.core.k8s.node_extras import PODS_REASON, PORTS_REASON
from kubesage.core.k8s.translate import pod_request
from kubesage.core.loop.actions import Bind, PodRef
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import Placement
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.core.k8s.test_secondary import NAME, Harness, gang
from tests.fakes.apiserver import FakeApiServer, wait_until

RDMA = "rdma/hca_shared_devices_a"
SMALL = {"cpu": "1", "memory": "1Gi"}


def node(name: str, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    obj = v1_node(name, gpus=8)
    obj["status"]["allocatable"].update(allocatable or {})
    return obj


@contextmanager
def cluster(*nodes: dict[str, Any]) -> Iterator[Harness]:
    with FakeApiServer() as fake:
        for obj in nodes:
            fake.add_node(obj)
        h = Harness(fake)
        h.sync.start()
        assert h.sync.wait_until_ready(10)
        try:
            yield h
        finally:
            h.sync.stop()


def asking(name: str, requests: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    wanted = SMALL | requests
    container = v1_container(requests=wanted, limits=wanted)
    return v1_pod(name, containers=[container], scheduler_name=NAME, **kwargs)


def torchrun(name: str, **kwargs: Any) -> dict[str, Any]:
    """A hostNetwork pod on torchrun's port 29500 (hostPort defaults to containerPort)."""
    container = v1_container(requests=SMALL)
    container["ports"] = [{"containerPort": 29500, "protocol": "TCP"}]
    pod = v1_pod(name, containers=[container], scheduler_name=NAME, **kwargs)
    pod["spec"]["hostNetwork"] = True
    return pod


def running_on(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    pod["spec"]["nodeName"] = node_name
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["status"]["phase"] = "Running"
    return pod


def failed_messages(h: Harness, name: str) -> list[str]:
    return [
        str(e["message"])
        for e in h.events("FailedScheduling")
        if e["involvedObject"]["name"] == name
    ]


def test_pods_over_a_nodes_other_resources_wait_with_kube_schedulers_words() -> None:
    with cluster(node("n1"), node("n2", {RDMA: "1"})) as h:
        for name in ("rdma-0", "rdma-1"):
            h.fake.add_pod(asking(name, {RDMA: "1"}))
        h.fake.add_pod(asking("huge", {"hugepages-2Mi": "1Gi"}))
        h.fake.add_pod(asking("eph", {"ephemeral-storage": "5Ti"}))
        h.seen(4)
        report = h.scheduler.schedule_once()
        # One RDMA device, on n2: the first pod takes it, the second sees it taken.
        assert report.bound == {"ml/rdma-0": "n2"}
        assert failed_messages(h, "rdma-1") == [
            f"0/1 placed: ml/rdma-1 (0 of 1 placed): no node fits: Insufficient {RDMA} (2 nodes)"
        ]
        (huge,) = failed_messages(h, "huge")
        assert huge.endswith("no node fits: Insufficient hugepages-2Mi (2 nodes)")
        (eph,) = failed_messages(h, "eph")
        assert eph.endswith("no node fits: Insufficient ephemeral-storage (2 nodes)")
        assert h.scheduler.schedule_once().bound == {}  # the bound pod holds its device


def test_gang_members_on_one_host_port_go_to_different_nodes() -> None:
    with cluster(node("n1"), node("n2")) as h:
        for i in range(2):
            h.fake.add_pod(torchrun(f"w{i}", annotations=gang("job", 2)))
        h.seen(2)
        report = h.scheduler.schedule_once()
        assert sorted(report.bound) == ["ml/w0", "ml/w1"]
        assert sorted(report.bound.values()) == ["n1", "n2"]  # bestfit alone would pack them


def test_a_gang_whose_host_ports_do_not_fit_binds_nothing() -> None:
    with cluster(node("n1")) as h:
        for i in range(2):
            h.fake.add_pod(torchrun(f"w{i}", annotations=gang("job", 2)))
        h.seen(2)
        report = h.scheduler.schedule_once()
        assert report.bound == {}
        assert report.waiting == {
            "ml/job": f"ml/w1 (1 of 2 placed): no node fits: {PORTS_REASON} (1 node)"
        }
        assert h.node_of("w0") is None and h.node_of("w1") is None


def test_a_port_held_by_another_schedulers_pod_keeps_the_pod_off_its_node() -> None:
    with cluster(node("n1"), node("n2")) as h:
        held = v1_container(requests={"cpu": "32", "memory": "64Gi"})
        held["ports"] = [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]
        h.fake.add_pod(running_on(v1_pod("web", containers=[held]), "n1"))
        wait_until(lambda: len(h.sync.bound_pods()) == 1, what="the running pod seen")
        wanted = v1_container(requests=SMALL)
        wanted["ports"] = [{"containerPort": 8080, "hostPort": 8080}]  # every IP
        h.fake.add_pod(v1_pod("mine", containers=[wanted], scheduler_name=NAME))
        h.seen(1)
        # bestfit would take the fuller n1; its port 8080 is taken on 10.0.0.1.
        assert h.scheduler.schedule_once().bound == {"ml/mine": "n2"}


def test_the_pod_count_counts_bound_and_assumed_pods() -> None:
    with cluster(node("n1", {"pods": "3"})) as h:
        h.fake.add_pod(running_on(v1_pod("other"), "n1"))
        wait_until(lambda: len(h.sync.bound_pods()) == 1, what="the running pod seen")
        for i in range(4):
            h.fake.add_pod(asking(f"tiny{i}", {}))
        h.seen(4)
        report = h.scheduler.schedule_once()
        assert sorted(report.bound) == ["ml/tiny0", "ml/tiny1"]
        assert report.waiting["ml/tiny2"].endswith(f"no node fits: {PODS_REASON} (1 node)")
        assert h.scheduler.schedule_once().bound == {}  # assumed or bound, they still count


def bind(h: Harness, pod: dict[str, Any], node_name: str) -> Bind:
    with h.sync.locked() as (state, _):
        index = state.node_index[node_name]
    metadata = pod["metadata"]
    return Bind(
        pod=PodRef(metadata["namespace"], metadata["name"], metadata["uid"]),
        request=pod_request(pod),
        placement=Placement(node=node_name, node_index=index),
        reconciler="test",
        explanation="a test asked",
    )


def test_the_loops_binds_check_host_ports_and_see_the_ones_before() -> None:
    with cluster(node("n1"), node("n2")) as h:
        h.fake.add_pod(running_on(torchrun("elsewhere"), "n1"))
        wait_until(lambda: len(h.sync.bound_pods()) == 1, what="the running pod seen")
        first, second = (h.fake.add_pod(torchrun(f"w{i}")) for i in range(2))
        h.seen(2)
        binder = live_actuators(h.api, h.sync, make_policy("bestfit", PolicyContext()))[0]
        refused = binder.execute(bind(h, first, "n1"))
        assert refused.outcome is Outcome.REFUSED
        assert refused.detail == f"pod ml/w0 may not go to n1: NodePorts: {PORTS_REASON}"
        assert binder.execute(bind(h, first, "n2")).outcome is Outcome.DONE
        # w0 is assumed on n2 (or seen bound there): w1 may go to neither node.
        for where in ("n1", "n2"):
            result = binder.execute(bind(h, second, where))
            assert result.outcome is Outcome.REFUSED and "NodePorts" in result.detail
        assert h.node_of("w1") is None


def test_a_refused_loop_bind_frees_the_host_ports_it_was_admitted_with() -> None:
    with cluster(node("n1")) as h:
        asks_gpu = torchrun("gpu-w")
        container = asks_gpu["spec"]["containers"][0]
        container["resources"] = {"requests": SMALL | {"nvidia.com/gpu": "1"}}
        first, second = h.fake.add_pod(asks_gpu), h.fake.add_pod(torchrun("w"))
        h.seen(2)
        binder = live_actuators(h.api, h.sync, make_policy("bestfit", PolicyContext()))[0]
        # its ports fit n1 (admitted), then the bind path refuses a placement that gives
        # a GPU pod no GPU: the Binding is never posted
        refused = binder.execute(bind(h, first, "n1"))
        assert refused.outcome is Outcome.REFUSED and "NodePorts" not in refused.detail
        assert h.node_of("gpu-w") is None
        # so its port is free at once, not after the ledger's grace for unseen binds
        done = binder.execute(bind(h, second, "n1"))
        assert done.outcome is Outcome.DONE, done.detail
