"""The FGD fragmentation measure on hand-computed cases, and the typical-pod distribution."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.state.fragmentation import FragmentationMeasure, TypicalPod, typical_pods
from tests.builders import cluster, node, pod, set_gpu_free

MODELS = ("G2", "T4")


def fragment(typical: list[TypicalPod], cpu: int, free: list[int], model: int = 0) -> float:
    measure = FragmentationMeasure(typical, MODELS)
    return float(measure.node_fragment(np.array([cpu]), np.array([free]), np.array([model]))[0])


def share(milli: int, p: float = 1.0, cpu: int = 1_000, models: tuple[str, ...] = ()) -> TypicalPod:
    return TypicalPod(cpu_milli=cpu, gpu_milli=milli, num_gpu=1, gpu_models=models, probability=p)


def whole(count: int, p: float = 1.0, cpu: int = 1_000) -> TypicalPod:
    return TypicalPod(cpu_milli=cpu, gpu_milli=1000, num_gpu=count, gpu_models=(), probability=p)


@pytest.mark.parametrize(
    ("typical", "cpu", "free", "expected"),
    [
        # The paper simulator's unit-test case: CPU too short (Q4), so all 2,700 idle count.
        ([share(465, 0.0933, cpu=6_000)], 1_000, [200, 1000, 1000, 500], 0.0933 * 2_700),
        # Enough CPU (Q3): only the GPU with less than 465 free is a fragment.
        ([share(465, 0.0933, cpu=6_000)], 8_000, [200, 1000, 1000, 500], 0.0933 * 200),
        # Whole-GPU pods cannot use partly used GPUs: 200 + 500.
        ([whole(1)], 8_000, [200, 1000, 1000, 500], 700.0),
        # A 2-GPU pod fits on the two free GPUs: the partial ones are fragments.
        ([whole(2)], 8_000, [200, 1000, 1000, 500], 700.0),
        # Only one wholly free GPU: a 2-GPU pod does not fit (Q2), so everything counts.
        ([whole(2)], 8_000, [1000, 500, 0, 0], 1_500.0),
        # CPU-only typical pods always count the idle GPU (the simulator's XL/XR classes).
        ([TypicalPod(1_000, 0, 0, (), 1.0)], 8_000, [1000, 300, 0, 0], 1_300.0),
        # A typical pod restricted to another model cannot use this node at all.
        ([share(100, models=("T4",))], 8_000, [1000, 300, 0, 0], 1_300.0),
        # A mixture is the probability-weighted sum: 0.5·700 + 0.5·200.
        ([whole(1, 0.5), share(465, 0.5)], 8_000, [200, 1000, 1000, 500], 450.0),
        # A full node has nothing idle, so nothing fragmented.
        ([whole(1), share(100)], 8_000, [0, 0, 0, 0], 0.0),
    ],
)
def test_node_fragment_hand_computed(
    typical: list[TypicalPod], cpu: int, free: list[int], expected: float
) -> None:
    assert fragment(typical, cpu, free) == pytest.approx(expected)


def test_fragment_ignores_gpu_order() -> None:
    typical = [whole(1, 0.3), share(465, 0.4), share(810, 0.3)]
    a = fragment(typical, 8_000, [200, 1000, 1000, 500])
    b = fragment(typical, 8_000, [1000, 500, 200, 1000])
    assert a == pytest.approx(b)


def test_node_without_gpus_has_no_fragment() -> None:
    measure = FragmentationMeasure([share(300)], MODELS)
    value = measure.node_fragment(
        np.array([8_000]), np.zeros((1, 4), dtype=np.int64), np.array([-1])
    )
    assert value.tolist() == [0.0]


def test_cluster_fragmentation_ratio() -> None:
    state = cluster(node("a", gpus=4), node("b", gpus=4))
    set_gpu_free(state, 0, [500, 1000, 1000, 1000])
    measure = FragmentationMeasure([whole(1)], state.gpu_models)
    amount, ratio = measure.cluster_fragmentation(state)
    assert amount == pytest.approx(500.0)
    assert ratio == pytest.approx(500.0 / 7_500.0)


def test_measure_refuses_a_cluster_with_other_models() -> None:
    measure = FragmentationMeasure([whole(1)], ("T4",))
    with pytest.raises(InputError, match="GPU models"):
        measure.of_state(cluster(node("a")))


def test_typical_pods_keep_the_popular_prefix_and_renormalise() -> None:
    workload = (
        [pod(f"a{i}", cpu=1_000, gpus=1) for i in range(5)]
        + [pod(f"b{i}", cpu=2_000, milli=500) for i in range(3)]
        + [pod("c", cpu=3_000)]
        + [pod("d", cpu=4_000, milli=200)]
    )
    eighty = typical_pods(workload, coverage=0.8)
    assert [(t.cpu_milli, t.gpu_milli, t.num_gpu) for t in eighty] == [
        (1_000, 1000, 1),
        (2_000, 500, 1),
    ]
    assert [t.probability for t in eighty] == pytest.approx([5 / 8, 3 / 8])
    everything = typical_pods(workload, coverage=0.95)
    assert len(everything) == 4
    assert sum(t.probability for t in everything) == pytest.approx(1.0)
    # Equal counts are ordered by shape, descending: the 4,000 m pod before the 3,000 m one.
    assert [t.cpu_milli for t in everything[2:]] == [4_000, 3_000]


def test_typical_pods_do_not_depend_on_workload_order() -> None:
    workload = [pod(f"p{i}", cpu=1_000 * (i % 4), milli=100 * (1 + i % 3)) for i in range(30)]
    assert typical_pods(workload) == typical_pods(list(reversed(workload)))


def test_typical_pods_can_leave_out_cpu_pods() -> None:
    workload = [pod("cpu-only"), pod("gpu", gpus=1)]
    assert [t.num_gpu for t in typical_pods(workload, include_cpu_pods=False)] == [1]


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5])
def test_typical_pods_reject_bad_coverage(coverage: float) -> None:
    with pytest.raises(InputError, match="coverage"):
        typical_pods([pod()], coverage=coverage)


def test_typical_pods_need_pods() -> None:
    with pytest.raises(InputError, match="empty workload"):
        typical_pods([])
