"""The packing upper bound and the forced-placement certificate behind it."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.policy import PAPER_POLICIES, PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.forced_placement import surely_placed
from kubesage.core.sim.hindsight import default_portfolio, hindsight_search
from kubesage.core.sim.packing_bound import allocation_upper_bound
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from tests.builders import node, pod


def test_the_bound_lies_above_every_run_found() -> None:
    nodes = synthetic_cluster(20, seed=11)
    workload = synthetic_workload(250, seed=11)
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    arrivals = fgd_arrivals(workload, gpu_capacity_milli=capacity, seed=11)
    bound = allocation_upper_bound(nodes, arrivals)
    found = hindsight_search(
        nodes,
        arrivals,
        seed=11,
        portfolio=default_portfolio(workload),
        checkpoints_pct=(0.0, 80.0),
    )
    assert found.hindsight.allocation_pct <= bound.percent + 1e-9
    assert bound.percent <= min(bound.flow_percent, 100.0 - bound.stranded_percent) + 1e-9
    assert bound.percent <= 100.0


def test_requests_restricted_to_one_model_bound_the_allocation_by_its_capacity() -> None:
    nodes = [node("a", gpus=8, model="V100M32"), node("b", gpus=8, model="T4")]
    arrivals = [pod(f"p{i}", gpus=1, models=("V100M32",)) for i in range(20)]
    bound = allocation_upper_bound(nodes, arrivals)
    assert bound.percent == pytest.approx(50.0)
    assert bound.pools == {"T4x8": 0.0, "V100M32x8": 8.0}  # no request may use the T4s


def test_cpu_caps_what_a_node_can_carry() -> None:
    """Every GPU pod asks 16 cores per GPU; a 32-core node carries two of its 8 GPUs."""
    nodes = [node("small", cpu=32_000, gpus=8), node("big", cpu=256_000, gpus=8)]
    arrivals = [pod(f"p{i}", cpu=16_000, gpus=1) for i in range(30)]
    bound = allocation_upper_bound(nodes, arrivals)
    assert bound.usable_percent == pytest.approx(100 * 10 / 16)
    assert bound.percent == pytest.approx(100 * 10 / 16)


def test_room_beside_big_shares_every_policy_places_is_stranded() -> None:
    """The first 810 share always fits; 190 beside it can take nothing (no share ≤ 190)."""
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    arrivals = [pod(f"s{i}", milli=810) for i in range(3)]
    bound = allocation_upper_bound(nodes, arrivals)
    assert bound.big_shares == 1
    assert bound.stranded_percent == pytest.approx(100 * 190 / 2000)
    assert bound.percent == pytest.approx(100 * (2000 - 190) / 2000)
    # With a small share to fill the room, nothing is stranded.
    filled = allocation_upper_bound(nodes, [*arrivals, pod("small", milli=150)])
    assert filled.stranded_percent == pytest.approx(100 * 40 / 2000)


def test_a_cluster_without_gpus_has_no_bound() -> None:
    with pytest.raises(InputError, match="no GPUs"):
        allocation_upper_bound([node("cpu", gpus=0)], [pod("a")])


def test_the_first_arrival_is_certified_and_a_pod_larger_than_every_node_never() -> None:
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    arrivals = [pod("first", gpus=2), pod("huge", gpus=4), pod("c", cpu=1_000)]
    assert surely_placed(nodes, arrivals).tolist() == [True, False, True]


def test_certified_pods_are_placed_by_every_policy() -> None:
    """The certificate is sound: no policy of the paper's leaves a certified pod out."""
    nodes = synthetic_cluster(16, seed=4)
    workload = synthetic_workload(200, seed=4)
    capacity = ClusterState(nodes).gpu_capacity_milli_total
    arrivals = fgd_arrivals(workload, gpu_capacity_milli=capacity, seed=4)
    certified = surely_placed(nodes, arrivals)
    assert certified[0] and not certified.all()
    typical = typical_pods(workload)
    for name in PAPER_POLICIES:
        simulator = Simulator(
            nodes,
            make_policy(name, PolicyContext(seed=4, workload=workload)),
            lambda state: FragmentationMeasure(typical, state.gpu_models),
        )
        simulator.run_arrivals(arrivals)
        failed = {decision.request for decision in simulator.failed}
        names = np.array([p.name for p in arrivals])
        assert not failed & set(names[certified]), name


def test_the_certified_arrivals_of_one_shape_are_a_prefix() -> None:
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    arrivals = [pod(f"p{i}", milli=600) for i in range(8)]
    certified = surely_placed(nodes, arrivals).tolist()
    first_false = certified.index(False)
    assert certified[0] and not any(certified[first_false:])
