"""ClusterState: fit checks, allocate/release, and its invariants under random use."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesage.core.errors import CapacityError, InputError
from kubesage.core.policy.gpu_choice import lowest_index_gpus
from kubesage.core.state import ClusterState
from kubesage.core.types import PodRequest
from tests.builders import cluster, node, pod, set_gpu_free


def test_capacity_and_totals() -> None:
    state = cluster(node("a", gpus=8), node("b", gpus=2, model="T4"), node("c", gpus=0))
    assert state.num_nodes == 3
    assert state.max_gpus_per_node == 8
    assert state.gpu_capacity_milli_total == 10_000
    assert state.gpu_models == ("G2", "T4")
    assert state.gpu_capacity_milli[1].tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0]
    assert state.gpu_allocation_ratio == 0.0


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(InputError, match="duplicate node name 'a'"):
        cluster(node("a"), node("a"))


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (pod(cpu=1_000), [True, True, True]),
        (pod(cpu=100_000), [False, True, False]),
        (pod(memory=500_000), [False, True, False]),
        (pod(milli=600), [True, True, False]),
        (pod(milli=600, cpu=100_000), [False, True, False]),
        (pod(gpus=2), [True, False, False]),
        (pod(gpus=8), [False, False, False]),
        (pod(gpus=1, models=("T4",)), [False, True, False]),
        (pod(milli=300, models=("G2", "V100M32")), [True, False, False]),
        (pod(milli=300, models=("A100",)), [False, False, False]),
    ],
)
def test_feasible(request_: PodRequest, expected: list[bool]) -> None:
    state = cluster(
        node("a", cpu=64_000, memory=262_144, gpus=8),
        node("b", cpu=128_000, memory=1_048_576, gpus=2, model="T4"),
        node("c", cpu=64_000, memory=262_144, gpus=0),
    )
    set_gpu_free(state, 0, [1000, 1000, 500, 0, 0, 0, 0, 0])
    set_gpu_free(state, 1, [700, 1000])
    assert state.feasible(request_).tolist() == expected


def test_allocate_then_release_restores_exactly() -> None:
    state = cluster(node("a"), node("b", gpus=4, model="T4"))
    before = state.copy()
    share = pod("s", milli=300)
    whole = pod("w", gpus=2)
    share_at = state.placement(0, [3], share)
    whole_at = state.placement(1, [0, 2], whole)
    state.allocate(share, share_at)
    state.allocate(whole, whole_at)
    assert state.gpu_free_milli[0, 3] == 700
    assert state.gpu_whole_free_count.tolist() == [7, 2]
    assert state.gpu_max_free_milli.tolist() == [1000, 1000]
    assert state.gpu_pod_count[0, 0] == 1 and state.gpu_pod_count[1, 2] == 1
    assert state.gpu_allocated_milli_total == 2_300
    state.release(whole, whole_at)
    state.release(share, share_at)
    for name in ClusterState.FREE_ARRAYS:
        assert np.array_equal(getattr(state, name), getattr(before, name)), name
    assert state.gpu_free_milli_total == before.gpu_free_milli_total


@pytest.mark.parametrize(
    ("request_", "gpus", "message"),
    [
        (pod(cpu=200_000), [], "not enough CPU"),
        (pod(memory=10**7), [], "not enough memory"),
        (pod(milli=300), [9], "has no GPU 9"),
        (pod(gpus=2), [0], "needs 2 distinct GPUs"),
        (pod(gpus=2), [1, 1], "needs 2 distinct GPUs"),
        (pod(milli=300, models=("T4",)), [0], "GPU model"),
    ],
)
def test_allocate_refuses_what_does_not_fit(
    request_: PodRequest, gpus: list[int], message: str
) -> None:
    state = cluster(node("a", cpu=96_000))
    with pytest.raises(CapacityError, match=message):
        state.allocate(request_, state.placement(0, gpus, request_))
    assert state.gpu_allocated_milli_total == 0


def test_allocate_refuses_an_over_full_gpu() -> None:
    state = cluster(node("a"))
    set_gpu_free(state, 0, [400] + [1000] * 7)
    request = pod(milli=500)
    with pytest.raises(CapacityError, match="has 400 milli free, needs 500"):
        state.allocate(request, state.placement(0, [0], request))


def test_release_refuses_what_was_never_allocated() -> None:
    state = cluster(node("a"))
    request = pod(milli=500)
    with pytest.raises(CapacityError):
        state.release(request, state.placement(0, [0], request))


def test_placement_for_another_cluster_is_refused() -> None:
    state = cluster(node("a"))
    other = cluster(node("z"))
    request = pod()
    with pytest.raises(CapacityError, match="not in this cluster"):
        state.allocate(request, other.placement(0, [], request))


def test_copy_is_independent_and_shares_capacity() -> None:
    state = cluster(node("a"))
    clone = state.copy()
    request = pod(gpus=1)
    clone.allocate(request, clone.placement(0, [0], request))
    assert state.gpu_allocated_milli_total == 0
    assert clone.gpu_allocated_milli_total == 1000
    assert clone.gpu_capacity_milli is state.gpu_capacity_milli
    assert clone.lineage == state.lineage
    assert not state.gpu_capacity_milli.flags.writeable


def test_node_stamps_never_repeat_across_diverging_copies() -> None:
    state = cluster(node("a"))
    clone = state.copy()
    request = pod(gpus=1)
    state.allocate(request, state.placement(0, [0], request))
    clone.allocate(request, clone.placement(0, [1], request))
    assert state.node_version[0] != clone.node_version[0]


requests = st.builds(
    lambda cpu, memory, kind, milli, count: (
        pod(cpu=cpu, memory=memory)
        if kind == 0
        else pod(cpu=cpu, memory=memory, milli=milli)
        if kind == 1
        else pod(cpu=cpu, memory=memory, gpus=count)
    ),
    cpu=st.integers(0, 40_000),
    memory=st.integers(0, 200_000),
    kind=st.integers(0, 2),
    milli=st.integers(1, 999),
    count=st.integers(1, 4),
)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(requests, st.booleans(), st.integers(0, 10**6)), min_size=1, max_size=60
    )
)
def test_invariants_hold_under_random_allocate_and_release(
    steps: list[tuple[PodRequest, bool, int]],
) -> None:
    state: ClusterState = cluster(
        node("a", cpu=64_000, memory=262_144, gpus=8),
        node("b", cpu=32_000, memory=131_072, gpus=4, model="V100M16"),
        node("c", cpu=16_000, memory=65_536, gpus=0),
    )
    initial = state.copy()
    running = []
    for index, (request, release_one, pick) in enumerate(steps):
        if release_one and running:
            placed, placement = running.pop(pick % len(running))
            state.release(placed, placement)
        else:
            request = request.model_copy(update={"name": f"p{index}"})
            fits = np.flatnonzero(state.feasible(request))
            if fits.size:
                chosen = int(fits[pick % fits.size])
                placement = state.placement(
                    chosen, lowest_index_gpus(state, chosen, request), request
                )
                state.allocate(request, placement)
                running.append((request, placement))
            else:
                for candidate in range(state.num_nodes):
                    gpus = lowest_index_gpus(state, candidate, request)
                    if len(gpus) == request.num_gpu:
                        with pytest.raises(CapacityError):
                            state.allocate(request, state.placement(candidate, gpus, request))
        assert (state.cpu_free_milli >= 0).all() and (state.memory_free_mib >= 0).all()
        assert (state.cpu_free_milli <= state.cpu_capacity_milli).all()
        assert (
            (state.gpu_free_milli >= 0) & (state.gpu_free_milli <= state.gpu_capacity_milli)
        ).all()
        assert state.gpu_max_free_milli.tolist() == state.gpu_free_milli.max(axis=1).tolist()
        assert (
            state.gpu_whole_free_count.tolist()
            == (state.gpu_free_milli == 1000).sum(axis=1).tolist()
        )
        assert state.gpu_free_milli_total == int(state.gpu_free_milli.sum())
        assert state.gpu_free_milli_node.tolist() == state.gpu_free_milli.sum(axis=1).tolist()
        assert state.gpu_pod_kinds.tolist() == (state.gpu_pod_count > 0).sum(axis=1).tolist()
    for placed, placement in reversed(running):
        state.release(placed, placement)
    for name in ClusterState.FREE_ARRAYS:
        assert np.array_equal(getattr(state, name), getattr(initial, name)), name


def test_a_cordoned_gpu_takes_nothing_until_uncordoned() -> None:
    state = cluster(node("a", gpus=2))
    share = pod("s", gpus=1, milli=400)
    state.allocate(share, state.placement(0, [0], share))
    before = {name: getattr(state, name).copy() for name in ClusterState.FREE_ARRAYS}
    total_before = state.gpu_free_milli_total
    state.cordon_gpu(0, 0)
    state.cordon_gpu(0, 1)
    assert not state.feasible(pod("t", gpus=1, milli=100)).any()
    assert state.gpu_free_milli_total == 0
    copied = state.copy()
    with pytest.raises(InputError, match="already cordoned"):
        state.cordon_gpu(0, 0)
    state.uncordon_gpu(0, 0)
    state.uncordon_gpu(0, 1)
    for name, array in before.items():
        np.testing.assert_array_equal(getattr(state, name), array, err_msg=name)
    assert state.gpu_free_milli_total == total_before
    with pytest.raises(InputError, match="not cordoned"):
        state.uncordon_gpu(0, 0)
    # The copy keeps its own cordons.
    assert not copied.feasible(pod("t", gpus=1, milli=100)).any()
    copied.uncordon_gpu(0, 1)
    assert copied.feasible(pod("t", gpus=1, milli=100)).all()
