"""Gangs in the secondary scheduler: members being deleted do not count towards
``min-available``, and ``FailedScheduling`` events are repeated per pod, not per gang."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.core.k8s.test_secondary import NAME, Harness, gang
from tests.fakes.apiserver import FakeApiServer, wait_until

EIGHT = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
FOUR = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "4"}


@contextmanager
def nodes_of_8_gpus(count: int) -> Iterator[Harness]:
    with FakeApiServer() as fake:
        for index in range(count):
            fake.add_node(v1_node(f"n{index + 1}", gpus=8))
        h = Harness(fake)
        h.sync.start()
        assert h.sync.wait_until_ready(10)
        yield h
        h.sync.stop()


@pytest.fixture
def cluster() -> Iterator[Harness]:
    with nodes_of_8_gpus(3) as h:
        yield h


@pytest.fixture
def one_node() -> Iterator[Harness]:
    with nodes_of_8_gpus(1) as h:
        yield h


def member(name: str, requests: dict[str, str], minimum: int, waiting: str = "60s") -> Any:
    return v1_pod(
        name,
        containers=[v1_container(requests=requests, limits=requests)],
        scheduler_name=NAME,
        annotations=gang("job", minimum, waiting),
    )


def test_members_being_deleted_do_not_count_towards_min_available(cluster: Harness) -> None:
    # The job's old attempt: 3 members on n1, being deleted (a restart).
    small = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    for i in range(3):
        old = member(f"old{i}", small, 3)
        old["spec"]["nodeName"] = "n1"
        old["status"]["phase"] = "Running"
        old["metadata"]["deletionTimestamp"] = "2026-11-30T02:00:00Z"
        cluster.fake.add_pod(old)
    # The new attempt: 3 members of 8 GPUs; only n2 and n3 have 8 free.
    for i in range(3):
        cluster.fake.add_pod(member(f"new{i}", EIGHT, 3))
    cluster.seen(3)
    wait_until(lambda: len(cluster.sync.bound_pods()) == 3, what="the old members")
    report = cluster.scheduler.schedule_once()
    assert report.bound == {}  # not 2 of 3 members holding 16 GPUs
    assert "2 of 3 placed" in report.waiting["ml/job"]
    assert cluster.fake.requests_to("POST", r"/binding$") == []

    for i in range(3):  # the old attempt is gone: n1 is free, the gang fits
        cluster.fake.delete_pod("ml", f"old{i}")
    wait_until(lambda: cluster.sync.bound_pods() == [], what="the old members gone")
    report = cluster.scheduler.schedule_once()
    assert sorted(report.bound) == ["ml/new0", "ml/new1", "ml/new2"]


def test_a_growing_gang_gets_one_event_per_member_per_waiting_time(one_node: Harness) -> None:
    cluster = one_node
    for i in range(2):
        cluster.fake.add_pod(member(f"w{i}", FOUR, 2, "300s"))
    cluster.seen(2)
    assert sorted(cluster.scheduler.schedule_once().bound) == ["ml/w0", "ml/w1"]
    for i in range(2, 5):  # the job grows past min-available: no room left
        cluster.fake.add_pod(member(f"w{i}", FOUR, 2, "300s"))
    cluster.seen(3)
    for _ in range(5):
        cluster.scheduler.schedule_once()
    events = cluster.events("FailedScheduling")
    assert sorted(e["involvedObject"]["name"] for e in events) == ["w2", "w3", "w4"]
    cluster.now[0] = 299.0
    cluster.scheduler.schedule_once()
    assert len(cluster.events("FailedScheduling")) == 3
    cluster.now[0] = 300.0  # one waiting time later: once more each
    cluster.scheduler.schedule_once()
    cluster.scheduler.schedule_once()
    assert len(cluster.events("FailedScheduling")) == 6


def test_the_event_record_forgets_pods_no_longer_pending(one_node: Harness) -> None:
    cluster = one_node
    for i in range(2):
        cluster.fake.add_pod(member(f"w{i}", EIGHT, 2))
    cluster.seen(2)
    cluster.scheduler.schedule_once()
    assert len(cluster.events("FailedScheduling")) == 2
    assert cluster.scheduler.events.remembered == 2  # the per-pod record
    for i in range(2):
        cluster.fake.delete_pod("ml", f"w{i}")
    cluster.seen(0)
    cluster.scheduler.schedule_once()
    assert cluster.scheduler.events.remembered == 0


def test_an_unexpected_bind_error_gives_every_unbound_members_room_back(
    cluster: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An assumption whose bind never finishes never expires on its own: a bind that
    raises something unexpected (a client bug, not an API error) must not leave the
    gang's room held, or its pods would never be pending again."""
    for index in range(2):
        cluster.fake.add_pod(
            v1_pod(
                f"w{index}",
                containers=[v1_container(requests=EIGHT, limits=EIGHT)],
                scheduler_name=NAME,
                annotations={"kubesage.io/gang": "job", "kubesage.io/gang-min-available": "2"},
            )
        )
    cluster.seen(2)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise TypeError("a client bug")

    monkeypatch.setattr(cluster.scheduler.binder, "bind", crash)
    with pytest.raises(TypeError):
        cluster.scheduler.schedule_once()
    assert len(cluster.sync.pending_pods(NAME)) == 2  # not assumed any more
    monkeypatch.undo()
    assert sorted(cluster.scheduler.schedule_once().bound) == ["ml/w0", "ml/w1"]
