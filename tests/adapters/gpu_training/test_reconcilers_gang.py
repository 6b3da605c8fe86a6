"""``gpu-gang`` on the DGX H100 example topology: ring-optimal placement, all members or none."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kubesage.adapters.gpu_training.allreduce import exhaustive_best, place_gang
from kubesage.adapters.gpu_training.gang_reconciler import (
    BIND_CARRIES_ANNOTATIONS,
    GANG_RANK_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    GangReconciler,
    free_gpus,
)
from kubesage.core.loop.actions import Bind, Patch, Plan
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import PodInfo
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import Indicator
from kubesage.core.types import PodRequest
from tests.adapters.gpu_training.loop_views import info, request, run, view


@pytest.fixture(scope="module")
def drtg() -> DRTG:
    return DRTG.from_yaml(example_topology("dgx-h100-pod"))


def members(count: int, gpus: int, *, minimum: int | None = None) -> list[PodInfo]:
    annotations = {
        "kubesage.io/gang": "llm",
        "kubesage.io/gang-min-available": str(minimum or count),
    }
    return [
        info(request(f"llm-{i}", gpus=gpus, cpu=16_000, memory=65_536), annotations=annotations)
        for i in range(count)
    ]


def occupy(state: ClusterState, node: str, gpus: list[int]) -> PodInfo:
    return run(state, request(f"busy-{node}", gpus=len(gpus), cpu=0, memory=0), node, gpus)


def the_plan(result: Reconciled) -> Plan:
    assert len(result.actions) == 1, result.notes
    plan = result.actions[0]
    assert isinstance(plan, Plan)
    return plan


def ring(drtg: DRTG, plan: Plan) -> list[int]:
    """Global GPU ids in rank order, from the binds (in rank order, GPUs in ring order)."""
    ranks = []
    for step in plan.steps:
        if isinstance(step, Bind):
            node = drtg.node_index[step.placement.node]
            ranks += [int(drtg.node_gpus(node)[g]) for g in step.placement.gpu_indices]
    return ranks


def test_a_16_gpu_gang_gets_two_whole_nodes_of_one_rack_with_rank_annotations(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    # The first two nodes of rack-a1 each lose a GPU: the gang must not straddle them.
    busy = [occupy(state, drtg.node_names[0], [3]), occupy(state, drtg.node_names[1], [5])]
    gang = members(2, 8)
    plan = the_plan(GangReconciler().reconcile(view(state, [*busy, *gang], topology=drtg)))
    patches = [s for s in plan.steps if isinstance(s, Patch)]
    binds = [s for s in plan.steps if isinstance(s, Bind)]
    assert [str(b.pod) for b in binds] == ["default/llm-0", "default/llm-1"]
    assert len(plan.reservations) == 2
    nodes = [drtg.node_index[b.placement.node] for b in binds]
    assert len(set(nodes)) == 2 and 0 not in nodes and 1 not in nodes
    assert len({int(drtg.node_rack[n]) for n in nodes}) == 1
    # Rank order is annotated (by the bind when it can carry annotations, else by a
    # patch before the binds), and is in the explanation.
    if BIND_CARRIES_ANNOTATIONS:
        annotations = [dict(getattr(b, "annotations", {})) for b in binds]
        assert not patches
    else:
        annotations = [dict(p.patch["metadata"]["annotations"]) for p in patches]
        assert plan.steps.index(patches[-1]) < plan.steps.index(binds[0])
    assert annotations == [
        {GANG_RANK_ANNOTATION: "0", GANG_SIZE_ANNOTATION: "2"},
        {GANG_RANK_ANNOTATION: "1", GANG_SIZE_ANNOTATION: "2"},
    ]
    assert "rank 0: default/llm-0" in plan.explanation
    # Ring-optimal: as fast as the best ring on an idle pod of the same topology.
    idle = place_gang(drtg, np.ones(drtg.num_gpus, dtype=bool), 16)
    assert idle is not None
    assert drtg.ring_bus_bandwidth(ring(drtg, plan)) == pytest.approx(idle.bus_bandwidth_gbps)


def test_indexed_job_members_take_their_completion_index_as_rank(drtg: DRTG) -> None:
    # An Indexed Job's pods are <job>-<index>-<suffix>: by name "train-10-…" sorts
    # before "train-2-…"; their rank is JOB_COMPLETION_INDEX, carried by a label.
    annotations = {"kubesage.io/gang": "train", "kubesage.io/gang-min-available": "12"}
    gang = [
        info(
            request(f"train-{i}-{suffix}", gpus=1, cpu=1_000, memory=1_024),
            annotations=annotations,
            labels={"batch.kubernetes.io/job-completion-index": str(i)},
        )
        for i, suffix in zip(range(12), "qwertyuiopas", strict=True)
    ]
    state = ClusterState(drtg.node_specs())
    plan = the_plan(GangReconciler().reconcile(view(state, gang, topology=drtg)))
    by_pod = {
        str(step.pod): dict(getattr(step, "annotations", {})).get(GANG_RANK_ANNOTATION)
        for step in plan.steps
        if isinstance(step, Bind)
    }
    assert by_pod == {
        f"default/train-{i}-{suffix}": str(i)
        for i, suffix in zip(range(12), "qwertyuiopas", strict=True)
    }


def test_sixteen_one_gpu_members_fill_two_nodes_in_ring_order(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    plan = the_plan(GangReconciler().reconcile(view(state, members(16, 1), topology=drtg)))
    binds = [s for s in plan.steps if isinstance(s, Bind)]
    assert len(binds) == 16 and len({b.placement.node for b in binds}) == 2
    # Each node's members are consecutive ranks: one network hop per node boundary.
    changes = sum(a.placement.node != b.placement.node for a, b in itertools.pairwise(binds))
    assert changes == 1


def test_the_ring_is_the_exhaustive_best_where_that_can_be_searched(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    keep_free = {0: [0, 1], 1: [6], 4: [2, 3], 8: [7]}  # two racks, two zones
    busy = [
        occupy(state, name, [g for g in range(8) if g not in keep_free.get(n, [])])
        for n, name in enumerate(drtg.node_names)
    ]
    gang = members(4, 1)
    free = free_gpus(drtg, state, [m.request for m in gang])
    assert int(free.sum()) == 6
    plan = the_plan(GangReconciler().reconcile(view(state, [*busy, *gang], topology=drtg)))
    assert drtg.ring_bus_bandwidth(ring(drtg, plan)) == pytest.approx(
        exhaustive_best(drtg, free, 4)
    )


def test_a_gang_that_does_not_fit_whole_binds_nobody(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    result = GangReconciler().reconcile(view(state, members(17, 8), topology=drtg))
    assert result.actions == [] and "none bound" in result.notes[0]


def test_a_gang_waits_for_its_members_and_for_a_topology(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    waiting = GangReconciler().reconcile(view(state, members(2, 8, minimum=3), topology=drtg))
    assert waiting.actions == [] and "2 of 3 members present" in waiting.notes[0]
    blind = GangReconciler().reconcile(view(state, members(2, 8)))
    assert not blind.actions and "no topology" in blind.notes[0]


def test_pods_without_a_gang_are_not_its_business(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    lone = info(
        PodRequest(name="default/solo", cpu_milli=1, memory_mib=1, num_gpu=8, gpu_milli=1000)
    )
    result = GangReconciler().reconcile(view(state, [lone], topology=drtg))
    assert (list(result.actions), list(result.notes)) == ([], [])


def test_observed_link_congestion_moves_the_gang_off_the_busy_rack() -> None:
    drtg = DRTG.from_yaml(example_topology("dgx-h100-pod"))  # its own: observe changes it
    state = ClusterState(drtg.node_specs())
    quiet = the_plan(GangReconciler().reconcile(view(state, members(2, 8), topology=drtg)))
    busy_rack = {int(drtg.node_rack[drtg.node_index[b.placement.node]]) for b in binds(quiet)}
    (rack,) = busy_rack
    nics = [
        drtg.node_edge(n, f"nic-uplink{i}")
        for n in range(drtg.num_nodes)
        if drtg.node_rack[n] == rack
        for i in range(4)
    ]
    drtg.observe(nics, Indicator.CONGESTION, 0.9, timestamp_s=0.0)
    moved = the_plan(GangReconciler().reconcile(view(state, members(2, 8), topology=drtg)))
    assert {int(drtg.node_rack[drtg.node_index[b.placement.node]]) for b in binds(moved)} != {rack}


def binds(plan: Plan) -> list[Bind]:
    return [step for step in plan.steps if isinstance(step, Bind)]


def test_members_never_straddle_nodes(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    # Six free GPUs per node: a 16-GPU ring fills 6 + 6 + 4, which 4-GPU members cannot use.
    busy = [occupy(state, name, [6, 7]) for name in drtg.node_names]
    plan = the_plan(GangReconciler().reconcile(view(state, [*busy, *members(4, 4)], topology=drtg)))
    for bind in binds(plan):
        assert len(bind.placement.gpu_indices) == 4
        assert not {6, 7} & set(bind.placement.gpu_indices)


def test_three_gpu_members_fit_two_nodes_of_six_free_gpus(drtg: DRTG) -> None:
    # Two nodes with six free GPUs over all four PCIe switches, the rest busy: an even
    # 5 + 4 split had won on rails, which 3-GPU members cannot be cut from, so the gang
    # was refused though four such members fit.
    state = ClusterState(drtg.node_specs())
    free = {drtg.node_names[0]: [0, 1, 2, 4, 5, 7], drtg.node_names[1]: [0, 1, 2, 4, 5, 6]}
    busy = [
        occupy(state, name, [g for g in range(8) if g not in free.get(name, [])])
        for name in drtg.node_names
    ]
    plan = the_plan(GangReconciler().reconcile(view(state, [*busy, *members(3, 3)], topology=drtg)))
    for bind in binds(plan):
        assert set(bind.placement.gpu_indices) <= set(free[bind.placement.node])


def test_members_sharing_a_node_share_its_cpu(drtg: DRTG) -> None:
    # Each member asks for 150 of a node's 224 cores: two cannot share a node, though
    # their GPUs would fit on one; the ring spreads them instead of failing.
    state = ClusterState(drtg.node_specs())
    annotations = {"kubesage.io/gang": "llm", "kubesage.io/gang-min-available": "2"}
    pods = [
        info(request(f"llm-{i}", gpus=4, cpu=150_000, memory=65_536), annotations=annotations)
        for i in range(2)
    ]
    plan = the_plan(GangReconciler().reconcile(view(state, pods, topology=drtg)))
    assert len({bind.placement.node for bind in binds(plan)}) == 2


def test_members_asking_for_different_gpu_models_are_left_to_the_secondary_scheduler(
    drtg: DRTG,
) -> None:
    state = ClusterState(drtg.node_specs())
    annotations = {"kubesage.io/gang": "llm", "kubesage.io/gang-min-available": "2"}
    pods = [
        info(
            request(f"llm-{model}", gpus=4).model_copy(update={"gpu_models": (model,)}),
            annotations=annotations,
        )
        for model in ("H100-80GB", "A100-80GB")
    ]
    result = GangReconciler().reconcile(view(state, pods, topology=drtg))
    assert result.actions == []
    assert any("members ask for different GPU models" in note for note in result.notes)
