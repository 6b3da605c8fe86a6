"""The seasonal forecaster: the same time one period ago, re-levelled."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecaster
from kubesage.core.forecast.seasonal import SeasonalForecaster
from kubesage.core.forecast.trend import TrendForecaster
from tests.core.forecast.test_trend import series_panel

PERIOD = 24  # steps of 5 s: a 120 s "day"


def day(steps: int, *, level: float = 0.0) -> list[float]:
    """Quiet, a ramp to a peak, back down: one value a step, ``steps`` long."""
    shape = (
        [10.0] * 8 + [10.0 + 10.0 * i for i in range(1, 9)] + [90.0 - 10.0 * i for i in range(8)]
    )
    return [shape[i % PERIOD] + level for i in range(steps)]


def test_is_a_forecaster() -> None:
    assert isinstance(SeasonalForecaster(period_s=PERIOD * 5.0), Forecaster)


def test_sees_yesterdays_ramp_coming_where_a_trend_sees_nothing() -> None:
    # A day and the quiet start of the next: the ramp is 1 step ahead.
    history = series_panel(day(PERIOD + 7))
    seasonal = SeasonalForecaster(period_s=PERIOD * 5.0).predict(history, 4)
    trend = TrendForecaster(window=6, min_t_stat=2.0).predict(history, 4)
    assert seasonal.values[:, 0, 0].tolist() == day(PERIOD + 11)[-4:] == [10.0, 20.0, 30.0, 40.0]
    assert trend.values[:, 0, 0].tolist() == pytest.approx([10.0] * 4)  # flat so far
    assert seasonal.model == "seasonal" and seasonal.note == ""


def test_a_day_above_yesterday_is_forecast_above_yesterdays_curve() -> None:
    history = series_panel(day(PERIOD) + day(7, level=5.0))  # today 5 above yesterday
    forecast = SeasonalForecaster(period_s=PERIOD * 5.0, level_window=4).predict(history, 3)
    assert forecast.values[:, 0, 0].tolist() == pytest.approx([15.0, 25.0, 35.0])


def test_the_same_curve_some_steps_late_is_not_read_as_a_change_of_level() -> None:
    # Today runs yesterday's curve 2 steps late, and the last steps are on the ramp:
    # step by step they lie 20 below yesterday's, which is a shift, not a level.
    history = series_panel([*day(PERIOD), 10.0, 10.0, *day(10)])
    exact = SeasonalForecaster(period_s=PERIOD * 5.0, level_window=3)
    slack = SeasonalForecaster(period_s=PERIOD * 5.0, level_window=3, time_slack_s=10.0)
    assert exact.predict(history, 1).values[0, 0, 0] == pytest.approx(60.0 - 20.0)
    assert slack.predict(history, 1).values[0, 0, 0] == pytest.approx(60.0)  # yesterday's


def test_a_change_of_level_beyond_the_slack_still_counts_by_its_excess() -> None:
    # The quiet morning runs 5 above (then 6 below) yesterday's, which was flat for
    # longer than the slack: no shift in time explains that, so it is a level.
    quiet = [10.0] * 16 + [10.0 + 10.0 * i for i in range(1, 9)]
    history = series_panel(quiet + [15.0] * 12)
    forecaster = SeasonalForecaster(period_s=24 * 5.0, level_window=4, time_slack_s=5.0)
    assert forecaster.predict(history, 2).values[:, 0, 0].tolist() == pytest.approx([15.0] * 2)
    assert forecaster.predict(series_panel(quiet + [4.0] * 12), 1).values[0, 0, 0] == 4.0


def test_without_a_period_of_history_the_fallback_forecasts() -> None:
    history = series_panel(day(PERIOD - 3), [7.0] * (PERIOD - 3))
    fallback = TrendForecaster(window=4)
    forecast = SeasonalForecaster(period_s=PERIOD * 5.0, fallback=fallback).predict(history, 2)
    assert np.array_equal(forecast.values, fallback.predict(history, 2).values)
    assert forecast.note == "2 series without a period of history: trend"


def test_a_gap_a_period_ago_is_bridged_by_the_nearest_observation_or_left_to_the_fallback() -> None:
    values = day(PERIOD + 7)
    observed = [True] * len(values)
    observed[7] = False  # the step one period before the first forecast step (31 - 24)
    history = series_panel(values, observed=observed)
    forecast = SeasonalForecaster(period_s=PERIOD * 5.0).predict(history, 1)
    assert forecast.values[0, 0, 0] == 10.0  # step 7 (earlier first), the nearest observed

    for step in range(5, 12):  # a rescale's pause longer than the gap allowed
        observed[step] = False
    history = series_panel(values, observed=observed)
    forecaster = SeasonalForecaster(period_s=PERIOD * 5.0)
    forecast = forecaster.predict(history, 2)
    fallback = forecaster.fallback.predict(history, 2)
    assert forecast.values[0, 0, 0] == fallback.values[0, 0, 0]


@pytest.mark.parametrize(
    ("period_s", "slack_s", "horizon", "match"),
    [
        (0.0, 0.0, 1, "must be > 0 s"),
        (10.0, 0.0, 3, "shorter than the horizon"),
        (40.0, -1.0, 1, "time_slack_s must be ≥ 0 s"),
        (40.0, 20.0, 1, "must be under half the seasonal period"),
    ],
)
def test_bad_periods_are_refused_with_the_reason(
    period_s: float, slack_s: float, horizon: int, match: str
) -> None:
    with pytest.raises(InputError, match=match):
        forecaster = SeasonalForecaster(period_s=period_s, time_slack_s=slack_s)
        forecaster.predict(series_panel(day(40)), horizon)
