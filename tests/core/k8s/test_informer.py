"""ClusterSync against the fake API server, through the real kubernetes client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.annotations import GPU_INDICES_ANNOTATION, MIG_START_ANNOTATION
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.informer import ClusterNotReadyError, ClusterSync
from kubesage.core.k8s.translate import pod_request
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def make_sync(fake: FakeApiServer, **kwargs: Any) -> ClusterSync:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    options: dict[str, Any] = {"backoff_s": 0.02, "max_backoff_s": 0.1}
    options.update(kwargs)
    return ClusterSync(api, **options)


def running_pod(
    name: str,
    node: str,
    *,
    cpu: str = "4",
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "16Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    pod = v1_pod(name, containers=[v1_container(requests=requests)], annotations=annotations or {})
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    return pod


def free(sync: ClusterSync) -> dict[str, tuple[int, list[int]]]:
    """Free CPU and per-GPU milli of every node."""
    with sync.locked() as (state, names):
        return {
            name: (
                int(state.cpu_free_milli[i]),
                [int(x) for x in state.gpu_free_milli[i, : state.gpu_count[i]]],
            )
            for i, name in enumerate(names)
        }


def test_initial_list_places_bound_pods_on_recorded_or_lowest_gpus(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("gpu-a", cpu="96", gpus=8))
    fake.add_node(v1_node("cpu-b", cpu="32", gpus=0))
    fake.add_pod(running_pod("p1", "gpu-a", gpus=2))  # no record: GPUs 0 and 1
    fake.add_pod(running_pod("p2", "gpu-a", gpus=1, annotations={GPU_INDICES_ANNOTATION: "5"}))
    fake.add_pod(running_pod("p3", "cpu-b", cpu="2500m"))
    fake.add_pod(v1_pod("pending"))  # not bound: holds nothing
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert free(sync) == {
            "cpu-b": (32_000 - 2_500, []),
            "gpu-a": (96_000 - 8_000, [0, 0, 1000, 1000, 1000, 0, 1000, 1000]),
        }
        assert sync.unaccounted == {}
        assert [p["metadata"]["name"] for p in sync.pending_pods("default-scheduler")] == [
            "pending"
        ]


def test_watch_events_allocate_release_and_rebuild(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="64", gpus=4))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        fake.add_pod(running_pod("w1", "n1", gpus=1))
        wait_until(lambda: free(sync)["n1"][1] == [0, 1000, 1000, 1000], what="w1 allocated")

        fake.add_node(v1_node("n0", cpu="8", gpus=0))  # sorts first: node indices shift
        wait_until(lambda: len(free(sync)) == 2, what="n0 added")
        assert free(sync) == {"n0": (8_000, []), "n1": (60_000, [0, 1000, 1000, 1000])}

        def finish(pod: dict[str, Any]) -> None:
            pod["status"]["phase"] = "Succeeded"

        fake.modify_pod("ml", "w1", finish)  # leaves the field selection: DELETED
        wait_until(lambda: free(sync)["n1"] == (64_000, [1000] * 4), what="w1 released")

        fake.delete_node("n0")
        wait_until(lambda: list(free(sync)) == ["n1"], what="n0 removed")


def test_resource_version_expired_relists(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        fake.wait_for_watches(4)
        relists = sync.relists
        fake.add_pod(running_pod("a", "n1", cpu="1"))
        fake.compact()  # history gone: resuming from any version seen is 410
        fake.drop_watches()
        fake.add_pod(running_pod("b", "n1", cpu="2"))  # made while disconnected
        wait_until(lambda: free(sync)["n1"][0] == 13_000, what="both pods after relist")
        assert sync.relists > relists  # 410 on resuming: relisted, not stuck

        def pod_watches() -> int:
            requests = fake.requests_to("GET", r"^/api/v1/pods$")
            return sum(r.query.get("watch") == ["true"] for r in requests)

        # the first watch, the refused resume, the watch after relisting (which the
        # reflector sends just after the relist that the wait above saw)
        wait_until(lambda: pod_watches() >= 3, what="a watch after relisting")


def test_dropped_watch_resumes_without_relist(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        fake.wait_for_watches(4)
        relists = sync.relists
        fake.drop_watches()
        fake.add_pod(running_pod("late", "n1", cpu="3"))
        wait_until(lambda: free(sync)["n1"][0] == 13_000, what="event after reconnect")
        assert sync.relists == relists  # resumed from the last resourceVersion
        assert sync.failures >= 1  # the broken stream was counted


def test_api_errors_back_off_then_recover_and_mark_stale(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    fake.fail("GET", r"^/api/v1/nodes$", 503, times=2)
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert sync.failures >= 2
        assert not sync.collect().stale

        # nodes, pods, slices: a watch still connecting would miss the fault and the drop
        fake.wait_for_watches(4)
        fake.fail("GET", r"^/api/v1/pods$", 500, times=1_000)
        fake.drop_watches()
        wait_until(lambda: "pods: HTTP 500" in (sync.collect().reason or ""), what="stale")
        snapshot = sync.collect()
        assert snapshot.stale
        assert snapshot.data.num_nodes == 1  # the last good state

        fake.clear_faults()
        wait_until(lambda: not sync.collect().stale, what="recovery")


def test_collect_before_first_list_raises(fake: FakeApiServer) -> None:
    fake.fail("GET", r"^/api/v1/nodes$", 500, times=1_000)
    with make_sync(fake) as sync:
        wait_until(lambda: sync.failures >= 1, what="a failed list")
        assert not sync.ready
        with pytest.raises(ClusterNotReadyError, match="HTTP 500"):
            sync.collect()
        with pytest.raises(ClusterNotReadyError), sync.locked():
            pass


def test_periodic_resync_relists(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    with make_sync(fake, resync_s=0.3) as sync:
        assert sync.wait_until_ready(10)
        wait_until(lambda: sync.relists >= 4, what="two resyncs per reflector")


def test_assumed_pod_is_not_counted_twice_when_the_watch_confirms(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=2))
    pod = fake.add_pod(
        v1_pod("t", containers=[v1_container(requests={"cpu": "2", "nvidia.com/gpu": "1"})])
    )
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        request = pod_request(pod)
        with sync.locked() as (state, _):
            placement = state.placement(0, (1,), request)
            sync.assume(pod, request, placement)
        assert free(sync)["n1"] == (14_000, [1000, 0])
        assert sync.pending_pods("default-scheduler") == []  # assumed: not pending

        def bind(obj: dict[str, Any]) -> None:
            obj["spec"]["nodeName"] = "n1"

        fake.modify_pod("ml", "t", bind)
        wait_until(lambda: sync.bound_pods(), what="bound pod seen")
        assert free(sync)["n1"] == (14_000, [1000, 0])  # same GPU, counted once

        fake.delete_pod("ml", "t")
        wait_until(lambda: free(sync)["n1"] == (16_000, [1000, 1000]), what="released")


def test_forget_and_expiry_release_an_assumption(fake: FakeApiServer) -> None:
    now = [0.0]
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    pods = [
        fake.add_pod(v1_pod(f"p{i}", containers=[v1_container(requests={"cpu": "1"})]))
        for i in range(2)
    ]
    with make_sync(fake, assume_ttl_s=30, clock=lambda: now[0]) as sync:
        assert sync.wait_until_ready(10)
        for pod in pods:
            request = pod_request(pod)
            with sync.locked() as (state, _):
                sync.assume(pod, request, state.placement(0, (), request))
        assert free(sync)["n1"][0] == 14_000
        sync.forget(pods[0])
        assert free(sync)["n1"][0] == 15_000
        now[0] = 100.0
        assert sync.expire_assumed() == 0  # its bind is still in flight: never expires
        sync.finish_binding(pods[1])
        now[0] = 129.0
        assert sync.expire_assumed() == 0
        now[0] = 131.0  # 30 s after the bind finished
        assert sync.expire_assumed() == 1
        assert free(sync)["n1"][0] == 16_000


def test_pod_that_does_not_fit_is_unaccounted_and_fills_its_node(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("small", cpu="4", gpus=0))
    fake.add_pod(running_pod("big", "small", cpu="8"))
    fake.add_pod(running_pod("ghost", "missing-node", cpu="1"))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        unaccounted = sync.unaccounted
        assert set(unaccounted) == {
            p["metadata"]["uid"] for p in fake.pods() if p["metadata"]["name"] in ("big", "ghost")
        }
        assert free(sync)["small"][0] == 0  # counted conservatively: all that was free


def test_untranslatable_node_is_skipped_and_counted(fake: FakeApiServer) -> None:
    bad = v1_node("bad", cpu="lots", gpus=0)
    fake.add_node(bad)
    fake.add_node(v1_node("good", cpu="8", gpus=0))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert list(free(sync)) == ["good"]
        assert sync.untranslatable >= 1


def test_topology_from_node_labels(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("a", zone="z1", rack="r1"))
    fake.add_node(v1_node("b", zone="z2", rack="r2"))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        topology = sync.topology()
        assert sorted(zone.name for zone in topology.zones) == ["z1", "z2"]
        assert sorted(rack.name for rack in topology.racks) == ["r1", "r2"]


def test_bookmarks_keep_a_quiet_watch_resumable_after_compaction() -> None:
    with FakeApiServer(bookmark_interval_s=0.05) as fake:
        fake.add_node(v1_node("n1", cpu="16", gpus=0))
        with make_sync(fake) as sync:
            assert sync.wait_until_ready(10)
            fake.wait_for_watches(4)
            fake.add_pod(running_pod("a", "n1", cpu="1"))  # a new version; nodes stay quiet
            version = str(fake.resource_version)
            wait_until(lambda: sync.resource_versions["nodes"] == version, what="bookmark")
            fake.compact()
            fake.drop_watches()
            fake.add_node(v1_node("n2", cpu="8", gpus=0))
            wait_until(lambda: len(free(sync)) == 2, what="n2 after reconnect")
            node_lists = [
                r for r in fake.requests_to("GET", r"^/api/v1/nodes$") if "watch" not in r.query
            ]
            assert len(node_lists) == 1  # resumed from the bookmark: no 410, no relist


def test_mig_pods_take_their_recorded_slot_or_the_cheapest_free_one(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("mig", gpus=2, mig={"3g.40gb": 4}))
    mig = {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-3g.40gb": "1"}
    recorded = v1_pod(
        "recorded",
        containers=[v1_container(requests=mig)],
        annotations={GPU_INDICES_ANNOTATION: "1", MIG_START_ANNOTATION: "4"},
    )
    unrecorded = v1_pod("unrecorded", containers=[v1_container(requests=mig)])
    for pod in (recorded, unrecorded):
        pod["spec"]["nodeName"] = "mig"
        pod["status"]["phase"] = "Running"
    fake.add_pod(recorded)
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        with sync.locked() as (state, _):
            assert [int(m) for m in state.mig_free_slices[0]] == [0b11111111, 0b00001111]
        fake.add_pod(unrecorded)
        # The slot that costs the least MIG capability: the rest of the used GPU.
        wait_until(lambda: len(sync.bound_pods()) == 2, what="second MIG pod")
        with sync.locked() as (state, _):
            assert [int(m) for m in state.mig_free_slices[0]] == [0b11111111, 0]


def test_node_heartbeats_do_not_wake_waiters_but_taints_do(fake: FakeApiServer) -> None:
    fake.add_node(v1_node("n1", cpu="16", gpus=0))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        generation, rebuilds = sync.generation, sync.rebuilds

        def heartbeat(node: dict[str, Any]) -> None:
            node["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-30T03:00:00Z"

        def taint(node: dict[str, Any]) -> None:
            node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]

        fake.modify_node("n1", heartbeat)
        fake.modify_node("n1", taint)  # same stream: seen after the heartbeat
        wait_until(lambda: "taints" in sync.nodes()["n1"]["spec"], what="taint")
        assert sync.generation == generation + 1  # the taint only
        assert sync.rebuilds == rebuilds  # neither changes the ClusterState
