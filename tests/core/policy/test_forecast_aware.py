"""The forecast term: GPU-sharing pods go where the forecast GPU load is low; the rest
of the policy, and every other pod, is untouched."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.arrays import FloatArray
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.policy.forecast_aware import ForecastAwarePolicy
from kubesage.core.state.cluster_state import ClusterState
from tests.builders import cluster, node, pod

SHARE = pod("share", milli=300)


def three_nodes() -> ClusterState:
    return cluster(node("a", gpus=2), node("b", gpus=2), node("c", gpus=2))


def loads(table: dict[tuple[int, int], float]) -> FloatArray:
    out = np.full((3, 2), np.nan)
    for (n, g), value in table.items():
        out[n, g] = value
    return out


def wrapped(weight: float, table: FloatArray | None) -> ForecastAwarePolicy:
    base = make_policy("bestfit", PolicyContext())
    return ForecastAwarePolicy(base, lambda state: table, weight, describe=lambda: "test")


def test_weight_zero_decides_exactly_as_the_base_policy() -> None:
    state = three_nodes()
    base = make_policy("bestfit", PolicyContext())
    policy = wrapped(0.0, loads({(0, 0): 1.0, (0, 1): 1.0}))
    expected = base.decide(state, SHARE)
    got = policy.decide(state, SHARE)
    assert got.placement == expected.placement
    assert got.explanation == expected.explanation
    nodes = np.arange(3, dtype=np.int64)
    np.testing.assert_array_equal(
        policy.score_nodes(state, SHARE, nodes), base.score_nodes(state, SHARE, nodes)
    )


def test_a_sharing_pod_avoids_the_gpus_forecast_busy_and_the_explanation_says_so() -> None:
    state = three_nodes()
    base = make_policy("bestfit", PolicyContext()).decide(state, SHARE)
    assert base.placement is not None
    first = state.node_index[base.placement.node]
    busy = {(first, 0): 0.95, (first, 1): 0.9}
    quiet = {(n, g): 0.1 for n in range(3) for g in range(2) if n != first}
    decision = wrapped(1.0, loads(busy | quiet)).decide(state, SHARE)
    assert decision.placement is not None
    assert decision.placement.node != base.placement.node
    assert "forecast term" in decision.explanation
    assert base.placement.node in decision.explanation


def test_within_a_node_the_least_loaded_gpu_with_room_is_taken() -> None:
    state = three_nodes()
    table = loads({(n, 0): 0.8 for n in range(3)} | {(n, 1): 0.2 for n in range(3)})
    policy = wrapped(0.5, table)
    placement = policy.placement_on(state, 0, SHARE)
    assert placement.gpu_indices == (1,)
    decision = policy.decide(state, SHARE)
    assert decision.placement is not None
    assert decision.placement.gpu_indices == (1,)


def test_whole_gpu_pods_and_unknown_loads_go_to_the_base_policy() -> None:
    state = three_nodes()
    base = make_policy("bestfit", PolicyContext())
    whole = pod("whole", gpus=1)
    busy = wrapped(1.0, loads({(n, g): 0.9 for n in range(3) for g in range(2)}))
    assert busy.decide(state, whole).placement == base.decide(state, whole).placement
    unknown = wrapped(1.0, None)
    assert unknown.decide(state, SHARE).placement == base.decide(state, SHARE).placement


def test_a_gpu_without_room_is_never_chosen_however_quiet() -> None:
    state = cluster(node("a", gpus=2))
    state.allocate(pod("big", milli=900), state.placement(0, (1,), pod("big", milli=900)))
    table = np.array([[0.9, 0.0]])
    placement = wrapped(1.0, table).placement_on(state, 0, SHARE)
    assert placement.gpu_indices == (0,)


def test_the_weight_is_checked() -> None:
    with pytest.raises(ValueError, match="forecast weight"):
        wrapped(1.5, None)
