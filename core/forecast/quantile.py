"""High-quantile forecasts from any point forecaster, calibrated on held-out hours.

Decisions that must not overload a resource want an upper quantile of the coming
load, not the median the point forecasters are trained for. :class:`QuantileForecaster`
wraps any :class:`~kubesage.core.forecast.forecaster.WindowedForecaster` (ST-GCN,
LSTM, last value, …) and adds split-conformal offsets learnt on the last hours of
its training data, which the point model did not train on:

- the point model is fitted on the steps before ``until_step − calibration steps``;
- on every window whose forecast starts in the calibration steps, the residual
  ``(truth − forecast) / σ`` is taken in a scale ``σ`` of that series, so a pod that
  is quiet gets a small margin and a busy one a large one. ``σ`` is, by default
  (``scale="series"``), the series' training standard deviation (the normaliser's);
  with ``scale="window"`` it is the spread of the window's own input steps plus a
  floor of ``WINDOW_SCALE_FLOOR`` training standard deviations (locally adaptive
  conformal: tighter margins where load calmed down — on the GenAI replay it saved
  GPU-hours but overloaded far more, so it is not the default);
- per metric and horizon step, the offset is the conformal ``q``-quantile of those
  residuals (the ``⌈(n + 1) q⌉``-th smallest); per metric, a second offset does the
  same for the *peak* over the whole horizon (``max truth − max forecast``), which
  is what a packing decision needs and is not the maximum of per-step quantiles.

The upper forecast is then ``point + offset · σ``. With too few calibration
residuals (fewer than ``MIN_RESIDUALS``) an offset is 0 and ``note`` says so. Only
observed truths enter a residual; the point model's own cold start is kept.

A fitted wrapper keeps its calibration windows' forecasts and truths:
:meth:`QuantileForecaster.at_quantile` recalibrates it at another quantile without
refitting the point model.

The wrapper satisfies the ``Forecaster`` protocol (``predict`` returns the per-step
upper quantile), so whatever reads a point forecast can read a quantile one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecast, NeuralForecaster, WindowedForecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.training import ProgressCallback
from kubesage.core.forecast.windows import Windows, earlier, thinned_origins

DEFAULT_QUANTILE = 0.95
DEFAULT_CALIBRATION_FRACTION = 0.2
"""Share of the training steps (the latest) held out to calibrate the offsets."""
MIN_RESIDUALS = 20
WINDOW_SCALE_FLOOR = 0.1
"""The window scale's floor, in training standard deviations: a flat window still
gets a margin."""
ScaleKind = Literal["window", "series"]


def residual_scale(windows: Windows, std: FloatArray, kind: ScaleKind) -> FloatArray:
    """The scale ``(B, N, M)`` residuals are measured in, in each metric's units."""
    batch = windows.inputs.shape[0]
    if kind == "series":
        return np.broadcast_to(std, (batch, *std.shape)).copy()
    metrics = std.shape[1]
    values = windows.inputs[..., :metrics].astype(np.float64)  # normalised, 0 where missing
    seen = windows.inputs[..., metrics:] > 0.5
    count = seen.sum(axis=1)
    mean = np.where(seen, values, 0.0).sum(axis=1) / np.maximum(count, 1)
    variance = np.where(seen, (values - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(count, 1)
    return np.asarray(std[None] * np.sqrt(variance + WINDOW_SCALE_FLOOR**2))


def check_quantile(quantile: float, what: str = "the quantile") -> float:
    """``quantile`` when it is strictly between 0 and 1; InputError naming ``what`` if not."""
    if not 0.0 < quantile < 1.0:
        raise InputError(f"{what} must be between 0 and 1 (e.g. 0.95), got {quantile:g}")
    return quantile


def conformal_quantile(residuals: FloatArray, quantile: float) -> float:
    """The split-conformal ``quantile`` of ``residuals``: the ``⌈(n + 1) q⌉``-th smallest
    (the largest when that rank is beyond ``n``); 0 for fewer than ``MIN_RESIDUALS``."""
    values = np.sort(np.asarray(residuals, dtype=np.float64).ravel())
    if values.size < MIN_RESIDUALS:
        return 0.0
    rank = min(values.size, math.ceil((values.size + 1) * quantile))
    return float(values[rank - 1])


@dataclass(frozen=True)
class Calibration:
    """Offsets in each series' training scale, added to the point forecast."""

    quantile: float
    step_offsets: FloatArray
    """``(H, M)``: per horizon step and metric."""
    peak_offsets: FloatArray
    """``(M,)``: for the peak over the ``H`` steps, per metric."""
    residuals: int
    """The fewest observed truths behind any step offset (per metric and horizon step)."""


def calibrate(
    forecast: FloatArray,
    truth: FloatArray,
    mask: BoolArray,
    scale: FloatArray,
    quantile: float,
) -> Calibration:
    """Offsets from forecasts and truths ``(B, H, N, M)`` (``mask``: observed truths) in
    the per-window ``scale`` ``(B, N, M)``."""
    check_quantile(quantile)
    horizon, metrics = forecast.shape[1], forecast.shape[3]
    residual = (truth - forecast) / scale[:, None]
    step = np.array(
        [
            [
                conformal_quantile(residual[:, h, :, m][mask[:, h, :, m]], quantile)
                for m in range(metrics)
            ]
            for h in range(horizon)
        ]
    ).reshape(horizon, metrics)
    seen: BoolArray = np.asarray(mask.any(axis=1))  # (B, N, M): the window observed a truth
    true_peak = np.where(mask, truth, -np.inf).max(axis=1)
    peak_residual = (true_peak - forecast.max(axis=1)) / scale
    peak = np.array(
        [
            conformal_quantile(peak_residual[:, :, m][seen[:, :, m]], quantile)
            for m in range(metrics)
        ]
    )
    return Calibration(
        quantile=quantile,
        step_offsets=step,
        peak_offsets=peak,
        residuals=int(mask.sum(axis=(0, 2)).min()) if mask.size else 0,
    )


@dataclass
class QuantileForecaster:
    """``point`` with conformal upper-quantile offsets (see the module docstring)."""

    point: WindowedForecaster
    quantile: float = DEFAULT_QUANTILE
    calibration_fraction: float = DEFAULT_CALIBRATION_FRACTION
    scale: ScaleKind = "series"
    calibration: Calibration | None = None
    note: str = ""
    _residual_data: tuple[FloatArray, FloatArray, BoolArray, FloatArray] | None = field(
        default=None, repr=False, compare=False
    )
    """The calibration windows' forecasts, truths, mask and scale, for :meth:`at_quantile`."""

    @property
    def name(self) -> str:
        return self.point.name

    @property
    def horizon(self) -> int:
        return self.point.horizon

    def fit(
        self, panel: MetricPanel, until_step: int, on_epoch: ProgressCallback | None = None
    ) -> None:
        """Fit the point model before the calibration steps, then calibrate on them
        (``on_epoch``: a neural point model's progress)."""
        if not 0.0 < self.calibration_fraction < 1.0:
            raise InputError(
                f"the calibration fraction must be in (0, 1), got {self.calibration_fraction}"
            )
        held_out = max(1, round(until_step * self.calibration_fraction))
        fit_until = until_step - held_out
        if on_epoch is not None and isinstance(self.point, NeuralForecaster):
            self.point.fit(panel, fit_until, on_epoch)
        else:
            self.point.fit(panel, fit_until)
        assert self.point.normaliser is not None
        horizon = self.point.horizon
        # Windows whose targets all fall inside the calibration steps (before until_step),
        # thinned on a large cluster as training windows are.
        origins = thinned_origins(
            np.arange(max(fit_until, self.point.history), until_step - horizon + 1),
            len(panel.entities),
            self.point.max_window_series,
            MIN_RESIDUALS,
        )
        forecast_shape = (0, horizon, len(panel.entities), len(panel.metrics))
        if origins.size:
            windows = self.point.windows_at(panel, origins)
            forecast = self.point.forecast_windows(windows)
            future = origins[:, None] + np.arange(horizon)[None, :]
            truth, mask = panel.values[future], panel.mask[future]
            scale = self._window_scale(windows)
        else:
            forecast = np.zeros(forecast_shape)
            truth, mask = forecast, np.zeros(forecast_shape, dtype=bool)
            scale = np.ones((0, *forecast_shape[2:]))
        self._residual_data = (forecast, truth, mask, scale)
        self.calibration = calibrate(forecast, truth, mask, scale, self.quantile)
        reasons = [self.point.fallback_reason] if self.point.fallback_reason else []
        if self.calibration.residuals < MIN_RESIDUALS:
            reasons.append(
                f"uncalibrated: {origins.size} calibration window(s) before step {until_step}; "
                "the upper quantile is the point forecast"
            )
        self.note = "; ".join(reasons)

    def at_quantile(self, quantile: float) -> QuantileForecaster:
        """This fitted forecaster calibrated at another ``quantile``: the same point
        model object (refitting either refits both) and calibration windows, new
        offsets (no refit)."""
        if self._residual_data is None:
            raise InputError("a quantile forecast before fit()")
        return replace(
            self,
            quantile=quantile,
            calibration=calibrate(*self._residual_data, quantile),
        )

    def _scale(self, windows: Windows) -> FloatArray:
        if self.calibration is None or self.point.normaliser is None:
            raise InputError("a quantile forecast before fit()")
        return self._window_scale(windows)

    def _window_scale(self, windows: Windows) -> FloatArray:
        """:func:`residual_scale` over the point model's own history, however long the
        windows are (an online highway's are longer)."""
        assert self.point.normaliser is not None
        recent = earlier(windows, 0, self.point.history)
        return residual_scale(recent, self.point.normaliser.std, self.scale)

    def forecast_windows(self, windows: Windows) -> FloatArray:
        """Per-step upper quantiles ``(B, H, N, M)`` in each metric's units."""
        scale = self._scale(windows)
        assert self.calibration is not None
        point = self.point.forecast_windows(windows)
        offsets = self.calibration.step_offsets[None, :, None, :]
        return np.asarray(point + offsets * scale[:, None])

    def forecast_windows_at(
        self, windows: Windows, quantiles: Sequence[float]
    ) -> dict[float, FloatArray]:
        """:meth:`forecast_windows` at each of ``quantiles``, recalibrated as
        :meth:`at_quantile` does; the point model forecasts once."""
        if self._residual_data is None:
            raise InputError("a quantile forecast before fit()")
        scale = self._scale(windows)[:, None]
        point = self.point.forecast_windows(windows)
        return {
            q: np.asarray(
                point + calibrate(*self._residual_data, q).step_offsets[None, :, None, :] * scale
            )
            for q in quantiles
        }

    def peak_windows(self, windows: Windows) -> FloatArray:
        """The upper quantile of each series' peak over the horizon ``(B, N, M)``."""
        scale = self._scale(windows)
        assert self.calibration is not None
        point = self.point.forecast_windows(windows)
        return np.asarray(point.max(axis=1) + self.calibration.peak_offsets[None, None] * scale)

    def peaks(self, panel: MetricPanel, origins: np.ndarray) -> FloatArray:
        """:meth:`peak_windows` for forecasts starting at each of ``origins`` (each sees
        only the steps before it)."""
        return self.peak_windows(self.point.windows_at(panel, np.asarray(origins)))

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        """The per-step upper quantile of the ``horizon`` steps after ``history``."""
        point = self.point.predict(history, horizon)
        if self.calibration is None or self.point.normaliser is None:
            raise InputError("a quantile forecast before fit()")
        if history.steps >= self.point.history:
            scale = self._scale(self.point.windows_at(history, np.array([history.steps])))[0]
        else:  # cold start: no full window to measure the spread on
            scale = self.point.normaliser.std
        upper = point.values + self.calibration.step_offsets[:horizon, None, :] * scale[None]
        note = "; ".join(part for part in (point.note, self.note) if part)
        return Forecast(
            values=np.asarray(upper), model=f"{point.model}@q{self.quantile:g}", note=note
        )
