"""The learned policy's cluster vector: kept up to date, it stays numpy's quantiles exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.cluster_summary import (
    GLOBAL_RAW,
    POINTS,
    ClusterSummary,
    global_raw,
    series_of,
    summarised_nodes,
)
from kubesage.core.state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec


def numpy_quantiles(state: ClusterState) -> np.ndarray:
    """The definition: ``np.quantile`` of each series, as the policy was trained on."""
    series = series_of(state, summarised_nodes(state))
    return np.concatenate([np.quantile(values, POINTS) for values in series]).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        # Few distinct values (many ties) mixed with arbitrary ones (rounding).
        st.one_of(st.integers(0, 8).map(lambda level: level / 8), st.floats(0, 1)),
        min_size=1,
        max_size=300,
    ),
    st.integers(0, 2**31 - 1),
)
def test_the_interpolation_is_numpys_bit_for_bit(levels: list[float], seed: int) -> None:
    rng = np.random.default_rng(seed)
    cpu = rng.integers(1, 64, size=len(levels)) * 1000
    nodes = [
        NodeSpec(
            name=f"n{i}",
            cpu_milli=int(cpu[i]),
            memory_mib=int(rng.integers(1, 512)) * 1024,
            gpu_count=int(rng.integers(0, 9)),
            gpu_model="A100",
        )
        for i in range(len(levels))
    ]
    state = ClusterState(nodes)
    for i, level in enumerate(levels):
        state.cpu_free_milli[i] = int(level * cpu[i])
    assert np.array_equal(global_raw(state), numpy_quantiles(state))


def test_following_placements_releases_and_copies_it_equals_a_fresh_summary() -> None:
    state = ClusterState(synthetic_cluster(400, seed=3))
    fgd = make_policy("fgd", PolicyContext(seed=0, workload=tuple(synthetic_workload(500, seed=3))))
    summary = ClusterSummary()
    placed = []
    rng = np.random.default_rng(0)
    for number, request in enumerate(synthetic_workload(600, seed=4)):
        decision = fgd.decide(state, request)
        if decision.placement is not None:
            state.allocate(request, decision.placement)
            placed.append((request, decision.placement))
        if placed and rng.random() < 0.2:  # departures too
            gone = placed.pop(int(rng.integers(len(placed))))
            state.release(*gone)
        if number % 7 == 0:
            assert np.array_equal(summary.of(state), numpy_quantiles(state))
    # A copy that diverges, then the original again: each is summarised as it is.
    copy = state.copy()
    request, placement = placed.pop()
    copy.release(request, placement)
    assert np.array_equal(summary.of(copy), numpy_quantiles(copy))
    assert np.array_equal(summary.of(state), numpy_quantiles(state))
    # Many nodes at once (a rebuild) and a cordoned GPU.
    for request, placement in placed[:100]:
        state.release(request, placement)
    gpu_node = int(np.flatnonzero(state.gpu_count > 0)[0])
    state.cordon_gpu(gpu_node, 0)
    assert np.array_equal(summary.of(state), numpy_quantiles(state))
    # Another cluster (another lineage) is summarised afresh.
    other = ClusterState(synthetic_cluster(50, seed=9))
    assert np.array_equal(summary.of(other), numpy_quantiles(other))
    assert summary.of(other).shape == (GLOBAL_RAW,)


def test_a_cluster_without_gpus_summarises_every_node() -> None:
    nodes = [NodeSpec(name=f"c{i}", cpu_milli=8000 * (i + 1), memory_mib=1024) for i in range(5)]
    state = ClusterState(nodes)
    assert np.array_equal(ClusterSummary().of(state), numpy_quantiles(state))


def test_the_vector_returned_is_the_callers_own() -> None:
    state = ClusterState(synthetic_cluster(20, seed=1))
    summary = ClusterSummary()
    first = summary.of(state)
    first[:] = -1.0
    assert np.array_equal(summary.of(state), numpy_quantiles(state))


@pytest.mark.parametrize("size", [1, 2, 64, 65, 1000])
def test_any_series_length(size: int) -> None:
    nodes = [
        NodeSpec(name=f"n{i}", cpu_milli=4000, memory_mib=2048, gpu_count=1 + i % 8, gpu_model="T4")
        for i in range(size)
    ]
    state = ClusterState(nodes)
    state.cpu_free_milli[: size // 2] = 1000
    assert np.array_equal(ClusterSummary().of(state), numpy_quantiles(state))
