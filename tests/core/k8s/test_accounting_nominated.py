"""Room kube-scheduler's preemption freed for a pod (``status.nominatedNodeName``) is
held for it in the state kubesage's own placements are decided on, and only there."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.schedulable import nominated_node
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import PodRequest
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

WHOLE_NODE = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
WHOLE_REQUEST = PodRequest(
    name="ml/mine", cpu_milli=8000, memory_mib=65536, num_gpu=8, gpu_milli=1000
)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(v1_node("n1", gpus=8))
        server.add_node(v1_node("n2", gpus=8))
        yield server


def nominated(
    name: str, priority: int, requests: dict[str, str] = WHOLE_NODE, node: str = "n1"
) -> dict[str, Any]:
    pod = v1_pod(name, containers=[v1_container(requests=requests)], priority=priority)
    pod["status"]["nominatedNodeName"] = node
    return pod


def mine(priority: int) -> dict[str, Any]:
    """A pod kubesage places, of ``priority``."""
    return v1_pod(f"mine-{priority}", priority=priority, scheduler_name="kubesage")


def free_gpus(sync: ClusterSync, priority: int | None = None) -> dict[str, int]:
    """Wholly free GPUs per node in the live state (``priority`` None) or in the state
    kubesage places a pod of ``priority`` on."""
    view = sync.locked() if priority is None else sync.locked_placing([mine(priority)])
    with view as (state, names):
        return {name: int(state.gpu_whole_free_count[i]) for i, name in enumerate(names)}


def synced(fake: FakeApiServer, check: Callable[[ClusterSync], bool]) -> ClusterSync:
    sync = ClusterSync(fake.client(), backoff_s=0.02, max_backoff_s=0.1)
    sync.start()
    assert sync.wait_until_ready(10)
    wait_until(lambda: check(sync), what="the pods seen")
    return sync


def test_a_nominated_pod_holds_its_room_for_kubesages_placements_only(
    fake: FakeApiServer,
) -> None:
    fake.add_pod(nominated("high", priority=1_000_000))
    sync = synced(fake, lambda s: free_gpus(s, 0)["n1"] == 0)
    try:
        assert free_gpus(sync, 0) == {"n1": 0, "n2": 8}
        with sync.locked_placing([mine(0)]) as (state, _):
            decision = make_policy("bestfit", PolicyContext()).decide(state, WHOLE_REQUEST)
        assert decision.placement is not None and decision.placement.node == "n2"
        # The live state, which the extender filters the preemptor itself on, is untouched.
        assert free_gpus(sync) == {"n1": 8, "n2": 8}
        # A pod of higher priority than the nominated one ignores it (it could preempt it).
        assert free_gpus(sync, 1_000_001) == {"n1": 8, "n2": 8}
        assert free_gpus(sync, 1_000_000) == {"n1": 0, "n2": 8}
    finally:
        sync.stop()


def test_the_room_goes_with_the_nomination_and_is_counted_once_when_bound(
    fake: FakeApiServer,
) -> None:
    fake.add_pod(nominated("high", priority=10, requests={"cpu": "1", "nvidia.com/gpu": "4"}))
    fake.add_pod(nominated("other", priority=10, node="n2"))
    sync = synced(fake, lambda s: free_gpus(s, 0) == {"n1": 4, "n2": 0})
    try:

        def bind(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = "n1"  # kube-scheduler bound it where it was nominated
            pod["status"]["phase"] = "Running"

        fake.modify_pod("ml", "high", bind)
        wait_until(lambda: free_gpus(sync)["n1"] == 4, what="high bound")
        assert free_gpus(sync, 0) == {"n1": 4, "n2": 0}

        def give_up(pod: dict[str, Any]) -> None:
            del pod["status"]["nominatedNodeName"]

        fake.modify_pod("ml", "other", give_up)
        wait_until(lambda: free_gpus(sync, 0)["n2"] == 8, what="nomination cleared")
        fake.add_pod(nominated("leaving", priority=10, node="n2"))
        wait_until(lambda: free_gpus(sync, 0)["n2"] == 0, what="leaving nominated")
        fake.delete_pod("ml", "leaving")
        wait_until(lambda: free_gpus(sync, 0)["n2"] == 8, what="leaving deleted")
    finally:
        sync.stop()


def test_a_nominated_pod_kubesage_cannot_read_holds_its_node_whatever_its_priority(
    fake: FakeApiServer,
) -> None:
    odd = {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": "2"}  # not modelled
    fake.add_pod(nominated("odd", priority=0, requests=odd))
    sync = synced(fake, lambda s: free_gpus(s, 100)["n1"] < 8)
    try:
        assert free_gpus(sync, 100) == {"n1": 6, "n2": 8}  # two GPUs, one per instance
        assert free_gpus(sync) == {"n1": 8, "n2": 8}
    finally:
        sync.stop()


def test_the_pods_being_placed_do_not_hold_room_against_themselves(
    fake: FakeApiServer,
) -> None:
    own = nominated("mine", priority=5)  # another component's hint on kubesage's pod
    own["spec"]["schedulerName"] = "kubesage"
    fake.add_pod(own)
    fake.add_pod(nominated("other", priority=5, node="n2"))
    sync = synced(fake, lambda s: free_gpus(s, 0)["n2"] == 0)
    try:
        pod = fake.pod("ml", "mine")
        assert nominated_node(pod) == "n1"
        with sync.locked_placing([pod]) as (state, names):
            free = {name: int(state.gpu_whole_free_count[i]) for i, name in enumerate(names)}
        assert free == {"n1": 8, "n2": 0}
    finally:
        sync.stop()


def test_only_a_pending_pod_that_is_not_being_deleted_is_nominated() -> None:
    pod = nominated("p", priority=0)
    assert nominated_node(pod) == "n1"
    assert nominated_node({**pod, "spec": {**pod["spec"], "nodeName": "n2"}}) is None
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    assert nominated_node(deleting) is None
    assert nominated_node(v1_pod("q")) is None
