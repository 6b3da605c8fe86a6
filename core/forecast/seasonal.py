"""A forecaster that knows the curve's shape: the same time one period ago, re-levelled.

Load that follows the day (a streaming job's input, an inference service's requests)
rises in the morning at about the same time as yesterday. A trend (:mod:`.trend`)
sees a ramp only once it has started, and a slope fitted to the ramp's first noisy
minute is barely significant; yesterday's curve says it is coming before it does.

For each series and each step ``t`` ahead, the forecast is the value observed one
period earlier (``t − period``; the nearest observed step within
:data:`GAP_STEPS` when that one is missing, as during a rescale's pause), plus the
level change: how far the last ``level_window`` observed steps lie outside what the
day before held around the same time (within ``time_slack_s`` either side), on
average — so a day that runs 20 % above yesterday's level is forecast above
yesterday's curve by the same amount, while a day that runs the same curve some
seconds later or earlier is not. Without the slack a shift in time reads as a
level on every slope: a ramp climbing 0.5 units a second, measured 25 s later than
the day before, would lift the whole forecast by 12.5 units, the peak included.
A series whose history does not reach back a period (the first day), or with no
observation near the steps it needs, is forecast by ``fallback`` (a
:class:`~.trend.TrendForecaster` by default) — the forecast says how many series
that was in its note. ``fit`` learns
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
    time_slack_s: float = 0.0
    """How far in time (either side) a value of the period before may be matched to a
    recent one before the difference counts as a change of level."""
    fallback: Forecaster = field(default_factory=TrendForecaster)
    """For series whose history is shorter than a period (and steps with no data)."""

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise InputError(f"a seasonal period must be > 0 s, got {self.period_s}")
        if self.level_window < 1:
            raise InputError(f"level_window must be ≥ 1 step, got {self.level_window}")
        if not self.time_slack_s >= 0:
            raise InputError(f"time_slack_s must be ≥ 0 s, got {self.time_slack_s}")

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
        slack = round(self.time_slack_s / history.step_s)
        if 2 * slack >= period:
            raise InputError(
                f"time_slack_s ({self.time_slack_s:g} s) must be under half the seasonal "
                f"period ({self.period_s:g} s)"
            )
        fallback = self.fallback.predict(history, horizon)
        values = fallback.values.copy()
        _, entities, metrics = history.values.shape
        seasonal = 0
        for entity in range(entities):
            for metric in range(metrics):
                series = history.values[:, entity, metric]
                observed = history.mask[:, entity, metric]
                forecast = self._series(series, observed, period, slack, horizon)
                if forecast is not None:
                    found = np.isfinite(forecast)
                    values[found, entity, metric] = forecast[found]
                    seasonal += 1
        short = entities * metrics - seasonal
        note = f"{short} series without a period of history: {fallback.model}" if short else ""
        return Forecast(values=values, model=self.name, note=note)

    def _series(
        self, series: FloatArray, observed: BoolArray, period: int, slack: int, horizon: int
    ) -> FloatArray | None:
        """One series' forecast (NaN where the period before has no data), or None when
        its history does not reach a period back."""
        steps = len(series)
        if not observed.any() or int(np.argmax(observed)) > steps - period:
            return None  # the first observation is less than a period ago
        level = _level_change(series, observed, period, slack, self.level_window)
        ahead = np.full(horizon, np.nan)
        for offset in range(horizon):
            value = _nearest(series, observed, steps + offset - period, steps)
            if value is not None:
                ahead[offset] = value + level
        return ahead


def _level_change(
    series: FloatArray, observed: BoolArray, period: int, slack: int, window: int
) -> float:
    """The mean, over the last ``window`` observed steps, of how far each lies above the
    highest (or below the lowest) value observed a period earlier within ``slack``
    steps of the same time (0 where it lies between them). A step with nothing
    observed around that time a period earlier does not count; 0 when no step does."""
    steps = len(series)
    changes = []
    for step in range(max(steps - window, 0), steps):
        if not observed[step]:
            continue
        low, high = max(step - period - slack, 0), step - period + slack + 1
        if high <= 0:
            continue
        before = series[low:high][observed[low:high]]
        if before.size:
            value = float(series[step])
            changes.append(value - min(max(value, float(before.min())), float(before.max())))
    return float(np.mean(changes)) if changes else 0.0


def _nearest(series: FloatArray, observed: BoolArray, step: int, steps: int) -> float | None:
    """The observed value at ``step``, else at the nearest observed step within
    :data:`GAP_STEPS` (earlier first); None when there is none."""
    for distance in range(GAP_STEPS + 1):
        for candidate in (step - distance, step + distance):
            if 0 <= candidate < steps and observed[candidate]:
                return float(series[candidate])
    return None
