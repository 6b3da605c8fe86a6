"""Extraction of "allocation at X % arrived", as the paper's analysis script does it."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.sim.metrics import arrived_percent, discrete_curve, downsample, value_at


def test_arrived_percent_rounds_half_to_even() -> None:
    arrived = np.array([0, 4_950, 5_050, 10_050, 12_345])
    assert arrived_percent(arrived, 10_000).tolist() == [0, 50, 50, 100, 123]


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (100.0, 91.0),  # mean of the two events at exactly 100
        (102.0, 95.0),  # no event at 102: events within ±1 (101 and 103)
        (110.0, None),  # nothing near
    ],
)
def test_value_at(x: float, expected: float | None) -> None:
    arrived = np.array([99.0, 100.0, 100.0, 101.0, 103.0])
    values = np.array([80.0, 90.0, 92.0, 94.0, 96.0])
    assert value_at(arrived, values, x) == expected


def test_discrete_curve_skips_gaps() -> None:
    xs, ys = discrete_curve(np.array([0.0, 1.0, 5.0]), np.array([0.0, 10.0, 50.0]), upto=7)
    assert xs == [0, 1, 2, 4, 5, 6]
    assert ys == [0.0, 10.0, 10.0, 50.0, 50.0, 50.0]


def test_downsample_keeps_ends() -> None:
    times = np.arange(1_000, dtype=float)
    xs, ys = downsample(times, times * 2, points=11)
    assert len(xs) == 11 and xs[0] == 0 and xs[-1] == 999 and ys[-1] == 1_998
