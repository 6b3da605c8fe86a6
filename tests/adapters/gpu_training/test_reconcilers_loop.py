"""``gpu-defrag`` in the control loop, acting on the embedded cluster on a simulated clock."""

from __future__ import annotations

from kubesage.adapters.gpu_training.cli import ADAPTER
from kubesage.adapters.gpu_training.defrag_reconciler import DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.k8s.embedded import EmbeddedCluster, PendingPod
from kubesage.core.k8s.embedded_actuators import embedded_actuators
from kubesage.core.loop.actions import ActionKind
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.reconciler import Reconciler
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext
from kubesage.core.loop.world import WorldModel
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import PodRequest
from tests.adapters.gpu_training.loop_views import request
from tests.builders import node

BIG = request("big", gpus=2, cpu=8_000, memory=32_768)


def fragmented_cluster() -> EmbeddedCluster:
    """Three 2-GPU nodes, one sharing pod on each; ``big`` (2 whole GPUs) waits."""
    cluster = EmbeddedCluster([node(n, gpus=2) for n in "abc"], [BIG], "fragmented")
    running: list[tuple[PodRequest, str, int]] = [
        (request("pa", milli=500, qos="BestEffort"), "a", 0),
        (request("pb", milli=300), "b", 1),
        (request("pg", milli=200, qos="Guaranteed"), "c", 0),
    ]
    with cluster.locked() as (state, _):
        placements = [state.placement(state.node_index[n], [g], pod) for pod, n, g in running]
    for (pod, _, _), placement in zip(running, placements, strict=True):
        namespace, name = pod.name.split("/")
        cluster.assume({"metadata": {"namespace": namespace, "name": name}}, pod, placement)
    cluster.pending["default/big"] = PendingPod("default", "big", "", BIG, evicted_from="")
    return cluster


def loop(cluster: EmbeddedCluster, evictions: int) -> ControlLoop:
    policy = make_policy("bestfit", PolicyContext(workload=[BIG]))
    settings = DefragSettings(
        eviction_budget=evictions, compact_free_share=0.0, evicted_pods_come_back=True
    )
    return ControlLoop(
        SimulatedClock(),
        {"embedded": EmbeddedClusterCollector(cluster)},
        WorldModel(),
        [DefragReconciler(policy, settings)],
        embedded_actuators(cluster, policy),
        budgets=Budgets({ActionKind.EVICT: evictions}),
        max_data_age_s=None,
    )


def test_the_waiting_pod_binds_within_three_ticks() -> None:
    cluster = fragmented_cluster()
    control = loop(cluster, evictions=4)
    for _ in range(3):
        control.tick()
        control.clock.advance(control.tick_s)  # type: ignore[attr-defined]
        if "default/big" in cluster.bound:
            break
    assert "default/big" in cluster.bound, control.debug()["actions"]
    assert cluster.bound["default/big"].node == "a"
    # The best-effort pod moved and is bound again; the Guaranteed one never moved.
    assert not cluster.pending
    assert cluster.bound["default/pa"].node != "a"
    assert cluster.bound["default/pg"].node == "c"


def test_with_no_eviction_budget_nothing_is_evicted_and_the_reason_is_audited() -> None:
    cluster = fragmented_cluster()
    report = loop(cluster, evictions=0).tick()
    assert "default/big" in cluster.pending and "default/pa" in cluster.bound
    assert [r.action for r in report.records] == ["note", "note"]  # the forecaster, and why
    assert any("budget is 0" in note for note in report.notes["gpu-defrag"])


def test_the_adapter_registers_its_reconcilers_with_the_loops_budget() -> None:
    budgets = Budgets({ActionKind.EVICT: 2, ActionKind.LABEL_NODE: 1})
    context = ReconcilerContext(settings=LoopSettings(budgets=budgets), workload=(BIG,))
    reconcilers = ADAPTER.reconcilers(context)
    assert [r.name for r in reconcilers] == ["gpu-defrag", "gpu-elastic", "gpu-gang"]
    assert all(isinstance(r, Reconciler) for r in reconcilers)
    defrag = reconcilers[0]
    assert isinstance(defrag, DefragReconciler)
    assert defrag.settings.eviction_budget == 2 and defrag.settings.relayout_budget == 1
    assert defrag.policy.name == "fgd"
    # Without typical pods FGD cannot be built: migrations fall back to best fit.
    fallback = ADAPTER.reconcilers(ReconcilerContext())[0]
    assert isinstance(fallback, DefragReconciler) and fallback.policy.name == "bestfit"
