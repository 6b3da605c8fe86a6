"""A forecaster that extends the recent trend: a least-squares line through the last steps.

What a live autoscaler needs ahead of a ramp: it sees a few minutes of one job's demand
at most, so a model that learns from windows of history (the ridge ``linear``
baseline needs 16 + 2 × horizon + history − 1 steps before it leaves its cold start,
minutes at a tick of seconds) has nothing to learn from yet. This one learns nothing:
each series' next steps continue the straight line fitted to its last ``window``
observed steps (the last value when fewer than two are observed). With
``min_t_stat`` it extrapolates only a slope the data supports: when the slope is
within ``min_t_stat`` standard errors of 0 (noise around a level, as measured rates
are), the forecast is the fitted level, not noise projected ahead. It satisfies the
``Forecaster`` protocol (``fit`` is a no-op).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecast
from kubesage.core.forecast.panel import MetricPanel

DEFAULT_WINDOW = 12
"""Steps the line is fitted over: a minute at the Flink autoscaler's 5 s tick."""


@dataclass
class TrendForecaster:
    """The least-squares line through each series' last ``window`` observed steps."""

    window: int = DEFAULT_WINDOW
    min_t_stat: float = 0.0
    """A slope within this many standard errors of 0 is taken as flat (0: always a line)."""

    def __post_init__(self) -> None:
        if self.window < 2:
            raise InputError(f"a trend needs a window of ≥ 2 steps, got {self.window}")

    @property
    def name(self) -> str:
        return "trend"

    def fit(self, panel: MetricPanel, until_step: int) -> None:
        """Nothing to learn: the line is fitted on the history given to ``predict``."""

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        if horizon < 1:
            raise InputError(f"horizon must be ≥ 1, got {horizon}")
        steps, entities, metrics = history.values.shape
        start = max(steps - self.window, 0)
        ahead = np.arange(steps, steps + horizon, dtype=np.float64)
        values = np.zeros((horizon, entities, metrics))
        short = 0
        for entity in range(entities):
            for metric in range(metrics):
                observed = history.mask[start:, entity, metric]
                times = np.arange(start, steps, dtype=np.float64)[observed]
                series = history.values[start:, entity, metric][observed]
                if series.size >= 2:
                    values[:, entity, metric] = self._line(times, series, ahead)
                else:
                    short += 1
                    values[:, entity, metric] = series[-1] if series.size else 0.0
        note = (
            f"{short} series with fewer than 2 observed steps in the last {self.window}: last value"
            if short
            else ""
        )
        return Forecast(values=values, model=self.name, note=note)

    def _line(self, times: FloatArray, series: FloatArray, ahead: FloatArray) -> FloatArray:
        slope, intercept = np.polyfit(times, series, 1)
        if self.min_t_stat > 0 and series.size > 2:
            residuals = series - (intercept + slope * times)
            spread = float(np.sum((times - times.mean()) ** 2))
            error = math.sqrt(float(np.sum(residuals**2)) / (series.size - 2) / spread)
            if abs(slope) < self.min_t_stat * error:
                level = float(np.mean(series))
                return np.full_like(ahead, level)
        return np.asarray(intercept + slope * ahead, dtype=np.float64)
