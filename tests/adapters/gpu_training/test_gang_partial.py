"""A gang plan that stops part way (a bind refused: its room was taken meanwhile) leaves
members bound. Where the loop alone places the gang (the embedded cluster, the
simulator) ``gpu-gang`` places the rest on a later tick, each at the rank it has in the
whole gang; on a live cluster the secondary scheduler does (it hands the loop only gangs
with no member bound)."""

from __future__ import annotations

import time

import pytest

from kubesage.adapters.gpu_training.gang_reconciler import (
    BIND_CARRIES_ANNOTATIONS,
    GANG_RANK_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    GangReconciler,
    GangSettings,
)
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.k8s.binding import BindTarget
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.embedded_actuators import embedded_actuators
from kubesage.core.loop.actions import Action, ActionKind, Bind, Patch, Plan
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.reconciler import Actuator, Result
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import ClusterObservation, WorldModel
from kubesage.core.policy.base import PolicyContext
from kubesage.core.policy.registry import make_policy
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import PodRequest
from tests.adapters.gpu_training.loop_views import info, request, run, view

GANG = {"kubesage.io/gang": "llm", "kubesage.io/gang-min-available": "2"}


@pytest.fixture(scope="module")
def drtg() -> DRTG:
    return DRTG.from_yaml(example_topology("dgx-h100-pod"))


def member(index: int) -> PodRequest:
    return request(f"llm-{index}", gpus=8, cpu=16_000, memory=65_536)


def ranks(plan: Plan) -> list[dict[str, str]]:
    if BIND_CARRIES_ANNOTATIONS:
        return [dict(getattr(s, "annotations", {})) for s in plan.steps if isinstance(s, Bind)]
    return [dict(s.patch["metadata"]["annotations"]) for s in plan.steps if isinstance(s, Patch)]


def test_the_loop_places_the_rest_of_a_gang_it_owns_at_their_ranks(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    bound = run(state, member(0), drtg.node_names[0], list(range(8)), annotations=GANG)
    pending = info(member(1), annotations=GANG)  # loop_places: the embedded cluster
    result = GangReconciler().reconcile(view(state, [bound, pending], topology=drtg))
    assert len(result.actions) == 1, result.notes
    plan = result.actions[0]
    assert isinstance(plan, Plan)
    binds = [step for step in plan.steps if isinstance(step, Bind)]
    assert [str(b.pod) for b in binds] == ["default/llm-1"]  # the missing member only
    assert binds[0].placement.node != drtg.node_names[0]
    assert ranks(plan) == [{GANG_RANK_ANNOTATION: "1", GANG_SIZE_ANNOTATION: "2"}]
    assert "1 of 2 bound already" in plan.explanation

    # On a live cluster the secondary scheduler places the rest: it hands the loop only
    # gangs with no member bound, so a claim would place the member twice.
    claimed = info(member(1), annotations=GANG, loop_places=False, claimable=True)
    reconciler = GangReconciler(GangSettings(claims_gangs=True))
    live = reconciler.reconcile(view(state, [bound, claimed], topology=drtg))
    assert live.actions == []
    assert live.notes == [
        "gang default/llm: 1 member(s) already bound; the secondary scheduler places the rest"
    ]


def test_bound_members_count_towards_min_available(drtg: DRTG) -> None:
    state = ClusterState(drtg.node_specs())
    three = {**GANG, "kubesage.io/gang-min-available": "3"}
    bound = run(state, member(0), drtg.node_names[0], list(range(8)), annotations=three)
    pending = [info(member(i), annotations=three) for i in (1, 2)]
    result = GangReconciler().reconcile(view(state, [bound, *pending], topology=drtg))
    assert len(result.actions) == 1, result.notes


class Racing:
    """The embedded bind actuator, with the extender binding a 1-GPU pod on the second
    member's node just before that member's bind (so the gang's plan stops part way)."""

    def __init__(self, cluster: EmbeddedCluster, actuator: Actuator) -> None:
        self.extender_bind = cluster.binder(make_policy("bestfit", PolicyContext()))
        self.actuator = actuator
        self.calls = 0

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return self.actuator.kinds

    def execute(self, action: Action) -> Result:
        self.calls += 1
        if self.calls == 2 and isinstance(action, Bind):
            other = PodRequest(
                name="default/other", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000
            )
            self.extender_bind(BindTarget("default", "other", "", action.placement.node, other))
        return self.actuator.execute(action)


def test_an_embedded_gang_whose_plan_stopped_part_way_is_completed(drtg: DRTG) -> None:
    cluster = EmbeddedCluster(drtg.node_specs(), [], "test")
    bind, evict = embedded_actuators(cluster, make_policy("bestfit", PolicyContext()))
    clock = SimulatedClock(time.time())
    collector = EmbeddedClusterCollector(cluster)
    loop = ControlLoop(
        clock,
        {"embedded": collector},
        WorldModel(topology=drtg),
        [GangReconciler()],
        [Racing(cluster, bind), evict],
    )
    for index in range(2):
        cluster.submit("default", f"llm-{index}", member(index), annotations=GANG)

    first = loop.tick()
    clock.advance(5)
    outcomes = [(r.action, r.target, str(r.outcome)) for r in first.records if r.action == "bind"]
    assert outcomes == [("bind", "default/llm-0", "done"), ("bind", "default/llm-1", "refused")]
    observed = collector.collect().data
    assert isinstance(observed, ClusterObservation)
    running: PodInfo = observed.pods["default/llm-0"]
    assert not running.pending and running.gang == "default/llm"  # still a gang member
    assert running.annotations == GANG

    loop.tick()
    assert sorted(pod.name for pod in cluster.bound.values()) == ["llm-0", "llm-1", "other"]
    assert not cluster.pending
