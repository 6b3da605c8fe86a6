"""A forecaster that knows the curve's shape: the same time one period ago, re-levelled.

Load that follows the day (a streaming job's input, an inference service's requests)
rises in the morning at about the same time as yesterday. A trend (:mod:`.trend`)
sees a ramp only once it has started, and a slope fitted to the ramp's first noisy
minute is barely significant; yesterday's curve says it is coming before it does.

For each series and each step ``t`` ahead, the forecast is the value observed one
period earlier (``t − period``; the nearest observed step within
:data:`GAP_STEPS` when that one is missing, as during a rescale's pause), plus the
level change: the mean of the last ``level_window`` observed steps minus the mean of
the same steps one period earlier — so a day that runs 20 % above yesterday's
level is forecast above yesterday's curve by the same amount. A series whose history
does not reach back a period (the first day), or with no observation near the
steps it needs, is forecast by ``fallback`` (a :class:`~.trend.TrendForecaster`
by default) — the forecast says how many series that was in its note. ``fit`` learns
nothing: the curve is read from the history given to ``predict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecast, Forecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.trend import TrendForecaster

GAP_STEPS = 2
"""How far (steps) from the step one period earlier an observation may be taken from."""


@dataclass
class SeasonalForecaster:
    """The value one ``period_s`` earlier, shifted by the change in level since."""

    period_s: float
    level_window: int = 12
    """Steps the level change is measured over (a minute at a 5 s tick)."""
    fallback: Forecaster = field(default_factory=TrendForecaster)
    """For series whose history is shorter than a period (and steps with no data)."""

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise InputError(f"a seasonal period must be > 0 s, got {self.period_s}")
        if self.level_window < 1:
            raise InputError(f"level_window must be ≥ 1 step, got {self.level_window}")

    @property
    def name(self) -> str:
        return "seasonal"

    def fit(self, panel: MetricPanel, until_step: int) -> None:
        """Nothing to learn here; the fallback learns what it learns."""
        self.fallback.fit(panel, until_step)

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        if horizon < 1:
            raise InputError(f"horizon must be ≥ 1, got {horizon}")
        period = round(self.period_s / history.step_s)
        if period < horizon:
            raise InputError(
                f"a seasonal period of {self.period_s:g} s is {period} steps of "
                f"{history.step_s:g} s, shorter than the horizon ({horizon} steps)"
            )
        fallback = self.fallback.predict(history, horizon)
        values = fallback.values.copy()
        steps, entities, metrics = history.values.shape
        seasonal = 0
        for entity in range(entities):
            for metric in range(metrics):
                series = history.values[:, entity, metric]
                observed = history.mask[:, entity, metric]
                forecast = self._series(series, observed, steps, period, horizon)
                if forecast is not None:
                    found = np.isfinite(forecast)
                    values[found, entity, metric] = forecast[found]
                    seasonal += 1
        short = entities * metrics - seasonal
        note = f"{short} series without a period of history: {fallback.model}" if short else ""
        return Forecast(values=values, model=self.name, note=note)

    def _series(
        self, series: FloatArray, observed: BoolArray, steps: int, period: int, horizon: int
    ) -> FloatArray | None:
        """One series' forecast (NaN where the period before has no data), or None when
        its history does not reach a period back."""
        if not observed.any() or int(np.argmax(observed)) > steps - period:
            return None  # the first observation is less than a period ago
        recent = np.arange(max(steps - self.level_window, 0), steps)
        before = recent - period
        keep = observed[recent] & (before >= 0)
        keep[keep] &= observed[before[keep]]
        level = float(np.mean(series[recent[keep]] - series[before[keep]])) if keep.any() else 0.0
        ahead = np.full(horizon, np.nan)
        for offset in range(horizon):
            value = _nearest(series, observed, steps + offset - period, steps)
            if value is not None:
                ahead[offset] = value + level
        return ahead


def _nearest(series: FloatArray, observed: BoolArray, step: int, steps: int) -> float | None:
    """The observed value at ``step``, else at the nearest observed step within
    :data:`GAP_STEPS` (earlier first); None when there is none."""
    for distance in range(GAP_STEPS + 1):
        for candidate in (step - distance, step + distance):
            if 0 <= candidate < steps and observed[candidate]:
                return float(series[candidate])
    return None
