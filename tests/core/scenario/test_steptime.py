"""The step-time model: compute and ring AllReduce per step, busbw on the DRTG with
contention on shared uplinks."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from kubesage.core.errors import InputError
from kubesage.core.scenario.cluster import scenario_topology
from kubesage.core.scenario.model import Phase, PhaseKind, TrainingSpec
from kubesage.core.scenario.steptime import (
    Parallelism,
    allreduce_time_s,
    compute_time_s,
    min_gpus,
    parallelism,
    ring_busbw,
    ring_busbw_with_contention,
    step_time_s,
    tokens_per_s,
)
from kubesage.core.topology.graph import DRTG


def training(params_b: float, tokens: int = 1_048_576, gpus: int = 8) -> TrainingSpec:
    return TrainingSpec(
        model_params_b=params_b,
        gpus_per_member=min(gpus, 8),
        members=max(1, gpus // 8),
        min_members=1,
        phases=(Phase(0.0, 3600.0, PhaseKind.TRAIN),),
        global_batch_tokens=tokens,
    )


@pytest.fixture(scope="module")
def h100() -> DRTG:
    return scenario_topology(16)  # 4 racks of 4 nodes, 2 zones, 2:1 rack uplinks


@pytest.fixture(scope="module")
def h200() -> DRTG:
    return scenario_topology(8, template="dgx-h200")  # 2 racks, 4:1 rack uplinks


def node_ring(drtg: DRTG, *nodes: int) -> list[int]:
    return [int(g) for node in nodes for g in drtg.node_gpus(node)]


def test_one_node_beats_eight_nodes_across_racks(h100: DRTG) -> None:
    packed = ring_busbw(h100, node_ring(h100, 0))
    spread = ring_busbw(h100, [8 * node for node in range(8)])  # one GPU on each of 8 nodes
    assert packed == pytest.approx(450.0)  # NVSwitch: 18 NVLink 4 links of 25 GB/s
    assert spread == pytest.approx(50.0)  # one 400 Gb/s NIC per GPU pair
    spec = training(7)
    assert step_time_s(spec, 8, "H100-80GB", packed) < step_time_s(spec, 8, "H100-80GB", spread)
    assert tokens_per_s(spec, 8, "H100-80GB", packed) > tokens_per_s(spec, 8, "H100-80GB", spread)


def test_rings_sharing_a_rack_uplink_slow_each_other(h200: DRTG) -> None:
    # Whole nodes 0 and 4 (rack-00 and rack-01): 4 NICs of 50 GB/s each way out, and a 4:1
    # rack uplink of 200 GB/s that one such ring fills alone.
    first, second = node_ring(h200, 0, 4), node_ring(h200, 1, 5)
    alone = ring_busbw(h200, first)
    shared = ring_busbw_with_contention(h200, {"a": first, "b": second})
    assert alone == pytest.approx(200.0)
    assert shared == pytest.approx({"a": 100.0, "b": 100.0})
    inside_racks = ring_busbw_with_contention(h200, {"a": first, "c": node_ring(h200, 2, 3)})
    assert inside_racks["a"] == pytest.approx(alone)


def test_uplink_shares_follow_the_oversubscription(h100: DRTG) -> None:
    # 2:1 rack uplinks of 400 GB/s: two 200 GB/s rings fit, a third slows all three.
    rings = {f"job{i}": node_ring(h100, i, 4 + i) for i in range(3)}
    two = ring_busbw_with_contention(h100, {k: rings[k] for k in ("job0", "job1")})
    three = ring_busbw_with_contention(h100, rings)
    assert two == pytest.approx({"job0": 200.0, "job1": 200.0})
    assert three == pytest.approx({name: 400.0 / 3 for name in rings})


def test_one_gpu_job_has_no_allreduce(h100: DRTG) -> None:
    spec = training(1, gpus=1)
    assert ring_busbw(h100, [5]) == math.inf
    assert allreduce_time_s(spec, 1, "H100-80GB", math.inf) == 0.0
    assert step_time_s(spec, 1, "H100-80GB", 1.0) == compute_time_s(spec, 1, "H100-80GB")


def test_7b_on_8_h100_by_hand() -> None:
    spec = training(7, tokens=1_048_576)
    # 7 B × 16 bytes = 112 GB of training state > 80 GB: sharded, 1.5× the gradient traffic.
    assert parallelism(7, "H100-80GB") is Parallelism.ZERO3
    assert min_gpus(7, "H100-80GB") == 2
    # 6 · 7e9 · 1 048 576 FLOPs = 4.404e16; 8 GPUs · 989e12 · 0.40 = 3.1648e15 FLOP/s.
    assert compute_time_s(spec, 8, "H100-80GB") == pytest.approx(13.9156, rel=1e-4)
    # 14e9 gradient bytes · 2·7/8 = 24.5e9 bytes a hop; at 450 GB/s 0.05444 s, × 1.5.
    assert allreduce_time_s(spec, 8, "H100-80GB", 450.0) == pytest.approx(0.081667, rel=1e-4)
    # Spread over nodes (50 GB/s): 24.5e9 / 50e9 = 0.49 s, × 1.5.
    assert allreduce_time_s(spec, 8, "H100-80GB", 50.0) == pytest.approx(0.735)
    assert step_time_s(spec, 8, "H100-80GB", 50.0) == pytest.approx(13.9156 + 0.735, rel=1e-4)
    # Full overlap hides the shorter one.
    full = step_time_s(spec, 8, "H100-80GB", 50.0, overlap=1.0)
    assert full == pytest.approx(13.9156, rel=1e-4)


def test_small_model_is_data_parallel_and_h200_holds_more() -> None:
    assert parallelism(5, "H100-80GB") is Parallelism.DATA_PARALLEL  # 80 GB exactly
    assert parallelism(7, "H200-141GB") is Parallelism.DATA_PARALLEL  # 112 ≤ 141 GB
    spec = training(1)
    # 2e9 bytes · 2·7/8 / 100 GB/s, no ZeRO factor.
    assert allreduce_time_s(spec, 8, "H100-80GB", 100.0) == pytest.approx(0.035)


@pytest.mark.parametrize(
    "call",
    [
        lambda: step_time_s(training(7), 0, "H100-80GB", 100.0),
        lambda: step_time_s(training(7), 8, "A100-40GB", 100.0),
        lambda: step_time_s(training(7), 8, "H100-80GB", 0.0),
        lambda: step_time_s(training(7), 8, "H100-80GB", math.nan),
        lambda: step_time_s(training(7), 8, "H100-80GB", 100.0, overlap=1.5),
        lambda: step_time_s(training(-1), 8, "H100-80GB", 100.0),
        lambda: step_time_s(training(7, tokens=0), 8, "H100-80GB", 100.0),
        lambda: ring_busbw(scenario_topology(1), [0, 8]),
        lambda: ring_busbw(scenario_topology(1), []),
        lambda: ring_busbw_with_contention(scenario_topology(1), {"a": [0, 1], "b": [1, 2]}),
    ],
)
def test_bad_inputs_are_input_errors(call: Callable[[], object]) -> None:
    with pytest.raises(InputError):
        call()
