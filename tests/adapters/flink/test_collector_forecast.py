"""The collector's demand history for a forecaster: full windows only, on a time grid."""

from __future__ import annotations

import pytest

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.core.forecast.trend import TrendForecaster


def collector(horizon: int) -> ObservationCollector:
    return ObservationCollector(
        FlinkClient("http://unused.test"),
        "job",
        forecaster=TrendForecaster(window=12),
        forecast_horizon=horizon,
    )


def test_a_pause_reads_as_time_passing_not_as_a_jump() -> None:
    observed = collector(horizon=1)
    # 1 rec/s more every 5 s tick, then a 20 s pause (a rescale) and the same line after.
    for time_s in (0.0, 5.0, 10.0, 15.0, 35.0, 40.0):
        forecast = observed._forecast("src", 10.0 + time_s / 5.0, time_s)
    assert forecast == pytest.approx(10.0 + 45.0 / 5.0)


def test_demand_over_a_partial_window_stays_out_of_the_history() -> None:
    observed = collector(horizon=2)
    for time_s in (0.0, 5.0, 10.0):
        observed._forecast("src", 20.0, time_s)
    # Just after a restart the backlog drains: what a partial window measures is not demand.
    assert observed._forecast("src", 400.0, None) == pytest.approx(20.0)
    assert observed._forecast("src", 20.0, 15.0) == pytest.approx(20.0)
