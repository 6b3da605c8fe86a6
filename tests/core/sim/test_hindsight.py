"""The hindsight search: a feasible run of the FGD protocol, never below its base policy."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kubesage.core.errors import InputError
from kubesage.core.policy import Policy, PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.hindsight import (
    checkpoint_positions,
    default_portfolio,
    hindsight_search,
    pod_kind,
)
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec, PodRequest
from tests.builders import node, pod

CHECKPOINTS = (0.0, 60.0, 90.0, 110.0)


def small_run(seed: int = 7) -> tuple[list[NodeSpec], list[PodRequest], list[PodRequest]]:
    nodes = synthetic_cluster(24, seed=seed)
    workload = synthetic_workload(300, seed=seed)
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    return nodes, workload, fgd_arrivals(workload, gpu_capacity_milli=capacity, seed=seed)


def test_the_search_starts_from_the_simulators_fgd_run_and_never_ends_below_it() -> None:
    nodes, workload, arrivals = small_run()
    result = hindsight_search(
        nodes, arrivals, seed=7, portfolio=default_portfolio(workload), checkpoints_pct=CHECKPOINTS
    )
    typical = typical_pods(workload)
    simulator = Simulator(
        nodes,
        make_policy("fgd", PolicyContext(seed=7, workload=workload)),
        lambda state: FragmentationMeasure(typical, state.gpu_models),
    )
    simulator.run_arrivals(arrivals)
    assert result.base.allocation_pct == pytest.approx(simulator.state.gpu_allocation_ratio * 100)
    assert result.throughout["fgd"] == pytest.approx(result.base.allocation_pct)
    assert result.hindsight.allocation_pct >= result.base.allocation_pct
    assert result.hindsight.allocation_pct >= max(result.throughout.values()) - 1e-9
    gained = sum(switch.gain_gpu_milli for switch in result.switches)
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    assert result.hindsight.allocation_pct - result.base.allocation_pct == pytest.approx(
        gained * 100 / capacity
    )


def test_the_hindsight_run_is_a_feasible_run_of_the_protocol() -> None:
    """Replayed in arrival order, every placement fits, and every failed pod fit nowhere."""
    nodes, workload, arrivals = small_run(seed=3)
    result = hindsight_search(
        nodes, arrivals, seed=3, portfolio=default_portfolio(workload), checkpoints_pct=CHECKPOINTS
    )
    state = ClusterState(nodes)
    for request, placement in zip(arrivals, result.placements, strict=True):
        if placement is None:
            assert not state.feasible(request).any(), f"{request.name} fit but was not placed"
        else:
            state.allocate(request, placement)  # raises CapacityError if it does not fit
    assert state.gpu_allocation_ratio * 100 == pytest.approx(result.hindsight.allocation_pct)
    failed = sum(result.hindsight.failed_by_kind.values())
    assert failed == sum(placement is None for placement in result.placements)


def test_a_better_policy_in_the_portfolio_is_switched_to() -> None:
    nodes, workload, arrivals = small_run(seed=5)
    portfolio = default_portfolio(workload)

    def random(future: Sequence[PodRequest], seed: int) -> Policy:
        return make_policy("random", PolicyContext(seed=seed, workload=workload))

    result = hindsight_search(
        nodes,
        arrivals,
        seed=5,
        portfolio={"random": random, "fgd": portfolio["fgd"]},
        base="random",
        checkpoints_pct=(0.0,),
    )
    assert result.throughout["fgd"] > result.throughout["random"]
    assert result.hindsight.allocation_pct == pytest.approx(result.throughout["fgd"])
    assert [(s.position, s.policy) for s in result.switches] == [(0, "fgd")]


def test_checkpoints_are_positions_after_the_arrival_that_reaches_each_percentage() -> None:
    arrivals = [pod(f"p{i}", gpus=1) for i in range(10)]  # 10 % of 10 GPUs each
    assert checkpoint_positions(arrivals, 10_000, (0.0, 25.0, 30.0, 100.0, 200.0)) == [0, 3]


def test_bad_searches_are_refused() -> None:
    nodes, workload, arrivals = small_run()
    with pytest.raises(InputError, match="base policy 'best'"):
        hindsight_search(
            nodes, arrivals, seed=0, portfolio=default_portfolio(workload), base="best"
        )
    with pytest.raises(InputError, match="empty"):
        hindsight_search(nodes, [], seed=0, portfolio=default_portfolio(workload))
    with pytest.raises(InputError, match="no GPUs"):
        hindsight_search(
            [node("cpu", gpus=0)], [pod("a")], seed=0, portfolio=default_portfolio(workload)
        )


def test_pod_kinds_name_the_request_shape() -> None:
    assert pod_kind(pod("c")) == "cpu"
    assert pod_kind(pod("s", milli=300)) == "share"
    assert pod_kind(pod("w", gpus=4, models=("V100M32",))) == "4gpu+model"
