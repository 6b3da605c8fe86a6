"""The sticky packing rule and the GPU-sharing replay: capacity, stickiness, draining,
the oracle bound, missing data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.forecast.packing import UNPLACED, pack
from kubesage.core.forecast.packing_replay import (
    Usage,
    decision_steps,
    distance_to_oracle,
    history_peak,
    oracle,
    replay,
    usage_of,
    whole_gpu,
)
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.synthetic import write_synthetic_metrics

CAPACITY = np.array([100.0, 80.0])


def loads(demand: np.ndarray, gpu: np.ndarray) -> dict[int, np.ndarray]:
    return {int(g): demand[gpu == g].sum(axis=0) for g in np.unique(gpu[gpu != UNPLACED])}


@pytest.mark.parametrize("seed", range(5))
def test_every_gpu_holds_no_more_than_its_capacity(seed: int) -> None:
    rng = np.random.default_rng(seed)
    demand = rng.uniform(0, 1, (40, 2)) ** 2 * CAPACITY
    present = rng.random(40) < 0.9
    previous = np.where(rng.random(40) < 0.5, rng.integers(0, 6, 40), UNPLACED)
    packing = pack(demand, CAPACITY, present, previous)
    assert np.all((packing.gpu != UNPLACED) == present)
    for total in loads(demand, packing.gpu).values():
        assert np.all(total <= CAPACITY + 1e-9)
    # First-fit decreasing never needs more than ~11/9 of the volume bound, plus one.
    assert packing.gpus_used <= np.ceil(1.25 * (demand[present] / CAPACITY).sum(axis=0).max()) + 1


def test_an_unchanged_demand_moves_nobody() -> None:
    rng = np.random.default_rng(1)
    demand = rng.uniform(5, 40, (20, 2))
    present = np.ones(20, dtype=bool)
    first = pack(demand, CAPACITY, present)
    again = pack(demand, CAPACITY, present, first.gpu)
    assert again.moved == 0
    assert np.array_equal(again.gpu, first.gpu)


def test_an_overfull_gpu_sheds_its_largest_pod_only() -> None:
    demand = np.array([[30.0, 10.0], [60.0, 10.0], [20.0, 10.0], [10.0, 10.0]])
    previous = np.array([0, 0, 0, 1])
    packing = pack(demand, CAPACITY, np.ones(4, dtype=bool), previous)
    assert packing.moved == 1
    assert packing.gpu[0] == packing.gpu[2] == 0  # the two small ones stay
    assert packing.gpu[1] != 0


def test_a_gpu_is_drained_when_its_pods_fit_elsewhere() -> None:
    # Two GPUs, one pod each, both small now: one GPU is freed by one move.
    demand = np.array([[10.0, 10.0], [10.0, 10.0]])
    packing = pack(demand, CAPACITY, np.ones(2, dtype=bool), np.array([0, 1]))
    assert packing.gpus_used == 1 and packing.moved == 1


def test_a_pod_larger_than_a_gpu_gets_one_to_itself() -> None:
    demand = np.array([[150.0, 10.0], [10.0, 10.0]])
    packing = pack(np.minimum(demand, CAPACITY), CAPACITY, np.ones(2, dtype=bool))
    assert packing.gpu[0] != packing.gpu[1]


def test_bad_reservations_are_refused() -> None:
    with pytest.raises(InputError, match="non-negative"):
        pack(np.array([[np.nan, 1.0]]), CAPACITY, np.ones(1, dtype=bool))


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> MetricPanel:
    folder = tmp_path_factory.mktemp("metrics")
    return read_panel(write_synthetic_metrics(folder, entities=10, steps=120, seed=2))


def test_the_oracle_never_overloads_and_whole_gpus_cost_most(panel: MetricPanel) -> None:
    usage = usage_of(panel)
    capacity = np.array([100.0, 100e9])
    origins = decision_steps(30, panel.steps, 5)
    best = replay(usage, origins, 5, oracle(usage, origins, 5), capacity)
    alone = replay(usage, origins, 5, whole_gpu(usage, origins, capacity), capacity)
    peak = replay(usage, origins, 5, history_peak(usage, origins, 5), capacity)
    assert best.overload_minutes == 0.0 and alone.overload_minutes == 0.0
    assert alone.migrations == 0
    assert best.gpu_hours < peak.gpu_hours <= alone.gpu_hours
    assert alone.gpu_hours == pytest.approx(alone.pod_hours)
    assert distance_to_oracle(best, best, peak.overload_minutes) == 0.0


def test_overload_is_counted_on_the_true_usage() -> None:
    # Two pods at 60 % duty, reserved at 50 % each: one GPU, overloaded every step.
    values = np.zeros((10, 2, 2))
    values[:, :, 0] = 60.0
    alive = np.ones((10, 2), dtype=bool)
    usage = Usage(values=values, alive=alive, observed=np.ones((10, 2, 2), bool), step_s=60.0)
    origins = decision_steps(0, 10, 5)
    result = replay(usage, origins, 5, np.full((2, 2, 2), [50.0, 10.0]), CAPACITY)
    assert result.gpu_hours == pytest.approx(10 / 60)
    assert result.overload_minutes == pytest.approx(10.0)


def test_missing_reservations_keep_the_last_and_absent_pods_hold_no_gpu() -> None:
    values = np.full((10, 3, 2), 10.0)
    alive = np.ones((10, 3), dtype=bool)
    alive[5:, 2] = False  # pod 2 leaves after the first interval
    usage = Usage(values=values, alive=alive, observed=np.ones((10, 3, 2), bool), step_s=60.0)
    origins = decision_steps(0, 10, 5)
    wanted = np.array(
        [
            [[60.0, 10.0], [60.0, 10.0], [10.0, 10.0]],
            [[np.nan, np.nan], [60.0, 10.0], [10.0, 10.0]],  # pod 0: nothing known now
        ]
    )
    result = replay(usage, origins, 5, wanted, CAPACITY)
    # Pod 0 keeps 60 %: pods 0 and 1 never share; pod 2 is placed in the first interval only.
    assert result.gpu_hours == pytest.approx(10 * 2 / 60)
    assert result.pod_hours == pytest.approx((5 * 3 + 5 * 2) / 60)
    # A pod never reserved before, without a reservation, takes a whole GPU.
    lone = replay(usage, origins[:1], 5, np.full((1, 3, 2), np.nan), CAPACITY)
    assert lone.gpu_hours == pytest.approx(3 * 5 / 60)


def test_missing_cells_of_live_pods_carry_the_last_sample(tmp_path: Path) -> None:
    panel = read_panel(
        write_synthetic_metrics(tmp_path, entities=4, steps=60, drop_fraction=0.2, seed=5)
    )
    usage = usage_of(panel)
    m = panel.metrics.index("gpu_memory_used_bytes")
    gap = np.argwhere(panel.alive[1:] & ~panel.mask[1:, :, m] & panel.mask[:-1, :, m])[0]
    step, pod = int(gap[0]) + 1, int(gap[1])
    assert usage.values[step, pod, 1] == panel.values[step - 1, pod, m]
