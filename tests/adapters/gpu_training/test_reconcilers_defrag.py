"""``gpu-defrag`` on hand-made fragmented clusters: the plan it asks the loop for, and why."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kubesage.adapters.gpu_training.defrag import only_fragmentation
from kubesage.adapters.gpu_training.defrag_reconciler import (
    COMPACTED_AT,
    STOPPED,
    DefragReconciler,
)
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.adapters.gpu_training.mig import mig_request
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL
from kubesage.core.k8s.translate import mig_shape
from kubesage.core.loop.actions import Bind, Evict, LabelNode, Plan
from kubesage.core.loop.reconciler import Reconciled, Reconciler
from kubesage.core.loop.view import PodInfo
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from kubesage.core.types import PodRequest
from tests.adapters.gpu_training.loop_views import info, request, run, view
from tests.adapters.gpu_training.test_mig_cluster import H100, mig_node
from tests.builders import node

BIG = request("big", gpus=2, cpu=8_000, memory=32_768)
EMBEDDED_MIG = DefragSettings(evicted_pods_come_back=True, relayouts=True)
"""As on the embedded cluster (evicted pods come back) with re-layouts applied."""


def reconciler(eviction_budget: int = 4) -> DefragReconciler:
    policy = make_policy("bestfit", PolicyContext(workload=[BIG]))
    settings = DefragSettings(
        eviction_budget=eviction_budget, compact_free_share=0.0, evicted_pods_come_back=True
    )
    return DefragReconciler(policy, settings)


def fragmented(qos_a: str, qos_b: str = "LS") -> tuple[ClusterState, list[PodInfo]]:
    """Three 2-GPU nodes, a sharing pod on one GPU of each: no node has 2 whole GPUs free."""
    state = ClusterState([node(name, gpus=2) for name in ("a", "b", "c")])
    pods = [
        run(state, request("pa", milli=500, qos=qos_a), "a", [0]),
        run(state, request("pb", milli=300, qos=qos_b), "b", [1]),
        run(state, request("pg", milli=200, qos="Guaranteed"), "c", [0]),
        info(BIG),
    ]
    return state, pods


def only_plan(result: Reconciled) -> Plan:
    assert len(result.actions) == 1
    plan = result.actions[0]
    assert isinstance(plan, Plan)
    return plan


def test_it_is_a_reconciler_named_gpu_defrag() -> None:
    assert isinstance(reconciler(), Reconciler)
    assert reconciler().name == "gpu-defrag"


def test_a_pod_pending_only_for_fragmentation_gets_the_cheapest_migration() -> None:
    state, pods = fragmented("BestEffort")
    assert only_fragmentation(state, BIG)
    plan = only_plan(reconciler().reconcile(view(state, pods)))
    evict, rebind, bind = plan.steps
    # The best-effort pod is the cheapest to move; the Guaranteed one never moves.
    assert isinstance(evict, Evict) and str(evict.pod) == "default/pa"
    assert isinstance(rebind, Bind) and str(rebind.pod) == "default/pa"
    assert rebind.placement.node != "a"
    assert isinstance(bind, Bind) and str(bind.pod) == "default/big"
    assert bind.placement.node == "a" and sorted(bind.placement.gpu_indices) == [0, 1]
    assert {str(r.request.name) for r in plan.reservations} == {"default/big", "default/pa"}
    assert all(step.plan == plan.id for step in plan.steps)
    assert "fragmentation" in plan.explanation
    # The plan is sound: after the moves the waiting pod's placement is free.
    after = state.copy()
    pa = pods[0]
    after.release(pa.request, pa.placement)
    after.allocate(pa.request, rebind.placement)
    after.allocate(BIG, bind.placement)


def test_guaranteed_pods_never_move() -> None:
    state, pods = fragmented("Guaranteed")
    plan = only_plan(reconciler().reconcile(view(state, pods)))
    evicted = [str(step.pod) for step in plan.steps if isinstance(step, Evict)]
    assert evicted == ["default/pb"]
    bind = plan.steps[-1]
    assert isinstance(bind, Bind) and bind.placement.node == "b"


def test_no_movable_pod_means_no_plan_and_a_note() -> None:
    state, pods = fragmented("Guaranteed", "Guaranteed")
    result = reconciler().reconcile(view(state, pods))
    assert result.actions == []
    assert any("default/big" in note and "no migration" in note for note in result.notes)


def test_a_zero_budget_plans_nothing_and_says_why() -> None:
    state, pods = fragmented("BestEffort")
    result = reconciler(eviction_budget=0).reconcile(view(state, pods))
    assert not result.actions
    assert len(result.notes) == 1 and "budget is 0" in result.notes[0]


@pytest.mark.parametrize(
    ("pending", "why"),
    [
        (request("huge", gpus=3), "no node has 3 GPUs: unresolvable"),
        (request("fat", gpus=2, cpu=200_000), "no node has that much CPU"),
        (request("small", milli=400), "a sharing pod fits as it is"),
    ],
)
def test_pods_pending_for_other_reasons_are_left_alone(pending: PodRequest, why: str) -> None:
    state, pods = fragmented("BestEffort")
    pods[-1] = info(pending)
    result = reconciler().reconcile(view(state, pods))
    assert (result.actions, result.notes) == ([], []), why


def test_asked_twice_it_asks_for_the_same_actions() -> None:
    state, pods = fragmented("BestEffort")
    first = only_plan(reconciler().reconcile(view(state, pods)))
    second = only_plan(reconciler().reconcile(view(state, pods, tick=2, now_s=5.0)))
    assert first.id == second.id
    assert [s.key for s in first.steps] == [s.key for s in second.steps]


def test_background_compaction_is_budgeted_separate_plans_with_a_cooldown() -> None:
    state = ClusterState([node(name, gpus=2) for name in ("a", "b", "c", "d")])
    pods = [
        run(state, request(f"s{n}{g}", milli=200, qos="BestEffort"), name, [g])
        for n, name in enumerate("abcd")
        for g in (0, 1)
    ]
    policy = make_policy("bestfit", PolicyContext(workload=[BIG]))
    defrag = DefragReconciler(
        policy,
        DefragSettings(
            eviction_budget=3,
            compact_free_share=0.5,
            compact_interval_s=60,
            evicted_pods_come_back=True,
        ),
    )
    result = defrag.reconcile(view(state, pods, now_s=100.0))
    plans = [a for a in result.actions if isinstance(a, Plan)]
    assert 1 <= len(plans) <= 3
    for plan in plans:
        kinds = [type(step).__name__ for step in plan.steps]
        assert kinds == ["Evict", "Bind"]
        bind = plan.steps[-1]
        assert isinstance(bind, Bind) and plan.reservations[0].placement == bind.placement
    assert result.memory[COMPACTED_AT] == 100.0
    later = defrag.reconcile(view(state, pods, now_s=130.0, memory=result.memory))
    assert later.actions == []


def test_a_mig_migration_relabels_the_nodes_whose_layout_changes() -> None:
    # Two one-GPU MIG nodes, a 1g instance on each: a 7g request fits on neither.
    state = ClusterState([mig_node(f"m{i}", gpus=1) for i in range(2)])
    pods = []
    for name, node_index, start, qos in (("be", 0, 6, "BestEffort"), ("ls", 1, 0, "LS")):
        pod = mig_request(f"default/{name}", H100, "1g.10gb").model_copy(update={"qos": qos})
        placement = state.placement(node_index, [0], pod, mig_start=start)
        state.allocate(pod, placement)
        pods.append(info(pod, placement))
    big = mig_request("default/big7", H100, "7g.80gb")
    pods.append(info(big))
    assert only_fragmentation(state, big)
    policy = make_policy("migpacking", PolicyContext(workload=[big]))
    plan = only_plan(DefragReconciler(policy, EMBEDDED_MIG).reconcile(view(state, pods)))
    kinds = [type(step).__name__ for step in plan.steps]
    assert kinds[0] == "Evict" and kinds[-1] == "Bind" and "LabelNode" in kinds
    evict = plan.steps[0]
    assert isinstance(evict, Evict) and str(evict.pod) == "default/be"  # best-effort first
    labels = [step for step in plan.steps if isinstance(step, LabelNode)]
    assert {step.node for step in labels} == {"m0", "m1"}
    for step in labels:
        ((label, value),) = step.labels.items()
        assert label == MIG_CONFIG_LABEL and value and value.startswith("kubesage-")
        # The config the label names travels with it, to be published before the label.
        assert step.mig_parted is not None and list(step.mig_parted["mig-configs"]) == [value]
    # Two re-layouts where the loop allows one per tick: not asked for, and said why.
    tight = DefragReconciler(policy, replace(EMBEDDED_MIG, relayout_budget=1))
    result = tight.reconcile(view(state, pods))
    assert not result.actions and "re-layout budget allows 1" in result.notes[0]


def test_a_mig_node_without_a_catalogue_gets_a_note_not_an_exception() -> None:
    # GH200 144GB has no MIG catalogue here: its re-layout cannot be written, so the
    # migration that needs one is not planned (no evictions for a layout nobody applies).
    model = "GH200-144GB"
    nodes = [mig_node(f"g{i}", gpus=1).model_copy(update={"gpu_model": model}) for i in range(2)]
    state = ClusterState(nodes)

    def ask(name: str, profile: str, qos: str = "LS") -> PodRequest:
        shape = mig_shape(profile)
        return PodRequest(
            name=name,
            cpu_milli=1_000,
            memory_mib=1_024,
            num_gpu=1,
            gpu_milli=shape.gpu_milli,
            gpu_models=(model,),
            mig=shape,
            qos=qos,
        )

    pods = []
    for name, node_index, start, qos in (("be", 0, 6, "BestEffort"), ("ls", 1, 0, "LS")):
        pod = ask(f"default/{name}", "1g.18gb", qos)
        placement = state.placement(node_index, [0], pod, mig_start=start)
        state.allocate(pod, placement)
        pods.append(info(pod, placement))
    big = ask("default/big7", "7g.144gb")
    pods.append(info(big))
    assert only_fragmentation(state, big)
    policy = make_policy("migpacking", PolicyContext(workload=[big]))
    result = DefragReconciler(policy, EMBEDDED_MIG).reconcile(view(state, pods))
    assert not result.actions
    migration, compaction = result.notes  # the waiting pod's, then background compaction's
    assert migration.startswith("make room for default/big7")
    assert compaction.startswith("background compaction")
    for note in result.notes:
        assert "no MIG catalogue for GPU model 'GH200-144GB'" in note
        assert note.endswith("migration not planned")


def test_a_plan_that_stopped_half_way_is_finished() -> None:
    state, pods = fragmented("BestEffort")
    first = reconciler().reconcile(view(state, pods))
    plan = only_plan(first)
    _, rebind, bind = plan.steps
    assert isinstance(rebind, Bind) and isinstance(bind, Bind)
    # The loop evicted pa, then the plan stopped: pa is pending, big still waits.
    pa = pods[0]
    assert pa.placement is not None
    state.release(pa.request, pa.placement)
    pods[0] = info(pa.request)
    second = reconciler().reconcile(view(state, pods, tick=2, memory=first.memory))
    finishing = [a for a in second.actions if isinstance(a, Plan)]
    assert all("/finish/" in plan.id for plan in finishing)
    steps = [step for plan in finishing for step in plan.steps]
    assert [(str(s.pod), s.placement) for s in steps if isinstance(s, Bind)] == [
        ("default/pa", rebind.placement),  # at its planned place, not back in big's way
        ("default/big", bind.placement),
    ]
    assert not [s for s in steps if isinstance(s, Evict)]


def test_pods_of_finished_plans_are_forgotten() -> None:
    state, pods = fragmented("BestEffort")
    first = reconciler().reconcile(view(state, pods))
    assert set(first.memory[STOPPED]) == {"default/pa", "default/big"}
    assert json.loads(json.dumps(first.memory)) == first.memory  # JSON values only
    # The plan was refused before it started: everything is where it was, and planned again.
    again = reconciler().reconcile(view(state, pods, tick=2, memory=first.memory))
    assert only_plan(again).id == only_plan(first).id


def test_a_pod_whose_eviction_was_just_refused_is_not_asked_again() -> None:
    """A PodDisruptionBudget refused pa's eviction a moment ago: the same plan would be
    refused again every tick, so another plan, without pa, is made."""
    state = ClusterState([node(name, gpus=2) for name in "abc"])
    pods = [
        run(state, request("pa", milli=500, qos="BestEffort"), "a", [0]),
        run(state, request("pb", milli=300), "b", [1]),
        run(state, request("pg", milli=200, qos="Guaranteed"), "c", [0]),
        info(BIG),
    ]

    def evicted(result: Reconciled) -> list[str]:
        plans = [plan for plan in result.actions if isinstance(plan, Plan)]
        return [str(s.pod) for plan in plans for s in plan.steps if isinstance(s, Evict)]

    assert evicted(reconciler().reconcile(view(state, pods))) == ["default/pa"]
    after_refusal = replace(view(state, pods), refused={"evict:default/pa": 0.0})
    assert evicted(reconciler().reconcile(after_refusal)) == ["default/pb"]
