"""``forecast-placement`` through the loop on the embedded cluster: the loop places the
pods no other scheduler places, with the forecast term when it is on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubesage.core.cli.loop import build_loop, embedded_loop
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.k8s.actuators import embedded_actuators
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_workload import EmbeddedWorkload
from kubesage.core.loop.actions import PodRef
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC
from kubesage.core.loop.placement import ForecastPlacement
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext
from kubesage.core.loop.view import PodInfo
from kubesage.core.perception import Snapshot
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import NodeSpec, PodRequest
from tests.adapters.gpu_training.loop_views import view
from tests.core.loop.doubles import small_state, whole_gpu_pod


def two_node_cluster() -> EmbeddedCluster:
    nodes = [
        NodeSpec(
            name=f"node-{i}", cpu_milli=64_000, memory_mib=256_000, gpu_count=2, gpu_model="A100"
        )
        for i in range(2)
    ]
    return EmbeddedCluster(nodes, [whole_gpu_pod("typical")], "two nodes")


def share(name: str, milli: int = 300) -> PodRequest:
    return PodRequest(name=name, cpu_milli=1000, memory_mib=1000, num_gpu=1, gpu_milli=milli)


@dataclass
class GpuUtilCollector:
    """DCGM's per-GPU utilisation as the metric map names it (what Prometheus yields)."""

    clock: SimulatedClock
    percent: dict[tuple[str, int], float]
    name: str = "dcgm"
    failures: int = 0

    def collect(self) -> Snapshot[GpuUtilCollector]:
        return Snapshot(self, self.clock.now())

    def metric_samples(self) -> Iterable[tuple[str, str, float]]:
        for (node, gpu), value in self.percent.items():
            yield node, GPU_UTIL_METRIC.format(gpu=gpu), value


def test_the_loop_binds_pods_submitted_to_the_embedded_cluster_in_one_tick() -> None:
    cluster = two_node_cluster()
    for i in range(3):
        cluster.submit("ml", f"job-{i}", whole_gpu_pod(f"ml/job-{i}"))
    control = embedded_loop(cluster, "bestfit", LoopSettings())
    report = control.tick()
    binds = [r for r in report.records if r.reconciler == "forecast-placement"]
    assert [r.outcome for r in binds] == ["done"] * 3
    assert all("forecast term off" in r.explanation for r in binds)
    assert not cluster.pending
    assert sorted(p.name for p in cluster.bound.values()) == ["job-0", "job-1", "job-2"]


def test_with_the_term_on_a_sharing_pod_goes_to_the_gpu_forecast_quiet() -> None:
    cluster = two_node_cluster()
    cluster.submit("ml", "infer", share("ml/infer"))
    clock = SimulatedClock()
    policy = make_policy("bestfit", PolicyContext())
    baseline = policy.decide(cluster.state, share("probe"))
    assert baseline.placement is not None
    busy = baseline.placement.node
    loads = {(f"node-{n}", g): 10.0 for n in range(2) for g in range(2)}
    loads |= {(busy, 0): 95.0, (busy, 1): 90.0}
    settings = LoopSettings(forecast_weight=0.8)
    control = build_loop(
        EmbeddedClusterCollector(cluster),
        embedded_actuators(cluster, policy),
        ReconcilerContext(settings=settings, policy="bestfit"),
        clock=clock,
        reconcilers=[ForecastPlacement(policy, settings.forecast_weight)],
        collectors=[GpuUtilCollector(clock, loads)],
    )
    report = control.tick()
    (record,) = [r for r in report.records if r.action == "bind"]
    assert record.outcome == "done"
    assert "forecast term" in record.explanation and "last-value" in record.explanation
    (bound,) = cluster.bound.values()
    assert bound.node != busy


def test_gang_members_and_pods_another_scheduler_places_are_left_alone() -> None:
    state = small_state()
    pods = [
        PodInfo(PodRef("ml", "lone"), whole_gpu_pod("ml/lone"), loop_places=True),
        PodInfo(
            PodRef("ml", "member"), whole_gpu_pod("ml/member"), gang="ml/llm", loop_places=True
        ),
        PodInfo(PodRef("ml", "kube"), whole_gpu_pod("ml/kube"), claimable=True),
    ]
    reconciler = ForecastPlacement.from_context(ReconcilerContext(policy="bestfit"))
    answer = reconciler.reconcile(view(state, pods))
    assert [str(a.target) for a in answer.actions] == ["ml/lone"]


def test_a_pod_that_fits_nowhere_gets_a_note_not_a_bind() -> None:
    state = small_state(nodes=1, gpus=1)
    pods = [PodInfo(PodRef("ml", "big"), whole_gpu_pod("ml/big", gpus=2), loop_places=True)]
    answer = ForecastPlacement.from_context(ReconcilerContext()).reconcile(view(state, pods))
    assert not answer.actions
    assert answer.notes and answer.notes[0].startswith("ml/big: no node fits")


def test_embedded_arrivals_come_and_bound_ones_leave() -> None:
    cluster = two_node_cluster()
    now = [0.0]
    workload = EmbeddedWorkload(cluster, 2.0, lifetime_s=1.0, seed=1, clock=lambda: now[0])
    now[0] = 5.0
    workload.step()
    assert workload.stats.submitted > 0
    assert len(cluster.pending) == min(workload.stats.submitted, workload.max_pending)
    embedded_loop(cluster, "bestfit", LoopSettings()).tick()
    placed = set(cluster.bound)
    assert placed
    now[0] = 1000.0  # every lifetime is over; arrivals meanwhile stop at max_pending
    workload.step()
    assert not placed & set(cluster.bound)
    assert workload.stats.deleted == len(placed)
    assert len(cluster.pending) <= workload.max_pending
