"""Bound pods kubesage cannot model, or that do not fit their node in its view, are
counted conservatively: their CPU and memory, and GPUs held out of placement."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

NAME = "kubesage"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def make_sync(fake: FakeApiServer) -> ClusterSync:
    return ClusterSync(fake.client(), backoff_s=0.02, max_backoff_s=0.1)


def bound_pod(
    name: str, node: str, requests: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    pod = v1_pod(name, containers=[v1_container(requests=requests)], annotations=annotations)
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    return pod


def free(sync: ClusterSync, node: str) -> tuple[int, int, list[int]]:
    """Free CPU (milli), memory (MiB) and per-GPU milli of ``node`` as placements see it."""
    with sync.locked() as (state, names):
        i = names.index(node)
        gpus = [int(x) for x in state.gpu_free_milli[i, : state.gpu_count[i]]]
        return int(state.cpu_free_milli[i]), int(state.memory_free_mib[i]), gpus


def uid(fake: FakeApiServer, name: str) -> str:
    return str(fake.pod("ml", name)["metadata"]["uid"])


def test_two_mig_instances_hold_cpu_memory_and_the_gpu_so_kubesage_binds_nothing_there(
    fake: FakeApiServer,
) -> None:
    fake.add_node(v1_node("n1", cpu="96", gpus=1, mig={"1g.10gb": 7}))
    theirs = {"cpu": "80", "memory": "600Gi", "nvidia.com/mig-1g.10gb": "2"}
    fake.add_pod(bound_pod("theirs", "n1", theirs))
    mine = {"cpu": "80", "memory": "100Gi", "nvidia.com/mig-1g.10gb": "1"}
    fake.add_pod(
        v1_pod("mine", containers=[v1_container(requests=mine, limits=mine)], scheduler_name=NAME)
    )
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        scheduler = SecondaryScheduler(
            fake.client(),
            sync,
            make_policy("bestfit", PolicyContext()),
            scheduler_name=NAME,
            binder=Binder(fake.client(), backoff_s=0.01, max_backoff_s=0.02, attempts=3),
        )
        wait_until(lambda: len(sync.pending_pods(NAME)) == 1, what="mine pending")
        assert free(sync, "n1") == (16_000, 754 * 1024 - 600 * 1024, [0])
        reason = sync.unaccounted[uid(fake, "theirs")]
        assert reason.startswith("its requests cannot be read;")
        assert "80000m CPU and 614400Mi memory counted" in reason
        assert reason.endswith("GPUs held out of placement: 0")
        assert scheduler.schedule_once().bound == {}
        fake.delete_pod("ml", "theirs")
        wait_until(lambda: free(sync, "n1")[0] == 96_000, what="theirs released")
        assert scheduler.schedule_once().bound == {"ml/mine": "n1"}


def test_gpus_of_an_unreadable_pod_are_held_and_given_back_with_the_pods_around_them(
    fake: FakeApiServer,
) -> None:
    fake.add_node(v1_node("n1", cpu="64", gpus=4))
    fake.add_pod(bound_pod("exact", "n1", {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}))
    # A GPU share asking two GPUs: not a pod the core models, but its two GPUs are known.
    odd = {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2"}
    fake.add_pod(bound_pod("odd", "n1", odd, annotations={"kubesage.io/gpu-milli": "500"}))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert free(sync, "n1") == (52_000, 754 * 1024 - 24 * 1024, [0, 0, 0, 0])
        fake.add_node(v1_node("n0", cpu="8", gpus=0))  # a rebuild keeps the count
        wait_until(lambda: len(sync.nodes()) == 2, what="n0 added")
        assert free(sync, "n1") == (52_000, 754 * 1024 - 24 * 1024, [0, 0, 0, 0])
        fake.delete_pod("ml", "exact")
        wait_until(lambda: free(sync, "n1")[0] == 56_000, what="exact released")
        assert free(sync, "n1")[2] == [1000, 1000, 0, 0]
        fake.delete_pod("ml", "odd")
        wait_until(lambda: free(sync, "n1")[0] == 64_000, what="odd released")
        assert free(sync, "n1") == (64_000, 754 * 1024, [1000] * 4)
        assert sync.unaccounted == {}


@pytest.mark.parametrize("why", ["unparsable quantity", "unknown ResourceClaim"])
def test_a_pod_whose_gpu_use_cannot_be_told_keeps_its_node_out_of_gpu_placement(
    fake: FakeApiServer, why: str
) -> None:
    fake.add_node(v1_node("n1", cpu="64", gpus=8))
    if why == "unparsable quantity":
        pod = bound_pod("odd", "n1", {"cpu": "a lot", "memory": "8Gi", "nvidia.com/gpu": "1"})
        cpu, memory = 64_000, 754 * 1024  # cannot be read: not counted
    else:
        pod = bound_pod("odd", "n1", {"cpu": "2", "memory": "8Gi"})
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "not-listed"}]
        cpu, memory = 62_000, 746 * 1024
    fake.add_pod(pod)
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert free(sync, "n1") == (cpu, memory, [0] * 8)
        reason = sync.unaccounted[uid(fake, "odd")]
        assert reason.endswith("GPUs held out of placement: 0,1,2,3,4,5,6,7")
        assert ("CPU and memory not counted" in reason) == (why == "unparsable quantity")
        fake.delete_pod("ml", "odd")
        wait_until(lambda: free(sync, "n1") == (64_000, 754 * 1024, [1000] * 8), what="freed")


def test_a_share_on_a_held_out_gpu_is_given_back_exactly(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="64", gpus=2))
    share = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    fake.add_pod(bound_pod("share", "n1", share, annotations={"kubesage.io/gpu-milli": "500"}))
    fake.add_pod(bound_pod("odd", "n1", {"cpu": "a lot", "nvidia.com/gpu": "1"}))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert free(sync, "n1")[2] == [0, 0]  # every GPU held out, the shared one too
        fake.delete_pod("ml", "share")
        wait_until(lambda: free(sync, "n1")[0] == 64_000, what="share released")
        assert free(sync, "n1")[2] == [0, 0]
        fake.delete_pod("ml", "odd")
        wait_until(lambda: free(sync, "n1")[2] == [1000, 1000], what="odd released")


@pytest.mark.parametrize("mig", [None, "2"], ids=["does not fit", "cannot be read"])
def test_a_pod_counted_short_on_a_full_node_is_counted_in_full_when_room_comes_back(
    fake: FakeApiServer, mig: str | None
) -> None:
    fake.add_node(v1_node("small", cpu="4", memory="64Gi", gpus=0))
    fake.add_pod(bound_pod("first", "small", {"cpu": "3", "memory": "8Gi"}))
    big = {"cpu": "8", "memory": "8Gi"}  # more than the node has: the view is off
    if mig is not None:
        big["nvidia.com/mig-1g.10gb"] = mig
    fake.add_pod(bound_pod("big", "small", big))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert free(sync, "small")[:2] == (0, 48 * 1024)
        fake.delete_pod("ml", "first")
        wait_until(lambda: free(sync, "small")[1] == 56 * 1024, what="first released")
        assert free(sync, "small")[0] == 0  # big holds 8 CPUs: all 4 are counted now
        reason = "does not fit on small" if mig is None else "its requests cannot be read"
        assert reason in sync.unaccounted[uid(fake, "big")]
