"""The trend forecaster: the recent straight line, continued."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.trend import TrendForecaster


def series_panel(*series: list[float], observed: list[bool] | None = None) -> MetricPanel:
    values = np.asarray(series, dtype=np.float64).T.reshape(len(series[0]), len(series), 1)
    mask = np.ones_like(values, dtype=bool)
    if observed is not None:
        mask[:, 0, 0] = observed
    return MetricPanel(
        entities=tuple(f"e{i}" for i in range(len(series))),
        metrics=("records_per_s",),
        start_s=0.0,
        step_s=5.0,
        values=values,
        mask=mask,
        alive=np.ones(values.shape[:2], dtype=bool),
    )


def test_is_a_forecaster() -> None:
    assert isinstance(TrendForecaster(), Forecaster)


def test_continues_the_line_of_the_last_window_only() -> None:
    # Flat at 10 for long, then rising 2 per step: only the last 4 steps count.
    history = series_panel([10.0] * 20 + [12.0, 14.0, 16.0, 18.0], [5.0] * 24)
    forecaster = TrendForecaster(window=4)
    forecaster.fit(history, history.steps)
    forecast = forecaster.predict(history, 3)
    assert forecast.values.shape == (3, 2, 1)
    np.testing.assert_allclose(forecast.values[:, 0, 0], [20.0, 22.0, 24.0])
    np.testing.assert_allclose(forecast.values[:, 1, 0], [5.0, 5.0, 5.0])
    assert forecast.model == "trend" and forecast.note == ""


def test_unobserved_steps_are_left_out_and_too_few_give_the_last_value() -> None:
    gappy = series_panel([1.0, 99.0, 3.0, 4.0], observed=[True, False, True, True])
    np.testing.assert_allclose(TrendForecaster(window=4).predict(gappy, 1).values[0, 0], [5.0])
    lone = series_panel([1.0, 2.0, 7.0], observed=[False, False, True])
    forecast = TrendForecaster(window=3).predict(lone, 2)
    np.testing.assert_allclose(forecast.values[:, 0, 0], [7.0, 7.0])
    assert "last value" in forecast.note


@pytest.mark.parametrize(("window", "horizon"), [(1, 3), (4, 0)])
def test_rejects_a_window_or_horizon_too_small(window: int, horizon: int) -> None:
    with pytest.raises(InputError):
        TrendForecaster(window=window).predict(series_panel([1.0, 2.0]), horizon)


def test_a_slope_within_the_noise_is_taken_as_flat() -> None:
    noisy = series_panel([10.0, 14.0, 9.0, 13.0, 11.0, 12.0])
    line = TrendForecaster(window=6).predict(noisy, 2).values[:, 0, 0]
    gated = TrendForecaster(window=6, min_t_stat=2.0).predict(noisy, 2).values[:, 0, 0]
    assert line[1] > line[0]  # least squares projects the noise's slope ahead
    np.testing.assert_allclose(gated, [11.5, 11.5])
    rising = series_panel([10.0, 12.1, 13.9, 16.0, 18.2, 19.9])
    assert TrendForecaster(window=6, min_t_stat=2.0).predict(rising, 1).values[0, 0, 0] > 21.0
