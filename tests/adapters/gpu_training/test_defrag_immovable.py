"""``gpu-defrag`` never evicts a pod nothing would re-create, nor one whose eviction stops
a whole job: a pod without an owner (on a live cluster), a gang member, a distributed
job's member."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from kubesage.adapters.gpu_training.compaction import compact
from kubesage.adapters.gpu_training.defrag import Defragmenter, move_cost
from kubesage.adapters.gpu_training.defrag_reconciler import DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.core.loop.actions import Bind, Evict, ObjectRef, Plan
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import PodInfo
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from tests.adapters.gpu_training.loop_views import info, request, run, view
from tests.builders import node

REPLICA_SET = ObjectRef("apps/v1", "ReplicaSet", "default", "serving")
JOB = ObjectRef("kubeflow.org/v1", "PyTorchJob", "default", "llama")
TRAIN = request("train", gpus=4, qos="Burstable")


def cluster() -> ClusterState:
    return ClusterState([node(f"n{i}", gpus=4) for i in range(2)])


def defrag(**settings: object) -> DefragReconciler:
    return DefragReconciler(
        make_policy("bestfit", PolicyContext()),
        DefragSettings(**settings),  # type: ignore[arg-type]
    )


def evicted(result: Reconciled) -> list[str]:
    return [
        str(step.pod)
        for plan in result.actions
        if isinstance(plan, Plan)
        for step in plan.steps
        if isinstance(step, Evict)
    ]


def test_a_pod_without_an_owner_is_never_evicted_on_a_live_cluster() -> None:
    # A notebook started with `kubectl run`: Burstable, priority 0, and nothing re-creates it.
    state = cluster()
    pods = [
        run(state, request("notebook", gpus=1, qos="Burstable"), "n0", [0]),
        run(state, request("filler", gpus=2, qos="Guaranteed"), "n1", [0, 1], owner=JOB),
        info(TRAIN, loop_places=False),
    ]
    result = defrag().reconcile(view(state, pods))
    assert result.actions == []
    (note,) = result.notes
    assert "default/train" in note and "pods nothing re-creates" in note


def test_an_owned_pod_moves_rather_than_a_cheaper_bare_one() -> None:
    state = cluster()
    pods = [
        run(state, request("notebook", gpus=1, qos="BestEffort"), "n0", [0]),
        run(state, request("server", gpus=1, qos="Burstable"), "n1", [0], owner=REPLICA_SET),
        info(TRAIN, loop_places=False),
    ]
    (plan,) = defrag().reconcile(view(state, pods)).actions
    assert isinstance(plan, Plan)
    assert evicted(Reconciled(actions=[plan])) == ["default/server"]
    rebind = plan.steps[1]
    assert isinstance(rebind, Bind) and str(rebind.pod) == "default/server"
    assert rebind.owner == REPLICA_SET  # its replacement is found by owner
    bind = plan.steps[-1]
    assert isinstance(bind, Bind) and bind.placement.node == "n1"


@pytest.mark.parametrize("kind", ["DaemonSet", "Node"])
def test_a_pod_re_created_on_its_own_node_only_never_moves(kind: str) -> None:
    owner = ObjectRef("apps/v1" if kind == "DaemonSet" else "v1", kind, "default", "agent")
    state = cluster()
    pods = [
        run(state, request(f"agent-{n}", gpus=1, qos="BestEffort"), f"n{n}", [0], owner=owner)
        for n in range(2)
    ]
    pods.append(info(TRAIN, loop_places=False))
    assert evicted(defrag().reconcile(view(state, pods))) == []


@pytest.mark.parametrize(
    "owner",
    [
        ObjectRef("batch/v1", "Job", "default", "finetune"),  # counts against backoffLimit
        ObjectRef("argoproj.io/v1alpha1", "Workflow", "default", "pipeline"),  # step fails
        ObjectRef("tekton.dev/v1", "TaskRun", "default", "build"),
    ],
)
def test_a_pod_whose_controller_does_not_replace_it_never_moves(owner: ObjectRef) -> None:
    state = cluster()
    pods = [
        run(state, request("step", gpus=1, qos="BestEffort"), "n0", [0], owner=owner),
        run(state, request("filler", gpus=2, qos="Guaranteed"), "n1", [0, 1], owner=JOB),
        info(TRAIN, loop_places=False),
    ]
    assert evicted(defrag().reconcile(view(state, pods))) == []
    # Where the operator says that controller's pods come back, they move.
    settings = {"movable_owners": ("ReplicaSet", owner.kind)}
    assert evicted(defrag(**settings).reconcile(view(state, pods))) == ["default/step"]


def test_a_terminating_pod_is_not_moved() -> None:
    """Its room frees itself once its containers stop: evicting it again does nothing,
    and the plan would count that eviction against the budget."""
    state = cluster()
    server = run(state, request("server", gpus=1, qos="Burstable"), "n1", [0], owner=REPLICA_SET)
    pods = [
        dataclasses.replace(server, terminating=True),
        run(state, request("db", gpus=1, qos="Guaranteed"), "n0", [0], owner=REPLICA_SET),
        info(TRAIN, loop_places=False),
    ]
    assert evicted(defrag().reconcile(view(state, pods))) == []
    pods[0] = server
    assert evicted(defrag().reconcile(view(state, pods))) == ["default/server"]


def test_where_evicted_pods_come_back_a_pod_without_an_owner_may_move() -> None:
    # The embedded cluster and the simulator keep an evicted pod pending under its name.
    state = cluster()
    pods = [
        run(state, request("notebook", gpus=1, qos="Burstable"), "n0", [0]),
        run(state, request("filler", gpus=2, qos="Guaranteed"), "n1", [0, 1]),
        info(TRAIN),
    ]
    result = defrag(evicted_pods_come_back=True).reconcile(view(state, pods))
    assert evicted(result) == ["default/notebook"]


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({}, {"kubesage.io/gang": "llama"}),
        ({"pod-group.scheduling.sigs.k8s.io": "llama"}, {}),
        ({"training.kubeflow.org/replica-type": "worker"}, {}),
        ({"training.kubeflow.org/job-name": "llama"}, {}),
        ({}, {"scheduling.k8s.io/group-name": "llama"}),
    ],
)
def test_members_of_gangs_and_distributed_jobs_never_move(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> None:
    state = cluster()
    pods: list[PodInfo] = [
        run(
            state,
            request(f"worker-{n}", gpus=1, qos="BestEffort"),
            f"n{n}",
            [0],
            owner=JOB,
            labels=labels,
            annotations=annotations,
        )
        for n in range(2)
    ]
    pods.append(info(TRAIN, loop_places=False))
    result = defrag().reconcile(view(state, pods))  # owned: only membership pins them
    assert evicted(result) == []
    assert any("gang and job members" in note for note in result.notes)


def test_the_planner_never_moves_a_gang_member_nor_a_pinned_pod() -> None:
    state = ClusterState([node(name, gpus=2) for name in ("a", "b")])
    big = request("big", gpus=2)
    running = {}
    for name, where, gang in (("pa", "a", "default/g"), ("pb", "b", None)):
        pod = request(name, milli=300, qos="BestEffort").model_copy(update={"gang_id": gang})
        placed = run(state, pod, where, [0])
        assert placed.placement is not None
        running[pod.name] = (pod, placed.placement)
    assert move_cost(running["default/pa"][0], 0) == float("inf")
    policy = make_policy("bestfit", PolicyContext(workload=[big]))
    moves = Defragmenter(policy).plan(state, running, big)
    assert moves is not None and [name for name, _ in moves] == ["default/pb"]
    pinned = Defragmenter(policy, pinned=frozenset({"default/pb"}))
    assert pinned.plan(state, running, big) is None


def test_compaction_leaves_pods_without_an_owner_where_they_are() -> None:
    state = ClusterState([node(name, gpus=2) for name in "abcd"])
    bare = [
        run(state, request(f"s{name}{g}", milli=200, qos="BestEffort"), name, [g])
        for name in "abcd"
        for g in (0, 1)
    ]
    policy = make_policy("bestfit", PolicyContext())
    live = DefragReconciler(policy, DefragSettings(compact_free_share=0.5))
    assert live.reconcile(view(state, bare, now_s=100.0)).actions == []
    running = {p.request.name: (p.request, p.placement) for p in bare if p.placement}
    pinned = frozenset(running)
    assert compact(policy, state, running, budget=4, pinned=pinned) == []
    assert compact(policy, state, running, budget=4)  # unpinned, the same pods move


@pytest.mark.parametrize("allowed", ["n0", "n1"])
def test_room_is_made_only_on_a_node_the_waiting_pods_constraints_allow(allowed: str) -> None:
    """Its bind anywhere else would be refused after the migration's evictions ran."""
    state = cluster()
    pods = [
        run(state, request("other", gpus=1, qos="Burstable"), "n0", [0], owner=REPLICA_SET),
        run(state, request("server", gpus=1, qos="Burstable"), "n1", [0], owner=REPLICA_SET),
        dataclasses.replace(info(TRAIN, loop_places=False), eligible_nodes=frozenset({allowed})),
    ]
    (plan,) = defrag().reconcile(view(state, pods)).actions
    assert isinstance(plan, Plan)
    bind = plan.steps[-1]
    assert isinstance(bind, Bind) and str(bind.pod) == "default/train"
    assert bind.placement.node == allowed
    assert evicted(Reconciled(actions=[plan])) == [
        "default/other" if allowed == "n0" else "default/server"
    ]


def test_no_room_is_made_for_a_pod_no_node_allows() -> None:
    state = cluster()
    pods = [
        run(state, request("server", gpus=1, qos="Burstable"), "n1", [0], owner=REPLICA_SET),
        dataclasses.replace(info(TRAIN, loop_places=False), eligible_nodes=frozenset()),
    ]
    assert defrag().reconcile(view(state, pods)).actions == []
