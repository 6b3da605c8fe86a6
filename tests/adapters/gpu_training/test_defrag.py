"""Defragmentation and compaction plans on hand-made clusters, and the simulator applying them."""

from __future__ import annotations

from kubesage.adapters.gpu_training.compaction import Compactor, compact
from kubesage.adapters.gpu_training.defrag import Defragmenter
from kubesage.adapters.gpu_training.mig import mig_request
from kubesage.adapters.gpu_training.relayout import relayout_plans
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.types import NodeSpec, Placement, PodRequest
from tests.adapters.gpu_training.test_mig_cluster import H100, mig_node


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


# -- MIG ------------------------------------------------------------------------------


def mig_cluster(
    instances: list[tuple[str, str, str, int, int]], nodes: int = 2
) -> tuple[ClusterState, dict[str, tuple[PodRequest, Placement]]]:
    """``instances``: (name, profile, qos, node, start) on GPU 0 of one-GPU MIG nodes."""
    state = ClusterState([mig_node(f"m{i}", gpus=1) for i in range(nodes)])
    running = {}
    for name, profile, qos, where, start in instances:
        pod = mig_request(name, H100, profile).model_copy(update={"qos": qos})
        placement = state.placement(where, [0], pod, mig_start=start)
        state.allocate(pod, placement)
        running[name] = (pod, placement)
    return state, running


def apply(
    state: ClusterState,
    running: dict[str, tuple[PodRequest, Placement]],
    moves: list[tuple[str, Placement]],
) -> None:
    for name, _ in moves:
        state.release(*running[name])
    for name, target in moves:
        pod = running[name][0]
        state.allocate(pod, target)
        running[name] = (pod, target)


def test_a_7g_request_moves_the_cheapest_instance_and_plans_the_relayout() -> None:
    # m0 holds a best-effort 1g at slot 6, m1 a latency-sensitive 1g at slot 0:
    # no GPU is empty, so a 7g.80gb fits nowhere.
    state, running = mig_cluster([("be", "1g.10gb", "BE", 0, 6), ("ls", "1g.10gb", "LS", 1, 0)])
    big = mig_request("big", H100, "7g.80gb")
    assert not state.feasible(big).any()
    policy = make_policy("fgd", PolicyContext(workload=[big, running["be"][0]]))
    moves = Defragmenter(policy).plan(state, running, big)
    assert moves is not None and [name for name, _ in moves] == ["be"]
    assert moves[0][1].node == "m1"
    plans = relayout_plans(state, running, moves)
    assert [p.node for p in plans] == ["m0", "m1"]
    assert plans[0].layouts == ((),)
    assert sorted(i.profile for i in plans[1].layouts[0]) == ["1g.10gb", "1g.10gb"]
    label, value = plans[1].label
    assert label == "nvidia.com/mig.config" and value == plans[1].config_name
    devices = plans[1].mig_parted["mig-configs"][value]  # type: ignore[index]
    assert devices == [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2}}]
    apply(state, running, moves)
    assert state.feasible(big).tolist() == [True, False]


def test_a_cpu_only_pod_on_a_mig_node_is_no_instance_and_stays() -> None:
    # Every GPU node runs CPU-only pods (the device plugin's, an exporter's): they hold
    # no GPU, so the plan is the one without them, and they do not move.
    state, running = mig_cluster([("be", "1g.10gb", "BE", 0, 6), ("ls", "1g.10gb", "LS", 1, 0)])
    exporter = PodRequest(name="exporter", cpu_milli=100, memory_mib=64, num_gpu=0, gpu_milli=0)
    placement = state.placement(0, [], exporter)
    state.allocate(exporter, placement)
    running["exporter"] = (exporter, placement)
    big = mig_request("big", H100, "7g.80gb")
    policy = make_policy("fgd", PolicyContext(workload=[big, running["be"][0]]))
    moves = Defragmenter(policy).plan(state, running, big)
    assert moves is not None and [name for name, _ in moves] == ["be"]


def test_a_4g_request_can_be_served_by_a_relayout_on_the_same_gpu() -> None:
    # One GPU, a 1g at slot 0 (where 4g.40gb must start): moving it to a free slot
    # of the same GPU is enough.
    state, running = mig_cluster([("small", "1g.10gb", "BE", 0, 0)], nodes=1)
    request = mig_request("mid", H100, "4g.40gb")
    assert not state.feasible(request).any()
    policy = make_policy("fgd", PolicyContext(workload=[request]))
    moves = Defragmenter(policy).plan(state, running, request)
    assert moves is not None and len(moves) == 1
    assert moves[0][1].node == "m0" and moves[0][1].mig_start is not None
    assert moves[0][1].mig_start >= 4
    apply(state, running, moves)
    assert state.feasible(request).all()


def test_mig_instances_that_must_not_move_block_the_plan() -> None:
    state, running = mig_cluster(
        [("g0", "1g.10gb", "Guaranteed", 0, 6), ("g1", "1g.10gb", "Guaranteed", 1, 0)]
    )
    big = mig_request("big", H100, "7g.80gb")
    policy = make_policy("fgd", PolicyContext(workload=[big]))
    assert Defragmenter(policy).plan(state, running, big) is None


# -- background compaction ------------------------------------------------------------


def test_compaction_empties_the_cheapest_partly_used_gpu_onto_used_ones() -> None:
    state = ClusterState([node("a"), node("b")])
    running = {}
    for pod, where in ((share("x", 300, "BE"), 0), (share("y", 500, "LS"), 1)):
        placement = state.placement(where, [0], pod)
        state.allocate(pod, placement)
        running[pod.name] = (pod, placement)
    policy = make_policy("bestfit", PolicyContext(workload=[BIG]))
    whole_before = int(state.gpu_whole_free_count.sum())
    moves = compact(policy, state, running, budget=4)
    assert [name for name, _ in moves] == ["x"]  # BE is cheaper than LS
    assert moves[0][1].node == "b" and moves[0][1].gpu_indices == (0,)  # onto y's GPU
    apply(state, running, moves)
    assert int(state.gpu_whole_free_count.sum()) == whole_before + 1
    assert compact(policy, state, running, budget=0) == []


def test_compaction_never_moves_onto_an_empty_gpu() -> None:
    state = ClusterState([node("a")])
    pod = share("x", 300, "BE")
    placement = state.placement(0, [0], pod)
    state.allocate(pod, placement)
    policy = make_policy("bestfit", PolicyContext(workload=[BIG]))
    assert compact(policy, state, {"x": (pod, placement)}, budget=4) == []
    assert state.gpu_whole_free_count.tolist() == [1]  # the state it was given is untouched


def test_the_simulator_runs_background_compaction_and_counts_it() -> None:
    pods = [
        share("p1", 300, "BE").model_copy(update={"creation_time_s": 0.0, "deletion_time_s": 99.0}),
        share("p2", 300, "BE").model_copy(update={"creation_time_s": 1.0, "deletion_time_s": 99.0}),
        BIG.model_copy(update={"creation_time_s": 50.0, "deletion_time_s": 60.0}),
    ]
    typical = typical_pods(pods)
    runs = {}
    for enabled in (False, True):
        policy = make_policy("random", PolicyContext(seed=3, workload=pods))
        simulator = Simulator(
            [node("a"), node("b")],
            policy,
            lambda state: FragmentationMeasure(typical, state.gpu_models),
            compactor=Compactor(policy, interval_s=10.0, free_share=1.0) if enabled else None,
        )
        simulator.run_replay(pods)
        runs[enabled] = simulator
    assert [d.request for d in runs[False].failed] == ["big"]  # random spread the shares
    assert not runs[True].failed
    assert runs[True].compaction_migrations == runs[True].migrations == 1
