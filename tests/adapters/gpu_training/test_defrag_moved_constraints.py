"""A pod ``gpu-defrag`` moves goes only to a node its own constraints allow: its
replacement would be scheduled by those constraints, and the loop's re-placement bind
elsewhere would be refused after its eviction ran."""

from __future__ import annotations

import dataclasses

import pytest

from kubesage.adapters.gpu_training.compaction import compact
from kubesage.adapters.gpu_training.defrag_reconciler import STOPPED, DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.core.loop.actions import Bind, Evict, ObjectRef, Plan
from kubesage.core.loop.view import PodInfo
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from tests.adapters.gpu_training.loop_views import info, request, run, view
from tests.builders import node

REPLICA_SET = ObjectRef("apps/v1", "ReplicaSet", "default", "serving")
TRAIN = request("train", gpus=4, qos="Burstable")


def fragmented(server_may_use: frozenset[str] | None) -> tuple[ClusterState, list[PodInfo]]:
    """Three 4-GPU nodes with one GPU taken on each: a 4-GPU pod fits nowhere. Only
    ``server`` (on n0) may move; ``server_may_use`` is what its constraints allow."""
    state = ClusterState([node(f"n{i}", gpus=4) for i in range(3)])
    server = run(state, request("server", qos="Burstable"), "n0", [0], owner=REPLICA_SET)
    pods = [
        dataclasses.replace(server, eligible_nodes=server_may_use),
        run(state, request("db-1", qos="Guaranteed"), "n1", [0], owner=REPLICA_SET),
        run(state, request("db-2", qos="Guaranteed"), "n2", [0], owner=REPLICA_SET),
        info(TRAIN, loop_places=False),
    ]
    return state, pods


def reconcile(state: ClusterState, pods: list[PodInfo]) -> list[Plan]:
    reconciler = DefragReconciler(make_policy("bestfit", PolicyContext()), DefragSettings())
    plans = reconciler.reconcile(view(state, pods)).actions
    return [plan for plan in plans if isinstance(plan, Plan)]


@pytest.mark.parametrize("allowed", ["n1", "n2"])
def test_a_moved_pod_is_re_placed_on_a_node_its_constraints_allow(allowed: str) -> None:
    state, pods = fragmented(frozenset({"n0", allowed}))
    (plan,) = reconcile(state, pods)
    (evict,) = [step for step in plan.steps if isinstance(step, Evict)]
    assert str(evict.pod) == "default/server"
    rebind, bind = [step for step in plan.steps if isinstance(step, Bind)]
    assert str(rebind.pod) == "default/server" and rebind.placement.node == allowed
    assert str(bind.pod) == "default/train" and bind.placement.node == "n0"
    assert {r.placement.node for r in plan.reservations} == {allowed, "n0"}


def test_no_migration_moves_a_pod_its_constraints_keep_where_it_is() -> None:
    state, pods = fragmented(frozenset({"n0"}))  # a node selector only n0 matches
    assert reconcile(state, pods) == []
    state, pods = fragmented(None)  # no constraints: the same pod moves
    (plan,) = reconcile(state, pods)
    assert any(isinstance(step, Evict) for step in plan.steps)


def test_compaction_moves_a_shared_gpus_pods_only_where_they_may_go() -> None:
    state = ClusterState([node(name, gpus=1) for name in "abc"])
    pods = [
        run(state, request(f"s{name}", milli=300, qos="BestEffort"), name, [0]) for name in "abc"
    ]
    running = {p.request.name: (p.request, p.placement) for p in pods if p.placement}
    policy = make_policy("bestfit", PolicyContext())
    moves = compact(policy, state, running, budget=4)
    assert moves  # unconstrained, one GPU is emptied onto another
    everywhere_but_home = {
        name: [n for n in "abc" if n != name[-1]] for name in running
    }  # each may use any node but its own: still compacts
    assert compact(policy, state, running, budget=4, allowed=everywhere_but_home)
    only_home = {name: [name[-1]] for name in running}  # each pinned to its node by selector
    assert compact(policy, state, running, budget=4, allowed=only_home) == []
    for name, target in compact(policy, state, running, budget=4, allowed={"default/sa": ["b"]}):
        assert name != "default/sa" or target.node == "b"


def test_no_migration_is_planned_for_a_pod_kube_scheduler_nominated() -> None:
    """Its preemption freed room for it already; the loop's view holds that room."""
    state, pods = fragmented(None)
    waiting = pods[-1]
    nominated = [*pods[:-1], dataclasses.replace(waiting, nominated=True)]
    assert reconcile(state, nominated) == []
    assert reconcile(state, pods)  # not nominated: a migration makes its room


def with_cordoned_n3(state: ClusterState, *on_n0_n1_n2: tuple[str, str]) -> list[PodInfo]:
    """One one-GPU pod (name, QoS) on GPU 0 of each of n0, n1, n2, and the 4-GPU pod
    waiting, whose constraints allow those three nodes only (n3 is cordoned)."""
    pods = [
        run(state, request(name, qos=qos), f"n{i}", [0], owner=REPLICA_SET)
        for i, (name, qos) in enumerate(on_n0_n1_n2)
    ]
    waiting = info(TRAIN, loop_places=False)
    return [*pods, dataclasses.replace(waiting, eligible_nodes=frozenset({"n0", "n1", "n2"}))]


def test_a_node_the_waiting_pod_may_not_use_is_no_room_for_it() -> None:
    """A cordoned node with every GPU free does not make the 4-GPU pod "fit": only the
    nodes its constraints allow count, so the migration is still planned there."""
    state = ClusterState([node(f"n{i}", gpus=4) for i in range(4)])
    pods = with_cordoned_n3(
        state, ("server", "Burstable"), ("db-1", "Guaranteed"), ("db-2", "Guaranteed")
    )
    (plan,) = reconcile(state, pods)  # n3 (cordoned, empty) is not where it may go
    bind = [step for step in plan.steps if isinstance(step, Bind)][-1]
    assert str(bind.pod) == "default/train" and bind.placement.node == "n0"


def test_a_stopped_plans_pod_is_bound_only_where_its_constraints_allow() -> None:
    """The waiting pod's remembered target was taken; the free cordoned node is not
    where it may go, so it is planned for afresh, not bound there."""
    state = ClusterState([node(f"n{i}", gpus=4) for i in range(4)])
    target = state.placement(0, [0, 1, 2, 3], TRAIN).model_dump(mode="json")
    pods = with_cordoned_n3(
        state, ("taker", "Guaranteed"), ("db-1", "Guaranteed"), ("server", "Burstable")
    )
    memory = {STOPPED: {"default/train": {"plan": "gpu-defrag/x", "waiting": 1, "target": target}}}
    reconciler = DefragReconciler(make_policy("bestfit", PolicyContext()), DefragSettings())
    result = reconciler.reconcile(view(state, pods, memory=memory))
    binds = [
        s for p in result.actions if isinstance(p, Plan) for s in p.steps if isinstance(s, Bind)
    ]
    assert binds and all(b.placement.node != "n3" for b in binds)
