"""The loop's cluster collectors keep each pod's record while the pod is unchanged.

Every tick collects every pod; on a cluster of tens of thousands of pods rebuilding
(and, live, translating) each one every tick is most of the tick, and the objects it
leaves set the garbage collector scanning the heap (``benchmarks/loop_scale.py``). What
must hold: an unchanged pod's record is the same object as on the last tick; a changed
pod (bound, evicted, a new resourceVersion, a new placement) gets a new, correct one;
a pod that is gone is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubesage.core.cli.loop import embedded_loop
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector, LiveClusterCollector
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.informer import pod_key
from kubesage.core.loop.settings import LoopSettings
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import ClusterObservation
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import NodeSpec, Placement
from tests.core.k8s import v1_pod
from tests.core.loop.doubles import small_state, whole_gpu_pod


def collected(collector: Any) -> dict[str, PodInfo]:
    observation = collector.collect().data
    assert isinstance(observation, ClusterObservation)
    return dict(observation.pods)


def test_the_embedded_collector_keeps_unchanged_pods_and_renews_changed_ones() -> None:
    nodes = [
        NodeSpec(
            name=f"node-{i}", cpu_milli=64_000, memory_mib=256_000, gpu_count=2, gpu_model="A100"
        )
        for i in range(2)
    ]
    cluster = EmbeddedCluster(nodes, [whole_gpu_pod("typical")], "two nodes")
    for name in ("a", "b"):
        cluster.submit("ml", name, whole_gpu_pod(f"ml/{name}"), labels={"app": name})
    collector = EmbeddedClusterCollector(cluster)
    pending = collected(collector)
    assert sorted(pending) == ["ml/a", "ml/b"]
    assert all(info.pending and info.loop_places for info in pending.values())
    assert pending["ml/a"].labels == {"app": "a"}

    embedded_loop(cluster, "bestfit", LoopSettings()).tick()  # binds both
    running = collected(collector)
    bound = {f"{pod.namespace}/{pod.name}": pod.placement for pod in cluster.bound.values()}
    assert {ref: info.placement for ref, info in running.items()} == bound
    again = collected(collector)
    assert again["ml/a"] is running["ml/a"] and again["ml/b"] is running["ml/b"]

    cluster.evict("ml", "a")
    evicted = collected(collector)
    assert evicted["ml/a"].pending and evicted["ml/a"] is not running["ml/a"]
    assert evicted["ml/b"] is running["ml/b"]


class SyncReadSide:
    """The part of ClusterSync a LiveClusterCollector reads (pods as the informer keeps
    them), without an API server: these tests are about what the collector keeps."""

    failures = 0

    def __init__(self) -> None:
        self.state: ClusterState = small_state()
        self.bound: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.placements: dict[str, Placement] = {}

    def collect(self) -> Snapshot[ClusterState]:
        return Snapshot(self.state, 0.0)

    @contextmanager
    def locked_placing(self, pods: Any) -> Iterator[tuple[ClusterState, list[str]]]:
        yield self.state.copy(), list(self.state.node_names)  # no pod is nominated here

    def bound_pods(self) -> list[dict[str, Any]]:
        return self.bound

    def pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        return [p for p in self.pending if p["spec"]["schedulerName"] == scheduler_name]

    def placement_of(self, key: str) -> Placement | None:
        return self.placements.get(key)


def live_pod(name: str, version: str, *, node: str = "", app: str = "x") -> dict[str, Any]:
    pod = v1_pod(name, scheduler_name="kubesage")
    pod["metadata"].update(resourceVersion=version, labels={"app": app})
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def test_the_live_collector_renews_a_pod_on_a_new_resource_version_or_placement() -> None:
    sync = SyncReadSide()
    node = sync.state.node_names[0]
    running = live_pod("run", "10", node=node)
    waiting = live_pod("wait", "20")
    sync.bound, sync.pending = [running], [waiting]
    sync.placements[pod_key(running)] = Placement(node=node, node_index=0)
    collector = LiveClusterCollector(sync, ["kubesage"])  # type: ignore[arg-type]
    first = collected(collector)
    (run_ref,) = [ref for ref, info in first.items() if not info.pending]
    (wait_ref,) = [ref for ref, info in first.items() if info.pending]
    assert first[wait_ref].claimable  # it names kubesage's scheduler
    assert collected(collector)[run_ref] is first[run_ref]

    sync.pending = [live_pod("wait", "21", app="y")]  # the pod changed: a new version
    renewed = collected(collector)
    assert renewed[wait_ref] is not first[wait_ref]
    assert renewed[wait_ref].labels == {"app": "y"} and renewed[wait_ref].claimable
    assert renewed[run_ref] is first[run_ref]

    other = sync.state.node_names[1]
    sync.placements[pod_key(running)] = Placement(
        node=other, node_index=1
    )  # accounted elsewhere, same version
    moved = collected(collector)
    assert moved[run_ref].placement == Placement(node=other, node_index=1)

    sync.pending = []
    assert wait_ref not in collected(collector)


def test_a_pod_without_a_resource_version_is_never_taken_as_unchanged() -> None:
    sync = SyncReadSide()
    pod = live_pod("bare", "")
    sync.pending = [pod]
    collector = LiveClusterCollector(sync, ["kubesage"])  # type: ignore[arg-type]
    (first,) = collected(collector).values()
    (second,) = collected(collector).values()
    assert first is not second and first == second


def test_a_pod_being_deleted_is_seen_terminating() -> None:
    sync = SyncReadSide()
    node = sync.state.node_names[0]
    leaving = live_pod("leaving", "10", node=node)
    leaving["metadata"]["deletionTimestamp"] = "2026-12-05T10:00:00Z"
    staying = live_pod("staying", "11", node=node)
    sync.bound = [leaving, staying]
    for pod in sync.bound:
        sync.placements[pod_key(pod)] = Placement(node=node, node_index=0)
    collector = LiveClusterCollector(sync, ["kubesage"])  # type: ignore[arg-type]
    seen = {ref.split("/")[-1]: info.terminating for ref, info in collected(collector).items()}
    assert seen == {"leaving": True, "staying": False}
