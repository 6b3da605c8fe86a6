"""MIG instances in the core's ClusterState, and MIG-aware placement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesage.adapters.gpu_training.mig import catalogue, mig_request
from kubesage.core.errors import CapacityError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.policy.gpu_choice import best_mig_slot
from kubesage.core.state import ClusterState
from kubesage.core.types import NodeSpec, PodRequest

H100 = "H100-80GB"


def mig_node(name: str, gpus: int = 2) -> NodeSpec:
    return NodeSpec(
        name=name,
        cpu_milli=96_000,
        memory_mib=393_216,
        gpu_count=gpus,
        gpu_model=H100,
        mig_enabled=True,
    )


def plain_node(name: str) -> NodeSpec:
    return NodeSpec(name=name, cpu_milli=96_000, memory_mib=393_216, gpu_count=2, gpu_model=H100)


def place(state: ClusterState, request: PodRequest, node: int, gpu: int, start: int) -> None:
    state.allocate(request, state.placement(node, [gpu], request, mig_start=start))


def test_mig_nodes_take_mig_requests_only() -> None:
    state = ClusterState([mig_node("mig"), plain_node("plain")])
    mig = mig_request("m", H100, "3g.40gb")
    whole = PodRequest(name="w", cpu_milli=1_000, memory_mib=1_024, num_gpu=1, gpu_milli=1000)
    cpu = PodRequest(name="c", cpu_milli=1_000, memory_mib=1_024)
    assert state.feasible(mig).tolist() == [True, False]
    assert state.feasible(whole).tolist() == [False, True]
    assert state.feasible(cpu).tolist() == [True, True]
    with pytest.raises(CapacityError, match="MIG mode"):
        state.allocate(whole, state.placement(0, [0], whole))


def test_slots_are_taken_and_given_back_exactly() -> None:
    state = ClusterState([mig_node("n", gpus=1)])
    big = mig_request("big", H100, "4g.40gb")
    half = mig_request("half", H100, "3g.40gb")
    place(state, big, 0, 0, 0)
    assert state.mig_free_slices[0, 0] == 0b11110000
    assert state.mig_free_compute[0, 0] == 3
    assert state.gpu_free_milli[0, 0] == 500
    with pytest.raises(CapacityError, match="does not fit at slice 0"):
        place(state, half, 0, 0, 0)
    with pytest.raises(CapacityError, match="cannot start at slice 2"):
        place(state, half, 0, 0, 2)
    place(state, half, 0, 0, 4)
    assert state.mig_free_slices[0, 0] == 0 and state.mig_free_compute[0, 0] == 0
    assert not state.feasible(mig_request("one", H100, "1g.10gb"))[0]
    state.release(big, state.placement(0, [0], big, mig_start=0))
    state.release(half, state.placement(0, [0], half, mig_start=4))
    assert state.mig_free_slices[0, 0] == 0xFF and state.mig_free_compute[0, 0] == 7
    with pytest.raises(CapacityError, match="releasing"):
        state.release(half, state.placement(0, [0], half, mig_start=4))


def test_one_media_engine_instance_per_gpu() -> None:
    # A GPU has one set of media engines: a second 1g.10gb+me does not fit beside the
    # first (there is room for its slices), a plain 1g.10gb does; released, it fits.
    state = ClusterState([mig_node("n", gpus=2)])
    first = mig_request("first", H100, "1g.10gb+me")
    place(state, first, 0, 0, 0)
    second = mig_request("second", H100, "1g.10gb+me")
    assert state.mig_slots(second.mig)[0].any(axis=1).tolist() == [False, True]  # type: ignore[arg-type]
    with pytest.raises(CapacityError, match="media engines of GPU 0 on n"):
        place(state, second, 0, 0, 1)
    place(state, mig_request("plain", H100, "1g.10gb"), 0, 0, 1)
    state.release(first, state.placement(0, [0], first, mig_start=0))
    place(state, second, 0, 0, 0)


def test_small_instances_fill_used_gpus_before_breaking_empty_ones() -> None:
    state = ClusterState([mig_node("n", gpus=2)])
    place(state, mig_request("a", H100, "3g.40gb"), 0, 1, 0)  # GPU 1: slices 0-3 used
    assert best_mig_slot(state, 0, mig_request("b", H100, "1g.10gb")) == (1, 6)
    assert best_mig_slot(state, 0, mig_request("c", H100, "7g.80gb")) == (0, 0)


def test_migpacking_prefers_the_node_that_loses_least() -> None:
    state = ClusterState([mig_node("empty"), mig_node("used")])
    place(state, mig_request("a", H100, "4g.40gb"), 1, 0, 0)
    policy = make_policy("migpacking", PolicyContext(workload=[mig_request("w", H100, "1g.10gb")]))
    decision = policy.decide(state, mig_request("b", H100, "2g.20gb"))
    assert decision.placement is not None
    assert (
        decision.placement.node,
        decision.placement.gpu_indices,
        decision.placement.mig_start,
    ) == (
        "used",
        (0,),
        4,
    )


def test_every_policy_places_mig_requests_on_valid_slots() -> None:
    for name in ("random", "bestfit", "k8s-default", "mostallocated", "migpacking"):
        state = ClusterState([mig_node("a"), mig_node("b")])
        policy = make_policy(name, PolicyContext(workload=[mig_request("w", H100, "1g.10gb")]))
        placed = 0
        for i, profile in enumerate(["3g.40gb", "2g.20gb", "1g.10gb", "1g.20gb"] * 3):
            request = mig_request(f"p{i}", H100, profile)
            decision = policy.decide(state, request)
            if decision.placement is not None:
                state.allocate(request, decision.placement)
                placed += 1
        assert placed >= 8, name


profiles = st.sampled_from([p.name for p in catalogue(H100).profiles if "+me" not in p.name])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(profiles, st.booleans(), st.integers(0, 1000)), min_size=1, max_size=40))
def test_mig_bits_and_milli_stay_consistent(steps: list[tuple[str, bool, int]]) -> None:
    state = ClusterState([mig_node("a"), mig_node("b", gpus=4)])
    running = []
    for i, (profile, release, pick) in enumerate(steps):
        if release and running:
            request, placement = running.pop(pick % len(running))
            state.release(request, placement)
            continue
        request = mig_request(f"p{i}", H100, profile)
        nodes = np.flatnonzero(state.feasible(request))
        if nodes.size:
            node = int(nodes[pick % nodes.size])
            gpu, start = best_mig_slot(state, node, request)
            placement = state.placement(node, [gpu], request, mig_start=start)
            state.allocate(request, placement)
            running.append((request, placement))
    used_bits = np.vectorize(lambda m: 8 - int(m).bit_count())(state.mig_free_slices)
    real = state.gpu_capacity_milli > 0
    assert (state.gpu_free_milli[real] == 1000 - 125 * used_bits[real]).all()
    assert ((state.mig_free_compute >= 0) & (state.mig_free_compute <= 7)).all()
