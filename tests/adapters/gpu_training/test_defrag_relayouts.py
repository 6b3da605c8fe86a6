"""A MIG migration is planned only where the loop can apply its re-layout: elsewhere its
evictions would come before a ``label-node`` step bound to fail (no ``--mig-config-map``),
pods moved for nothing on every retry."""

from __future__ import annotations

import dataclasses

import pytest

from kubesage.adapters.gpu_training.defrag_reconciler import DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.adapters.gpu_training.mig import mig_request
from kubesage.core.loop.actions import (
    Action,
    ActionKind,
    Bind,
    Evict,
    ObjectRef,
    Plan,
)
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.reconciler import Outcome, Reconciled, Result
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import WorldModel
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from tests.adapters.gpu_training.loop_views import info, view
from tests.adapters.gpu_training.test_mig_cluster import H100, mig_node
from tests.core.loop.doubles import ClusterCollector, RecordingActuator

OWNER = ObjectRef("apps/v1", "ReplicaSet", "default", "inference")
BIG = mig_request("default/big7", H100, "7g.80gb")


def one_gpu_mig_nodes(count: int) -> ClusterState:
    return ClusterState([mig_node(f"m{i}", gpus=1) for i in range(count)])


def place(state: ClusterState, name: str, node: int, start: int) -> PodInfo:
    pod = mig_request(f"default/{name}", H100, "1g.10gb").model_copy(update={"qos": "BestEffort"})
    placement = state.placement(node, [0], pod, mig_start=start)
    state.allocate(pod, placement)
    return info(pod, placement, owner=OWNER)


def fragmented() -> tuple[ClusterState, list[PodInfo]]:
    """Two one-GPU MIG nodes, a 1g instance on each: the 7g request fits on neither."""
    state = one_gpu_mig_nodes(2)
    pods = [place(state, "a", 0, 6), place(state, "b", 1, 0), info(BIG, loop_places=False)]
    return state, pods


def defrag(**settings: float | bool) -> DefragReconciler:
    policy = make_policy("migpacking", PolicyContext(workload=[BIG]))
    return DefragReconciler(policy, DefragSettings(**settings))  # type: ignore[arg-type]


def steps(result: Reconciled) -> list[Action]:
    return [step for plan in result.actions if isinstance(plan, Plan) for step in plan.steps]


def test_without_a_way_to_apply_a_relayout_no_mig_migration_is_planned() -> None:
    state, pods = fragmented()
    result = defrag(compact_free_share=0.0).reconcile(view(state, pods))
    assert result.actions == []
    (note,) = result.notes
    assert note.startswith("default/big7") and "--mig-config-map" in note
    assert note.endswith("migration not planned")


def test_where_relayouts_apply_the_migration_evicts_then_relabels() -> None:
    state, pods = fragmented()
    result = defrag(compact_free_share=0.0, relayouts=True).reconcile(view(state, pods))
    kinds = [type(step).__name__ for step in steps(result)]
    assert kinds[0] == "Evict" and "LabelNode" in kinds and kinds[-1] == "Bind"


def test_a_pod_staying_on_a_gpu_whose_layout_changes_is_re_created_in_place() -> None:
    """mig-parted clears a GPU whose instance counts change before re-creating them: b,
    on the GPU that a moves to, would lose its instance under it, so it is evicted and
    bound again at its own place within the same plan."""
    state, pods = fragmented()
    b = pods[1]
    result = defrag(compact_free_share=0.0, relayouts=True).reconcile(view(state, pods))
    planned = steps(result)
    evicted = [step.pod for step in planned if isinstance(step, Evict)]
    assert evicted == [pods[0].ref, b.ref]
    (again,) = [s for s in planned if isinstance(s, Bind) and s.pod == b.ref]
    assert again.placement == b.placement and "re-create default/b in place" in again.explanation
    # with room in the eviction budget for the move only, nothing is planned
    tight = defrag(compact_free_share=0.0, relayouts=True, eviction_budget=1)
    refused = tight.reconcile(view(state, pods))
    assert refused.actions == []
    assert any("re-creates 1 in place" in note for note in refused.notes), refused.notes


@pytest.mark.parametrize(("qos", "priority"), [("Guaranteed", 0), ("Burstable", 1000)])
def test_a_re_layout_never_re_creates_a_pod_that_never_moves(qos: str, priority: int) -> None:
    """b stays on the GPU a moves to, so the re-layout would evict it too: a Guaranteed
    pod, or one above the priority limit, keeps its instance and no plan is made."""
    state, pods = fragmented()
    b = pods[1]
    pods[1] = dataclasses.replace(
        b, request=b.request.model_copy(update={"qos": qos, "priority": priority})
    )
    result = defrag(compact_free_share=0.0, relayouts=True).reconcile(view(state, pods))
    assert not [step for step in steps(result) if isinstance(step, Evict)]
    assert any("re-create the instances of default/b" in note for note in result.notes)


def test_mig_compaction_waits_for_relayouts_and_re_creates_nothing() -> None:
    state = one_gpu_mig_nodes(4)
    pods = [place(state, f"p{n}", n, 0) for n in range(4)]
    compacting = {"compact_free_share": 0.5, "compact_interval_s": 60.0}
    assert defrag(**compacting).reconcile(view(state, pods, now_s=100.0)).actions == []
    # Every move would put an instance on a GPU another pod keeps using: under mig-parted
    # that pod's instance would be re-created, which a compaction is not worth.
    relaid = defrag(**compacting, relayouts=True).reconcile(view(state, pods, now_s=100.0))
    assert relaid.actions == []
    assert any("compaction stopped" in note and "keep using" in note for note in relaid.notes)


class FailingLabeller:
    """The live labeller without ``--mig-config-map``: every MIG label step fails."""

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.LABEL_NODE})

    def execute(self, action: Action) -> Result:
        return Result(Outcome.FAILED, "no ConfigMap to publish the mig-parted config in")


class EvictAndBind(RecordingActuator):
    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.EVICT, ActionKind.BIND})


def test_in_the_loop_no_pod_is_evicted_for_a_relayout_that_cannot_be_applied() -> None:
    state, pods = fragmented()
    clock = SimulatedClock(1_000.0)
    recorder = EvictAndBind()
    control = ControlLoop(
        clock,
        {"cluster": ClusterCollector(clock, state, {str(p.ref): p for p in pods})},
        WorldModel(),
        [defrag(compact_free_share=0.0)],
        [recorder, FailingLabeller()],
        budgets=Budgets({ActionKind.EVICT: 4, ActionKind.LABEL_NODE: 4}),
        max_data_age_s=None,
    )
    for _ in range(2):
        control.tick()
        clock.advance(control.tick_s)
    assert not [action for action in recorder.executed if isinstance(action, Evict)]
