"""Defragmentation plans on hand-made clusters, and the simulator applying them."""

from __future__ import annotations

from kubesage.adapters.gpu_training.defrag import Defragmenter
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.types import NodeSpec, Placement, PodRequest


def node(name: str) -> NodeSpec:
    return NodeSpec(name=name, cpu_milli=64_000, memory_mib=262_144, gpu_count=2, gpu_model="G2")


def share(name: str, milli: int, qos: str) -> PodRequest:
    return PodRequest(
        name=name, cpu_milli=1_000, memory_mib=1_024, num_gpu=1, gpu_milli=milli, qos=qos
    )


BIG = PodRequest(name="big", cpu_milli=8_000, memory_mib=32_768, num_gpu=2, gpu_milli=1000)


def fragmented(first_qos: str) -> tuple[ClusterState, dict[str, tuple[PodRequest, Placement]]]:
    state = ClusterState([node("a"), node("b")])
    running = {}
    for pod, where, gpu in ((share("pa", 500, first_qos), 0, 0), (share("pb", 300, "LS"), 1, 1)):
        placement = state.placement(where, [gpu], pod)
        state.allocate(pod, placement)
        running[pod.name] = (pod, placement)
    return state, running


def defragmenter(**options: int) -> Defragmenter:
    return Defragmenter(make_policy("bestfit", PolicyContext(workload=[BIG])), **options)


def test_moves_the_cheapest_pod_and_then_the_request_fits() -> None:
    state, running = fragmented("BE")
    assert not state.feasible(BIG).any()
    moves = defragmenter().plan(state, running, BIG)
    assert moves is not None and [name for name, _ in moves] == ["pa"]  # BE costs less than LS
    name, target = moves[0]
    assert target.node == "b"
    pod, source = running[name]
    state.release(pod, source)
    state.allocate(pod, target)
    assert state.feasible(BIG).tolist() == [True, False]


def test_guaranteed_pods_never_move_and_budget_is_kept() -> None:
    state, running = fragmented("Guaranteed")
    moves = defragmenter().plan(state, running, BIG)
    assert moves is not None and [name for name, _ in moves] == ["pb"]
    assert moves[0][1].node == "a"
    assert defragmenter(budget=0).plan(state, running, BIG) is None


def test_sharing_and_small_requests_are_not_worth_moving_pods_for() -> None:
    state, running = fragmented("BE")
    assert defragmenter().plan(state, running, share("small", 900, "BE")) is None


def test_the_simulator_applies_the_plan_and_counts_migrations() -> None:
    pods = [share("pa", 500, "BE"), share("pb", 300, "LS"), share("pc", 600, "BE"), BIG]
    typical = typical_pods(pods)
    runs = {}
    for enabled in (False, True):
        policy = make_policy("random", PolicyContext(seed=3, workload=pods))
        simulator = Simulator(
            [node("a"), node("b")],
            policy,
            lambda state: FragmentationMeasure(typical, state.gpu_models),
            defragmenter=Defragmenter(policy) if enabled else None,
        )
        simulator.run_arrivals(pods)
        runs[enabled] = simulator
    assert [d.request for d in runs[False].failed] == ["big"]  # random scatters the shares
    assert not runs[True].failed
    assert runs[True].defragmented == ["big"] and runs[True].migrations >= 1
    placed = runs[True].running["big"][1]
    assert runs[True].state.gpu_whole_free_count[placed.node_index] == 0
    total = sum(p.total_gpu_milli for p in pods)
    assert runs[True].state.gpu_allocated_milli_total <= total
