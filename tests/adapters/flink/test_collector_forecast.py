"""The collector's demand history for a forecaster: full windows only, on a time grid,
as long as the forecaster needs (a season for a seasonal one)."""

from __future__ import annotations

import pytest

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.demand_forecast import DEFAULT_HISTORY_STEPS, DemandForecast
from kubesage.core.errors import InputError
from kubesage.core.forecast.seasonal import SeasonalForecaster
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


def daily(time_s: float, season_s: float) -> float:
    """Quiet until a third of the day, then a ramp to 40 rec/s at half of it."""
    phase = (time_s % season_s) / season_s
    return 8.0 + max(0.0, min(1.0, (phase - 1 / 3) * 6)) * 32.0


@pytest.mark.parametrize("keeps_a_season", [True, False])
def test_a_seasonal_forecast_keeps_a_season_of_history_and_sees_the_ramp_coming(
    keeps_a_season: bool,
) -> None:
    season_s = 3_600.0  # 720 steps of 5 s: more than the default history
    forecast = DemandForecast("seasonal", horizon_s=30.0, season_s=season_s)
    observed = ObservationCollector(
        FlinkClient("http://unused.test"),
        "job",
        forecaster=forecast.forecaster(5.0),
        forecast_horizon=forecast.horizon_steps(5.0),
        history_steps=forecast.history_steps(5.0) if keeps_a_season else DEFAULT_HISTORY_STEPS,
    )
    ramp_starts = season_s + season_s / 3  # the second day's ramp
    time_s, predicted = 0.0, None
    while time_s < ramp_starts - 10.0:  # up to 10 s before it: flat so far today
        predicted = observed._forecast("src", daily(time_s, season_s), time_s)
        time_s += 5.0
    assert predicted is not None
    ahead = daily(ramp_starts + 15.0, season_s)  # where the ramp is 25 s from now
    if keeps_a_season:
        assert predicted > ahead - 1.0  # yesterday's ramp, seen coming
    else:
        assert predicted == pytest.approx(8.0)  # a day is not kept: the trend, still flat


def test_without_a_season_the_history_is_the_default_length() -> None:
    assert DemandForecast("trend").history_steps(5.0) == DEFAULT_HISTORY_STEPS
    # A day at a 5 s tick, the trend's minute past it and the horizon.
    assert DemandForecast("seasonal", season_s=86_400.0).history_steps(5.0) == 17_280 + 12 + 7


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"kind": "seasonal"}, "needs --season-s"),
        ({"kind": "trend", "season_s": 60.0}, "--season-s is for --forecast seasonal"),
        ({"kind": "psychic"}, "--forecast must be one of none, trend, seasonal"),
        ({"kind": "trend", "horizon_s": 0.0}, "--forecast-horizon-s must be > 0"),
    ],
)
def test_bad_forecast_options_say_which_option(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InputError, match=words):
        DemandForecast(**kwargs)  # type: ignore[arg-type]


def test_none_is_reactive_and_each_kind_its_forecaster() -> None:
    assert DemandForecast().forecaster(5.0) is None
    assert isinstance(DemandForecast("trend").forecaster(5.0), TrendForecaster)
    seasonal = DemandForecast("seasonal", season_s=600.0).forecaster(5.0)
    assert isinstance(seasonal, SeasonalForecaster) and seasonal.period_s == 600.0
