"""Conformal upper quantiles for any point forecaster, and the loop adapter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import make_forecaster
from kubesage.core.forecast.loop_adapter import LoopForecaster
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.persistence import load_panel_forecaster, save_forecaster
from kubesage.core.forecast.quantile import (
    MIN_RESIDUALS,
    QuantileForecaster,
    calibrate,
    conformal_quantile,
)
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.forecast.windows import make_windows
from kubesage.core.loop.forecasts import ForecastPanel

TINY = TrainConfig(epochs=2, seed=3)


def test_the_conformal_rank_is_ceil_n_plus_one_q() -> None:
    residuals = np.arange(1.0, 100.0)  # 99 values
    assert conformal_quantile(residuals, 0.95) == 95.0
    assert conformal_quantile(residuals, 0.999) == 99.0  # beyond n: the largest
    assert conformal_quantile(np.ones(MIN_RESIDUALS - 1), 0.9) == 0.0


def test_calibration_covers_fresh_residuals_per_metric_and_horizon() -> None:
    rng = np.random.default_rng(0)
    shape = (400, 3, 5, 2)  # windows, horizon, entities, metrics
    spread = np.array([1.0, 10.0])  # metric 1 is ten times noisier
    scale = np.broadcast_to(np.array([[1.0, 10.0]]), (400, 5, 2))
    truth = rng.normal(0, 1, shape) * spread
    calibration = calibrate(np.zeros(shape), truth, np.ones(shape, bool), scale, 0.9)
    assert calibration.step_offsets.shape == (3, 2) and calibration.peak_offsets.shape == (2,)
    assert np.allclose(calibration.step_offsets, 1.2816, atol=0.1)  # N(0, 1)'s 90 %
    fresh = rng.normal(0, 1, shape) * spread
    covered = fresh <= calibration.step_offsets[None, :, None, :] * spread
    assert covered.mean() == pytest.approx(0.9, abs=0.02)
    peak_covered = fresh.max(axis=1) <= calibration.peak_offsets[None, None] * spread
    assert peak_covered.mean() == pytest.approx(0.9, abs=0.02)
    assert np.all(calibration.peak_offsets > calibration.step_offsets.max(axis=0))


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> MetricPanel:
    folder = tmp_path_factory.mktemp("metrics")
    return read_panel(write_synthetic_metrics(folder, entities=8, steps=300, seed=1))


@pytest.mark.parametrize("scale", ["series", "window"])
def test_a_point_forecaster_gets_an_upper_quantile_that_covers_later_peaks(
    panel: MetricPanel, scale: str
) -> None:
    forecaster = QuantileForecaster(
        make_forecaster("last_value", horizon=5),
        quantile=0.9,
        scale=scale,  # type: ignore[arg-type]
    )
    forecaster.fit(panel, 200)
    assert forecaster.note == ""
    origins = np.arange(200, panel.steps - 5)
    peaks = forecaster.peaks(panel, origins)
    future = origins[:, None] + np.arange(5)[None, :]
    observed = panel.mask[future].any(axis=1)
    true_peak = np.where(panel.mask[future], panel.values[future], -np.inf).max(axis=1)
    coverage = (true_peak <= peaks)[observed].mean()
    assert coverage > 0.8
    point = forecaster.point
    assert point.normaliser is not None
    windows = make_windows(panel, point.normaliser, origins, history=24, horizon=5)
    assert np.mean(peaks >= point.forecast_windows(windows).max(axis=1)) > 0.9


def test_a_fitted_forecaster_recalibrates_at_another_quantile_as_a_fresh_fit_would(
    panel: MetricPanel,
) -> None:
    fitted = QuantileForecaster(make_forecaster("last_value", horizon=5), quantile=0.8)
    fitted.fit(panel, 200)
    fresh = QuantileForecaster(make_forecaster("last_value", horizon=5), quantile=0.97)
    fresh.fit(panel, 200)
    moved = fitted.at_quantile(0.97)
    assert moved.point is fitted.point and moved.quantile == 0.97
    assert moved.calibration is not None and fresh.calibration is not None
    assert fitted.calibration is not None and fitted.calibration.quantile == 0.8
    np.testing.assert_array_equal(moved.calibration.peak_offsets, fresh.calibration.peak_offsets)
    np.testing.assert_array_equal(moved.calibration.step_offsets, fresh.calibration.step_offsets)
    assert (moved.calibration.peak_offsets >= fitted.calibration.peak_offsets).all()
    assert (moved.calibration.peak_offsets > fitted.calibration.peak_offsets).any()
    with pytest.raises(InputError, match="quantile"):
        fitted.at_quantile(1.0)
    with pytest.raises(InputError, match="before fit"):
        QuantileForecaster(make_forecaster("last_value", horizon=5)).at_quantile(0.9)


def test_too_little_calibration_data_is_said(panel: MetricPanel) -> None:
    forecaster = QuantileForecaster(make_forecaster("last_value", horizon=5))
    forecaster.fit(panel, 30)
    assert "uncalibrated" in forecaster.note


def test_the_loop_reads_a_quantile_forecast_through_the_adapter(panel: MetricPanel) -> None:
    fitted = QuantileForecaster(
        make_forecaster("lstm", horizon=3, config=TrainConfig(epochs=1, batch_size=32)),
        quantile=0.95,
    )
    fitted.fit(panel, 200)
    adapter = LoopForecaster(
        fitted, panel.entities, panel.metrics, rename={"duty": "gpu_duty_cycle"}
    )
    duty = panel.metrics.index("gpu_duty_cycle")
    history = {
        (entity, "duty"): [float(v) for v in panel.values[170:200, n, duty]]
        for n, entity in enumerate(panel.entities[:3])
    }
    loop = ForecastPanel(horizon_steps=2, history=30)
    loop.use(adapter)
    for tick in range(30):  # one sample per series and tick
        for (entity, metric), values in history.items():
            loop.observe(entity, metric, values[tick])
        if tick == 29:
            loop.observe("unknown-pod", "duty", 5.0)
        loop.refresh()
    assert loop.source == "lstm@q0.95"  # the source says the level
    upper = fitted.predict(adapter.panel_of(history), 2)
    assert upper.model == "lstm@q0.95"
    assert loop.predict(panel.entities[0], "duty") == pytest.approx(upper.values[1, 0, duty])
    point = fitted.point.predict(adapter.panel_of(history), 2)
    assert upper.values[1, 0, duty] > point.values[1, 0, duty]  # the quantile lies above
    assert loop.predict("unknown-pod", "duty") == 5.0  # not the model's: the last value


def test_a_saved_upper_quantile_loads_back_and_forecasts_the_same(
    panel: MetricPanel, tmp_path: Path
) -> None:
    upper = QuantileForecaster(make_forecaster("lstm", config=TINY, horizon=5), quantile=0.9)
    upper.fit(panel, 150)
    path = save_forecaster(upper, tmp_path / "upper.safetensors", train_until_s=0.0)
    loaded, header = load_panel_forecaster(path)
    assert isinstance(loaded, QuantileForecaster) and header["quantile"]["q"] == 0.9
    history = panel.head(180)
    assert np.array_equal(loaded.predict(history, 5).values, upper.predict(history, 5).values)
    assert loaded.predict(history, 5).model == "lstm@q0.9"
    point, _ = load_panel_forecaster(save_forecaster(upper.point, path, train_until_s=0.0))
    assert not isinstance(point, QuantileForecaster)  # a point model stays a point model


def test_an_uncalibrated_or_malformed_quantile_file_is_refused(
    panel: MetricPanel, tmp_path: Path
) -> None:
    unfitted = QuantileForecaster(make_forecaster("lstm", config=TINY, horizon=5))
    with pytest.raises(InputError, match="only a fitted forecaster"):
        save_forecaster(unfitted, tmp_path / "x.safetensors", train_until_s=0.0)
    upper = QuantileForecaster(make_forecaster("lstm", config=TINY, horizon=5), quantile=0.9)
    upper.fit(panel, 150)
    path = save_forecaster(upper, tmp_path / "upper.safetensors", train_until_s=0.0)
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as handle:
        metadata = handle.metadata()
    tensors["quantile.step_offsets"] = tensors["quantile.step_offsets"][:2]  # 2 steps, not 5
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(InputError, match=r"malformed quantile part .*do not fit 4 metrics"):
        load_panel_forecaster(path)


def test_forecasts_at_several_quantiles_are_those_of_each_recalibration(
    panel: MetricPanel,
) -> None:
    fitted = QuantileForecaster(make_forecaster("last_value", horizon=5), quantile=0.9)
    fitted.fit(panel, 200)
    point = fitted.point
    assert point.normaliser is not None
    windows = make_windows(panel, point.normaliser, np.arange(200, 280), history=24, horizon=5)
    at = fitted.forecast_windows_at(windows, (0.5, 0.9, 0.99))
    assert list(at) == [0.5, 0.9, 0.99]
    for q, forecast in at.items():
        np.testing.assert_allclose(forecast, fitted.at_quantile(q).forecast_windows(windows))
    assert (at[0.99] >= at[0.9]).all() and (at[0.9] >= at[0.5]).all()
