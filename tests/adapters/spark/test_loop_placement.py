"""``spark-placement``: Spark executors placed on the live DRTG, alone and in a real loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import pytest

from kubesage.adapters.spark.cli import ADAPTER
from kubesage.adapters.spark.job_hints import INPUT_LOCALITY_ANNOTATION
from kubesage.adapters.spark.loop_placement import (
    NAME,
    PROFILE_LABEL,
    SparkPlacementReconciler,
    SparkPlacementSettings,
)
from kubesage.core.cli.loop import build_loop
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.k8s.actuators import embedded_actuators
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.loop.actions import Bind, Plan, PodRef
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.forecasts import ForecastPanel
from kubesage.core.loop.reconciler import ClaimsPods, Reconciled, Reconciler
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import NodeSpec, PodRequest

APP = "spark-0123456789abcdef"


@pytest.fixture(scope="module")
def cpu_racks() -> DRTG:
    """The shipped example: 4 racks of 10 nodes (64 cores, 512 GiB), 2 zones."""
    return DRTG.from_yaml(example_topology("cpu-racks"))


def rack_of(drtg: DRTG, node: str) -> str:
    return str(drtg.rack_names[drtg.node_rack[drtg.node_names.index(node)]])


def busy(drtg: DRTG, racks: Mapping[str, int], cores: int = 64) -> ClusterState:
    """The topology's nodes, with ``cores`` taken on the first ``n`` nodes of each rack."""
    state = ClusterState(drtg.node_specs())
    for rack, nodes in racks.items():
        for index in range(nodes):
            name = f"{rack}-node-{index:02d}"
            pod = PodRequest(name=f"bg/{name}", cpu_milli=cores * 1000, memory_mib=1024)
            state.allocate(pod, state.placement(state.node_index[name], [], pod))
    return state


def executor_labels(number: int, app: str = APP) -> dict[str, str]:
    """The labels Spark on Kubernetes sets on an executor pod."""
    return {"spark-app-selector": app, "spark-role": "executor", "spark-exec-id": str(number)}


def executors(
    count: int,
    *,
    cores: int = 4,
    memory_mib: int = 16_384,
    locality: str | None = None,
    app: str = APP,
    loop_places: bool = True,
    claimable: bool = False,
) -> list[PodInfo]:
    annotations = {} if locality is None else {INPUT_LOCALITY_ANNOTATION: locality}
    return [
        PodInfo(
            ref=PodRef("default", f"{app}-exec-{number}"),
            request=PodRequest(
                name=f"default/{app}-exec-{number}",
                cpu_milli=cores * 1000,
                memory_mib=memory_mib,
            ),
            labels=executor_labels(number, app),
            annotations=annotations,
            loop_places=loop_places,
            claimable=claimable,
        )
        for number in range(1, count + 1)
    ]


def view(
    state: ClusterState, pods: Iterable[PodInfo], topology: DRTG | None, tick: int = 1
) -> WorldView:
    return WorldView(
        tick=tick,
        now_s=5.0 * tick,
        state=state.copy(),
        pods={str(pod.ref): pod for pod in pods},
        topology=topology,
        forecasts=ForecastPanel(),
        snapshots={},
        data_age_s=0.0,
    )


def only_plan(answer: Reconciled) -> Plan:
    assert len(answer.actions) == 1, answer.notes
    plan = answer.actions[0]
    assert isinstance(plan, Plan)
    return plan


def binds(plan: Plan) -> list[Bind]:
    steps = [step for step in plan.steps if isinstance(step, Bind)]
    assert len(steps) == len(plan.steps)
    return steps


@pytest.mark.parametrize(
    ("locality", "load", "racks"),
    [
        # All input in one rack with room: every executor there.
        ("rack-b1=1", {}, {"rack-b1"}),
        # Input split over two racks, one nearly full: the other holds them all.
        ("rack-b1=0.5,rack-b2=0.5", {"rack-b1": 8}, {"rack-b2"}),
        # A zone's input is spread over its racks: both qualify, one suffices.
        ("zone-a=1", {}, {"rack-a1"}),
    ],
)
def test_pending_executors_get_one_plan_that_keeps_them_in_the_inputs_racks(
    cpu_racks: DRTG, locality: str, load: dict[str, int], racks: set[str]
) -> None:
    pods = executors(8, cores=32, memory_mib=65_536, locality=locality)
    answer = SparkPlacementReconciler().reconcile(view(busy(cpu_racks, load), pods, cpu_racks))
    plan = only_plan(answer)
    steps = binds(plan)
    assert [step.pod for step in steps] == [pod.ref for pod in pods]
    assert {rack_of(cpu_racks, step.placement.node) for step in steps} == racks
    assert all(not step.placement.gpu_indices for step in steps)
    assert [r.placement for r in plan.reservations] == [step.placement for step in steps]
    # No node runs more than a quarter of the executors (the balance limit).
    nodes = [step.placement.node for step in steps]
    assert max(nodes.count(node) for node in nodes) <= 2
    assert plan.reconciler == NAME and plan.id.startswith(f"{NAME}/default/{APP}/")
    for rack in racks:
        assert f"{rack} (8)" in plan.explanation
    assert "Expected cross-rack bytes" in plan.explanation
    assert "trade-off" in plan.explanation


def test_a_group_that_does_not_fit_whole_has_as_many_bound_as_fit(cpu_racks: DRTG) -> None:
    # Whole-node executors: 40 nodes, room for 40; a Spark job runs with what it gets.
    pods = executors(41, cores=64, memory_mib=1_024)
    answer = SparkPlacementReconciler().reconcile(view(busy(cpu_racks, {}), pods, cpu_racks))
    plan = only_plan(answer)
    placed = binds(plan)
    assert [step.pod.name for step in placed] == [pod.ref.name for pod in pods[:40]]
    assert len({step.placement.node for step in placed}) == 40
    (note,) = answer.notes
    assert f"default/{APP}" in note and "room for 40 of its 41 pending" in note
    none = SparkPlacementReconciler().reconcile(
        view(busy(cpu_racks, dict.fromkeys(cpu_racks.rack_names, 10)), pods, cpu_racks)
    )
    assert not none.actions
    assert any("no node its executors may use has room" in note for note in none.notes)


def test_a_later_executor_joins_the_rack_its_application_runs_in(cpu_racks: DRTG) -> None:
    """Spark asks for executors in batches, and dynamic allocation adds more: a new one
    goes beside the application's running ones, not to the first rack with room."""
    state = busy(cpu_racks, {})
    *first, late = executors(9)
    running = []
    for number, pod in enumerate(first):
        node = f"rack-b2-node-{number:02d}"
        placement = state.placement(state.node_index[node], [], pod.request)
        state.allocate(pod.request, placement)
        running.append(dataclasses.replace(pod, placement=placement, loop_places=False))
    answer = SparkPlacementReconciler().reconcile(view(state, [*running, late], cpu_racks))
    (bind,) = binds(only_plan(answer))
    assert bind.pod == late.ref and bind.placement.node.startswith("rack-b2-")
    alone = SparkPlacementReconciler().reconcile(view(busy(cpu_racks, {}), [late], cpu_racks))
    (elsewhere,) = binds(only_plan(alone))  # without its running executors: any rack
    assert not elsewhere.placement.node.startswith("rack-b2-")


def test_two_applications_do_not_take_the_same_room(cpu_racks: DRTG) -> None:
    # Room for 10 whole-node executors: rack-b1 only; the second app gets what is left.
    state = busy(cpu_racks, {"rack-a1": 10, "rack-a2": 10, "rack-b2": 10})
    pods = [
        *executors(6, cores=64, memory_mib=1_024, app="spark-a"),
        *executors(6, cores=64, memory_mib=1_024, app="spark-b"),
    ]
    answer = SparkPlacementReconciler(SparkPlacementSettings(max_node_share=1.0)).reconcile(
        view(state, pods, cpu_racks)
    )
    first, second = answer.actions
    assert isinstance(first, Plan) and isinstance(second, Plan)
    assert "spark-a" in first.id and len(binds(first)) == 6
    assert "spark-b" in second.id and len(binds(second)) == 4
    nodes = [step.placement.node for step in [*binds(first), *binds(second)]]
    assert len(set(nodes)) == 10 and all(node.startswith("rack-b1") for node in nodes)
    assert any("spark-b" in note and "room for 4 of its 6" in note for note in answer.notes)


def test_each_resource_profile_is_placed_with_its_own_shape(cpu_racks: DRTG) -> None:
    """Stage-level scheduling: one application asks for executors of two shapes (Spark
    labels each with its resource profile). Planned as one group of the largest shape,
    only 10 of its 16 would fit the one free rack; each profile with its own shape, the
    whole-node executors first, all 16 do, in that rack."""
    state = busy(cpu_racks, {"rack-a1": 10, "rack-a2": 10, "rack-b2": 10})
    small = executors(12)
    large = [
        dataclasses.replace(
            pod,
            ref=PodRef("default", f"{APP}-large-{number}"),
            request=pod.request.model_copy(update={"name": f"default/{APP}-large-{number}"}),
            labels=executor_labels(12 + number) | {PROFILE_LABEL: "1"},
        )
        for number, pod in enumerate(executors(4, cores=64, memory_mib=1_024), start=1)
    ]
    answer = SparkPlacementReconciler().reconcile(view(state, [*small, *large], cpu_racks))
    first, second = answer.actions
    assert isinstance(first, Plan) and isinstance(second, Plan), answer.notes
    assert [step.pod for step in binds(first)] == [pod.ref for pod in large]
    assert [step.pod for step in binds(second)] == [pod.ref for pod in small]
    assert f"Spark application default/{APP} (resource profile 1): 4 executor(s)" in (
        first.explanation
    )
    nodes = [step.placement.node for step in [*binds(first), *binds(second)]]
    assert all(node.startswith("rack-b1-") for node in nodes)
    assert not set(nodes[:4]) & set(nodes[4:])  # whole nodes for the large ones
    assert not answer.notes


def test_without_a_topology_there_is_a_note_and_nothing_else(cpu_racks: DRTG) -> None:
    answer = SparkPlacementReconciler().reconcile(
        view(busy(cpu_racks, {}), executors(2), topology=None)
    )
    assert not answer.actions
    assert answer.notes == [f"Spark application default/{APP}: no topology (DRTG) configured"]


def test_a_topology_of_other_nodes_is_a_note(cpu_racks: DRTG) -> None:
    other = ClusterState([NodeSpec(name="elsewhere", cpu_milli=64_000, memory_mib=524_288)])
    answer = SparkPlacementReconciler().reconcile(view(other, executors(2), cpu_racks))
    assert not answer.actions
    assert len(answer.notes) == 1 and "none of the topology's 40 nodes" in answer.notes[0]


def test_cluster_nodes_in_another_order_and_missing_ones_are_handled(cpu_racks: DRTG) -> None:
    # The cluster lists the topology's nodes backwards, lacks rack-b1 and has a GPU node.
    specs = [spec for spec in reversed(cpu_racks.node_specs()) if spec.rack != "rack-b1"]
    gpu = NodeSpec(name="gpu-0", cpu_milli=96_000, memory_mib=393_216, gpu_count=8, gpu_model="G2")
    state = ClusterState([gpu, *specs])
    answer = SparkPlacementReconciler().reconcile(
        view(state, executors(4, locality="rack-b1=1"), cpu_racks)
    )
    steps = binds(only_plan(answer))
    assert all(rack_of(cpu_racks, step.placement.node) != "rack-b1" for step in steps)
    for step in steps:  # placements index the cluster's own state
        assert state.node_names[step.placement.node_index] == step.placement.node
    assert any("10 topology node(s) are not in the cluster" in note for note in answer.notes)


def test_a_bad_locality_annotation_is_noted_and_ignored(cpu_racks: DRTG) -> None:
    answer = SparkPlacementReconciler().reconcile(
        view(busy(cpu_racks, {}), executors(2, locality="rack-z9=1"), cpu_racks)
    )
    assert len(binds(only_plan(answer))) == 2
    assert any(
        "input locality ignored" in note
        and "'rack-z9'" in note
        and INPUT_LOCALITY_ANNOTATION in note
        for note in answer.notes
    )


def test_it_claims_spark_executors_only() -> None:
    reconciler = SparkPlacementReconciler()
    assert isinstance(reconciler, ClaimsPods) and isinstance(reconciler, Reconciler)
    pods = executors(3, loop_places=False, claimable=True)
    assert reconciler.claims(pods)
    other = PodInfo(
        PodRef("default", "web"), PodRequest(name="default/web", cpu_milli=100, memory_mib=128)
    )
    driver = dataclasses.replace(
        pods[0], labels={"spark-app-selector": APP, "spark-role": "driver"}
    )
    assert not reconciler.claims([other])
    assert not reconciler.claims([driver])
    assert not reconciler.claims([*pods, other])
    assert not reconciler.claims([])
    assert not SparkPlacementReconciler(SparkPlacementSettings(claim_executors=False)).claims(pods)


def test_it_places_claimed_executors_but_not_kube_schedulers(cpu_racks: DRTG) -> None:
    state = busy(cpu_racks, {})
    claimed = executors(2, loop_places=False, claimable=True, app="spark-ours")
    others = executors(2, loop_places=False, claimable=False, app="spark-theirs")
    answer = SparkPlacementReconciler().reconcile(view(state, [*claimed, *others], cpu_racks))
    plan = only_plan(answer)
    assert [step.pod for step in binds(plan)] == [pod.ref for pod in claimed]
    unclaiming = SparkPlacementReconciler(SparkPlacementSettings(claim_executors=False))
    assert unclaiming.reconcile(view(state, claimed, cpu_racks)) == Reconciled()


def test_the_same_world_gets_the_same_keys_on_the_next_tick(cpu_racks: DRTG) -> None:
    reconciler = SparkPlacementReconciler()
    state = busy(cpu_racks, {"rack-a1": 3})
    pods = executors(12, locality="rack-a1=0.7,zone-b=0.3")
    first = only_plan(reconciler.reconcile(view(state, pods, cpu_racks, tick=1)))
    second = only_plan(reconciler.reconcile(view(state, pods, cpu_racks, tick=2)))
    assert first.id == second.id and first.key == second.key
    assert [s.key for s in first.steps] == [s.key for s in second.steps]


def test_the_adapter_registers_it_only_with_a_topology(cpu_racks: DRTG) -> None:
    assert ADAPTER.reconcilers(ReconcilerContext()) == ()
    registered = ADAPTER.reconcilers(ReconcilerContext(topology=cpu_racks))
    assert [r.name for r in registered] == [NAME]
    assert isinstance(registered[0], ClaimsPods)


def test_in_a_real_loop_pending_executors_are_bound_within_one_tick(cpu_racks: DRTG) -> None:
    cluster = EmbeddedCluster(cpu_racks.node_specs(), [], "cpu-racks")
    # Most of the cluster is busy: only rack-a2 has room for 6 executors of 32 cores.
    with cluster.locked() as (state, _):
        for name in cpu_racks.node_names:
            if not name.startswith("rack-a2"):
                pod = PodRequest(name=f"bg/{name}", cpu_milli=48_000, memory_mib=1_024)
                state.allocate(pod, state.placement(state.node_index[name], [], pod))
    labels = {}
    for number in range(1, 7):
        name = f"{APP}-exec-{number}"
        request = PodRequest(name=f"default/{name}", cpu_milli=32_000, memory_mib=65_536)
        cluster.submit("default", name, request, labels=executor_labels(number))
        labels[f"default/{name}"] = executor_labels(number)
    context = ReconcilerContext(settings=LoopSettings(max_data_age_s=None), topology=cpu_racks)
    control = build_loop(
        EmbeddedClusterCollector(cluster),
        embedded_actuators(cluster, make_policy("bestfit", PolicyContext())),
        context,
        clock=SimulatedClock(),
        reconcilers=ADAPTER.reconcilers(context),
    )
    report = control.tick()
    assert not cluster.pending, [record.to_json() for record in report.records]
    executors = [p for p in cluster.bound.values() if f"{p.namespace}/{p.name}" in labels]
    assert len(executors) == 6
    assert {rack_of(cpu_racks, pod.node) for pod in executors} == {"rack-a2"}
    outcomes = [(r.action, r.outcome) for r in report.records if r.reconciler == NAME]
    assert outcomes == [("bind", "done")] * 6 + [("plan", "done")]
    # Bound: the next tick asks for nothing more.
    control.clock.advance(control.tick_s)  # type: ignore[attr-defined]
    assert not [r for r in control.tick().records if r.reconciler == NAME]
