"""The secondary scheduler leaves the room kube-scheduler freed by preemption to the pod
it nominated there (``status.nominatedNodeName``), as kube-scheduler's own cycles do."""

from __future__ import annotations

from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.core.k8s.test_secondary import NAME, Harness
from tests.fakes.apiserver import FakeApiServer

EIGHT = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}


def _pod(name: str, priority: int, scheduler: str | None = None) -> dict[str, object]:
    container = [v1_container(requests=EIGHT, limits=EIGHT)]
    if scheduler is None:
        return v1_pod(name, containers=container, priority=priority)
    return v1_pod(name, containers=container, scheduler_name=scheduler, priority=priority)


def test_a_lower_priority_pod_does_not_take_a_node_nominated_for_another() -> None:
    with FakeApiServer() as fake:
        fake.add_node(v1_node("n1", gpus=8))
        fake.add_node(v1_node("n2", gpus=8))
        h = Harness(fake)
        h.sync.start()
        try:
            assert h.sync.wait_until_ready(10)
            high = _pod("high-prio", 1_000_000)  # kube-scheduler's, nominated to n1
            high["status"]["nominatedNodeName"] = "n1"
            fake.add_pod(high)
            fake.add_pod(_pod("low-prio", 0, NAME))
            h.seen(1)
            assert h.scheduler.schedule_once().bound == {"ml/low-prio": "n2"}
            fake.add_pod(_pod("low-prio-2", 0, NAME))
            h.seen(1)
            report = h.scheduler.schedule_once()
            assert report.bound == {}  # n1 stays the nominated pod's; n2 is full
        finally:
            h.sync.stop()
