"""The least-absolute-error linear baseline: what its fit minimises, and how it forecasts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kubesage.core.forecast.baselines import least_absolute
from kubesage.core.forecast.forecaster import make_forecaster
from kubesage.core.forecast.panel import read_panel
from kubesage.core.forecast.synthetic import write_synthetic_metrics


def test_the_fit_follows_the_bulk_of_the_data_not_its_outliers() -> None:
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=400), np.ones(400)])
    y = 2.0 * x[:, 0] + 1.0
    y[:120] += rng.uniform(50, 100, size=120)  # 30 % of the rows far above the line
    assert least_absolute(x, y) == pytest.approx([2.0, 1.0], abs=0.05)
    squares = np.linalg.lstsq(x, y, rcond=None)[0]
    assert abs(squares[1] - 1.0) > 10  # least squares is pulled up by them


def test_row_weights_decide_which_rows_it_fits() -> None:
    x = np.ones((4, 1))
    y = np.array([0.0, 0.0, 10.0, 10.0])
    heavy_high = np.array([1.0, 1.0, 3.0, 3.0])
    heavy_low = heavy_high[::-1].copy()
    assert least_absolute(x, y, heavy_high)[0] == pytest.approx(10.0, abs=0.01)
    assert least_absolute(x, y, heavy_low)[0] == pytest.approx(0.0, abs=0.01)


def test_a_steady_series_is_forecast_as_itself(tmp_path: Path) -> None:
    panel = read_panel(write_synthetic_metrics(tmp_path, entities=4, steps=120))
    panel.values[:] = np.arange(1, 5, dtype=float)[None, :, None] * 10.0  # each entity flat
    panel.mask[:] = True
    forecaster = make_forecaster("linear_lad", horizon=5)
    forecaster.fit(panel, 100)
    forecast = forecaster.predict(panel.head(110), 5)
    assert forecast.model == "linear_lad"
    assert forecast.values == pytest.approx(panel.values[:5], abs=1e-6)


def test_too_little_history_falls_back_to_the_last_value_and_says_so(
    tmp_path: Path,
) -> None:
    panel = read_panel(write_synthetic_metrics(tmp_path, entities=4, steps=120))
    forecaster = make_forecaster("linear_lad", horizon=5)
    forecaster.fit(panel, 30)
    assert "cold start" in forecaster.fallback_reason
    forecast = forecaster.predict(panel.head(60), 5)
    assert forecast.model == "last_value" and "cold start" in forecast.note
