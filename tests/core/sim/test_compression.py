"""Time compression: gaps shrink, durations stay, peak load reaches its target."""

from __future__ import annotations

import pytest

from kubesage.core.errors import InputError
from kubesage.core.sim.compression import compress_arrivals, compress_to_peak_load, peak_load
from kubesage.core.types import PodRequest


def timed(name: str, gpus: int, start: float, end: float | None) -> PodRequest:
    return PodRequest(
        name=name,
        cpu_milli=1_000,
        memory_mib=1_024,
        num_gpu=gpus,
        gpu_milli=1000,
        creation_time_s=start,
        deletion_time_s=end,
    )


PODS = [
    timed("a", 2, 100.0, 150.0),
    timed("b", 1, 200.0, 260.0),
    timed("c", 4, 1_100.0, 1_110.0),
    timed("d", 1, 1_100.0, None),
]


def test_peak_load_counts_overlap_and_departures_first_at_equal_times() -> None:
    assert peak_load(PODS, gpu_capacity_milli=8_000) == pytest.approx(5 / 8)
    back_to_back = [timed("x", 4, 0.0, 10.0), timed("y", 4, 10.0, 20.0)]
    assert peak_load(back_to_back, gpu_capacity_milli=4_000) == pytest.approx(1.0)


def test_compression_divides_gaps_and_keeps_durations_and_order() -> None:
    squeezed = compress_arrivals(PODS, 10.0)
    assert [p.creation_time_s for p in squeezed] == [100.0, 110.0, 200.0, 200.0]
    assert [p.deletion_time_s for p in squeezed] == [150.0, 170.0, 210.0, None]
    assert [p.name for p in squeezed] == [p.name for p in PODS]


def test_compress_to_peak_load_reaches_the_target_with_the_smallest_factor() -> None:
    squeezed, factor = compress_to_peak_load(PODS, 8_000, target=6 / 8)
    assert peak_load(squeezed, 8_000) >= 6 / 8
    # First to reach 6 GPUs: b (1 GPU, arriving at 100 + 100/f, for 60 s) overlapping
    # c + d (5 GPUs at 100 + 1000/f), so 900/f < 60: f just above 15.
    assert factor == pytest.approx(15.0, rel=1e-6)
    assert peak_load(compress_arrivals(PODS, factor * 0.99), 8_000) < 6 / 8
    unchanged, one = compress_to_peak_load(PODS, 8_000, target=0.5)
    assert one == 1.0 and unchanged == PODS


def test_unreachable_targets_and_bad_input_are_named() -> None:
    with pytest.raises(InputError, match=r"peaks at 1\.00 .* cannot reach 1\.10"):
        compress_to_peak_load(PODS, 8_000, target=1.1)
    with pytest.raises(InputError, match="factor must be positive"):
        compress_arrivals(PODS, 0.0)
    with pytest.raises(InputError, match="'n' has no creation time"):
        peak_load([PodRequest(name="n", cpu_milli=1, memory_mib=1)], 1_000)
