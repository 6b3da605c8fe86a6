"""``gpu-gang`` plans only on nodes every member may use (cordons, taints, node
selectors and required node affinity, carried as ``PodInfo.eligible_nodes``), so it
never plans a ring the bind would refuse for the node."""

from __future__ import annotations

import dataclasses

import pytest

from kubesage.adapters.gpu_training.gang_reconciler import GangReconciler, free_gpus
from kubesage.core.loop.actions import Bind, Plan
from kubesage.core.loop.view import PodInfo
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from tests.adapters.gpu_training.loop_views import info, request, view


@pytest.fixture(scope="module")
def drtg() -> DRTG:
    return DRTG.from_yaml(example_topology("dgx-h100-pod"))


def members(count: int, gpus: int, eligible: frozenset[str] | None) -> list[PodInfo]:
    annotations = {"kubesage.io/gang": "llm", "kubesage.io/gang-min-available": str(count)}
    return [
        dataclasses.replace(
            info(
                request(f"llm-{i}", gpus=gpus, cpu=16_000, memory=65_536), annotations=annotations
            ),
            eligible_nodes=eligible,
        )
        for i in range(count)
    ]


def test_free_gpus_leaves_out_the_nodes_the_members_may_not_use(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    allowed = frozenset(drtg.node_names[2:4])
    gang = members(2, 8, allowed)
    free = free_gpus(drtg, state, [m.request for m in gang], nodes=allowed)
    assert int(free.sum()) == 16
    for node, name in enumerate(drtg.node_names):
        assert bool(free[drtg.node_gpus(node)].any()) is (name in allowed)


def test_the_ring_is_planned_on_eligible_nodes_only(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    # The first nodes of the first rack (where an idle pod's ring goes) are ruled out.
    allowed = frozenset(drtg.node_names[5:])
    result = GangReconciler().reconcile(view(state, members(2, 8, allowed), topology=drtg))
    (plan,) = result.actions
    assert isinstance(plan, Plan)
    nodes = {step.placement.node for step in plan.steps if isinstance(step, Bind)}
    assert len(nodes) == 2 and nodes <= allowed


def test_members_with_different_constraints_use_the_nodes_all_of_them_may(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    first, second = members(2, 8, None)
    first = dataclasses.replace(first, eligible_nodes=frozenset(drtg.node_names[:6]))
    second = dataclasses.replace(second, eligible_nodes=frozenset(drtg.node_names[4:]))
    result = GangReconciler().reconcile(view(state, [first, second], topology=drtg))
    (plan,) = result.actions
    assert isinstance(plan, Plan)
    nodes = {step.placement.node for step in plan.steps if isinstance(step, Bind)}
    assert nodes == set(drtg.node_names[4:6])


def test_a_gang_no_node_may_take_gets_a_note_and_no_plan(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    one_node = frozenset(drtg.node_names[:1])  # room for one 8-GPU member, not two
    result = GangReconciler().reconcile(view(state, members(2, 8, one_node), topology=drtg))
    assert result.actions == []
    (note,) = result.notes
    assert "do not fit in the 8 free GPU(s)" in note
    assert f"{drtg.num_nodes - 1} node(s) ruled out by the members' node constraints" in note


def test_a_member_that_may_use_no_node_is_left_out_and_the_rest_are_placed(drtg: DRTG) -> None:
    """As the secondary scheduler does for a member with constraints kubesage cannot
    honour: the gang's other members are placed when they alone reach min-available."""
    state = ClusterState(drtg.node_specs())
    gang = members(3, 8, None)
    annotations = {**gang[0].annotations, "kubesage.io/gang-min-available": "2"}
    gang = [dataclasses.replace(m, annotations=annotations) for m in gang]
    gang[2] = dataclasses.replace(gang[2], eligible_nodes=frozenset())
    result = GangReconciler().reconcile(view(state, gang, topology=drtg))
    (plan,) = result.actions
    assert isinstance(plan, Plan)
    bound = {step.pod.name for step in plan.steps if isinstance(step, Bind)}
    assert bound == {"llm-0", "llm-1"}
    assert any("llm-2 may use no node" in note for note in result.notes), result.notes
