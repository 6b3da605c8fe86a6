"""The defragmenter's pruning keeps every migration that can work: the GPU the evicted
pods free is part of the request's room, so only ``request <= free`` bounds a candidate."""

from __future__ import annotations

from kubesage.adapters.gpu_training.defrag import Defragmenter
from kubesage.adapters.gpu_training.defrag_reconciler import DefragReconciler
from kubesage.adapters.gpu_training.defrag_settings import DefragSettings
from kubesage.adapters.gpu_training.mig import mig_request
from kubesage.core.loop.actions import Bind, Evict, ObjectRef, Plan
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from kubesage.core.types import Placement, PodRequest
from tests.adapters.gpu_training.loop_views import info, request, run, view
from tests.adapters.gpu_training.test_mig_cluster import H100, mig_node
from tests.builders import node

OWNER = ObjectRef("apps/v1", "ReplicaSet", "default", "notebooks")


def four_gpu_nodes() -> ClusterState:
    return ClusterState([node(f"n{i}", gpus=4) for i in range(2)])


def exactly_enough_free() -> tuple[ClusterState, dict[str, tuple[PodRequest, Placement]]]:
    """n0: a 1-GPU pod; n1: a Guaranteed 3-GPU pod. 4 GPUs free, 3 + 1 of them apart."""
    state = four_gpu_nodes()
    running = {}
    for pod, where, gpus in (
        (request("notebook", gpus=1, qos="Burstable"), "n0", [0]),
        (request("filler", gpus=3, qos="Guaranteed"), "n1", [0, 1, 2]),
    ):
        placed = run(state, pod, where, gpus)
        assert placed.placement is not None
        running[pod.name] = (pod, placed.placement)
    return state, running


def test_a_whole_gpu_request_that_needs_every_free_gpu_is_planned() -> None:
    state, running = exactly_enough_free()
    train = request("train", gpus=4, qos="Burstable")
    assert state.gpu_free_milli_total == train.total_gpu_milli
    assert not state.feasible(train).any()
    moves = Defragmenter(make_policy("bestfit", PolicyContext()), budget=4).plan(
        state, running, train
    )
    assert moves is not None
    ((name, target),) = moves
    assert name == "default/notebook" and target.node == "n1"
    assert target.gpu_indices == (3,)


def test_a_mig_request_that_needs_every_free_slice_is_planned() -> None:
    # m0: a best-effort 1g.20gb at slot 6; m1: Guaranteed 4g@0 and 2g@4 (slots 6-7 free).
    # 1,000 milli free in all: a 7g.80gb fits once the 1g moves to m1 — the evicted
    # 250 milli plus the request's 1,000 exceed what is free, yet it works.
    state = ClusterState([mig_node(f"m{i}", gpus=1) for i in range(2)])
    running = {}
    for name, profile, qos, index, start in (
        ("be", "1g.20gb", "BE", 0, 6),
        ("g4", "4g.40gb", "Guaranteed", 1, 0),
        ("g2", "2g.20gb", "Guaranteed", 1, 4),
    ):
        pod = mig_request(name, H100, profile).model_copy(update={"qos": qos})
        placement = state.placement(index, [0], pod, mig_start=start)
        state.allocate(pod, placement)
        running[name] = (pod, placement)
    big = mig_request("big", H100, "7g.80gb")
    assert state.gpu_free_milli_total == big.total_gpu_milli and not state.feasible(big).any()
    moves = Defragmenter(make_policy("migpacking", PolicyContext(workload=[big]))).plan(
        state, running, big
    )
    assert moves is not None
    ((name, target),) = moves
    assert (name, target.node, target.mig_start) == ("be", "m1", 6)


def test_gpu_defrag_plans_the_migration_when_free_gpu_just_covers_the_request() -> None:
    state = four_gpu_nodes()
    pods = [
        run(state, request("notebook", gpus=1, qos="Burstable"), "n0", [0], owner=OWNER),
        run(state, request("filler", gpus=3, qos="Guaranteed"), "n1", [0, 1, 2], owner=OWNER),
        info(request("train", gpus=4, qos="Burstable"), loop_places=False),
    ]
    defrag = DefragReconciler(make_policy("bestfit", PolicyContext()), DefragSettings())
    result = defrag.reconcile(view(state, pods))
    (plan,) = result.actions
    assert isinstance(plan, Plan)
    evict, rebind, bind = plan.steps
    assert isinstance(evict, Evict) and str(evict.pod) == "default/notebook"
    assert isinstance(rebind, Bind) and rebind.placement.node == "n1"
    assert rebind.owner == OWNER
    assert isinstance(bind, Bind) and str(bind.pod) == "default/train"
    assert bind.placement.node == "n0" and sorted(bind.placement.gpu_indices) == [0, 1, 2, 3]
