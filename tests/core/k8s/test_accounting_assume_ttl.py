"""An assumption's time to live starts when its bind finishes, never while it is in
flight (kube-scheduler's FinishBinding): a gang bound member by member keeps every
member's reservation however long the binds before it take."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import PodRequest
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

NAME = "kubesage"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def free_gpus(sync: ClusterSync, node: str) -> int:
    with sync.locked() as (state, names):
        return int(state.gpu_whole_free_count[names.index(node)])


def test_an_assumption_in_flight_survives_any_wait_and_rebuild_then_expires_after_finish(
    fake: FakeApiServer,
) -> None:
    now = [0.0]
    fake.add_node(v1_node("n1", gpus=8))
    pod = fake.add_pod(v1_pod("p", scheduler_name=NAME))
    sync = ClusterSync(
        fake.client(), assume_ttl_s=30, clock=lambda: now[0], backoff_s=0.02, max_backoff_s=0.1
    )
    with sync:
        assert sync.wait_until_ready(10)
        request = PodRequest(
            name="ml/p", cpu_milli=1000, memory_mib=1024, num_gpu=8, gpu_milli=1000
        )
        with sync.locked() as (state, _):
            sync.assume(pod, request, state.placement(0, range(8), request))
        now[0] = 3600.0  # the bind is still in flight, an hour later
        assert free_gpus(sync, "n1") == 0
        assert sync.expire_assumed() == 0
        fake.add_node(v1_node("n0", gpus=0))  # a rebuild keeps it too
        wait_until(lambda: len(sync.nodes()) == 2, what="n0 added")
        assert free_gpus(sync, "n1") == 0
        assert sync.pending_pods(NAME) == []
        sync.finish_binding(pod)
        now[0] += 29.0
        assert sync.expire_assumed() == 0 and free_gpus(sync, "n1") == 0
        now[0] += 2.0  # 31 s after the bind finished and the watch never confirmed it
        assert free_gpus(sync, "n1") == 8
        assert sync.placement_of(str(pod["metadata"]["uid"])) is None


def test_a_slow_gang_keeps_every_members_reservation_until_its_binding_is_posted(
    fake: FakeApiServer,
) -> None:
    now = [1000.0]
    seen: list[tuple[str, bool, int]] = []
    for i in range(4):
        fake.add_node(v1_node(f"n{i}", gpus=8))
    sync = ClusterSync(fake.client(), clock=lambda: now[0], backoff_s=0.02, max_backoff_s=0.1)

    class SlowBinder(Binder):
        """Each bind takes 11 s (a 429 whose Retry-After is the 10 s kubesage honours)."""

        def bind(
            self,
            namespace: str,
            name: str,
            uid: str,
            node: str,
            *,
            annotations: dict[str, str] | None = None,
            stop: threading.Event | None = None,
        ) -> None:
            now[0] += 11
            seen.append((name, sync.placement_of(uid) is not None, free_gpus(sync, node)))
            super().bind(namespace, name, uid, node, annotations=annotations, stop=stop)

    scheduler = SecondaryScheduler(
        fake.client(),
        sync,
        make_policy("bestfit", PolicyContext()),
        scheduler_name=NAME,
        binder=SlowBinder(fake.client(), backoff_s=0.01, max_backoff_s=0.02, attempts=3),
        clock=lambda: now[0],
    )
    gang = {"kubesage.io/gang": "job", "kubesage.io/gang-min-available": "4"}
    requests = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
    with sync:
        assert sync.wait_until_ready(10)
        for i in range(4):
            container = v1_container(requests=requests, limits=requests)
            fake.add_pod(
                v1_pod(f"w{i}", containers=[container], scheduler_name=NAME, annotations=gang)
            )
        wait_until(lambda: len(sync.pending_pods(NAME)) == 4, what="4 pending")
        assert len(scheduler.schedule_once().bound) == 4
    # 44 s after the gang was assumed, the last member still holds its node.
    assert seen == [(f"w{i}", True, 0) for i in range(4)]
