"""Which forecaster scales a Flink job ahead of its load (``kubesage flink autoscale
--forecast``), and how much demand history it keeps.

The collector (:class:`~kubesage.adapters.flink.collector.ObservationCollector`) feeds
each source's measured demand to the forecaster every tick; the highest value it
predicts over the horizon becomes the source's demand when it is higher than the
measured one (and when lower, while the source keeps up: see
:mod:`~kubesage.adapters.flink.demand`). Choices:

- ``none``: reactive, what was measured;
- ``trend``: the least-squares line through the last minute
  (:class:`~kubesage.core.forecast.trend.TrendForecaster`), a slope used only when it is
  two standard errors from 0 — sees a ramp once it has begun;
- ``seasonal``: the same time one ``season_s`` earlier, re-levelled
  (:class:`~kubesage.core.forecast.seasonal.SeasonalForecaster`; the trend until a
  season of history is in) — sees a daily ramp coming. A day that runs the curve up
  to a horizon earlier or later than the day before is not read as a change of level
  (``time_slack_s``): the forecast's peak over the horizon already covers that shift.
  The history kept then spans a season; it lives in the process, so a restarted
  autoscaler is on the trend again for a season.

The horizon should cover the time a rescale takes to pay off: the measured window's
lag (half of it), two observations in a row, and the rescale itself — about 30 s with
the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesage.core.errors import InputError

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

FORECASTS = ("none", "trend", "seasonal")
DEFAULT_HISTORY_STEPS = 256
"""Demand samples kept per source without a season (21 minutes at a 5 s tick)."""
TREND_WINDOW_S = 60.0
TREND_MIN_T = 2.0


@dataclass(frozen=True)
class DemandForecast:
    """The forecaster of source demand, from the autoscaler's options."""

    kind: str = "none"
    horizon_s: float = 30.0
    season_s: float | None = None
    trend_window_s: float = TREND_WINDOW_S
    trend_min_t: float = TREND_MIN_T

    def __post_init__(self) -> None:
        if self.kind not in FORECASTS:
            raise InputError(f"--forecast must be one of {', '.join(FORECASTS)}, got {self.kind!r}")
        if not self.horizon_s > 0:
            raise InputError(f"--forecast-horizon-s must be > 0, got {self.horizon_s:g}")
        if self.kind == "seasonal" and (self.season_s is None or not self.season_s > 0):
            raise InputError("--forecast seasonal needs --season-s > 0 (86400 for a daily curve)")
        if self.kind != "seasonal" and self.season_s is not None:
            raise InputError("--season-s is for --forecast seasonal")

    def forecaster(self, interval_s: float) -> Forecaster | None:
        """The forecaster for a collector that ticks every ``interval_s`` (None: reactive)."""
        if self.kind == "none":
            return None
        from kubesage.core.forecast.trend import TrendForecaster

        window = max(2, round(self.trend_window_s / _tick(interval_s)))
        trend = TrendForecaster(window=window, min_t_stat=self.trend_min_t)
        if self.kind == "trend":
            return trend
        from kubesage.core.forecast.seasonal import SeasonalForecaster

        assert self.season_s is not None
        return SeasonalForecaster(
            period_s=self.season_s,
            level_window=window,
            time_slack_s=max(0.0, min(self.horizon_s, self.season_s / 2 - _tick(interval_s))),
            fallback=trend,
        )

    def horizon_steps(self, interval_s: float) -> int:
        return max(1, math.ceil(self.horizon_s / _tick(interval_s) - 1e-9))

    def history_steps(self, interval_s: float) -> int:
        """Demand samples to keep: a season and the trend's window past it, at least
        :data:`DEFAULT_HISTORY_STEPS`."""
        if self.season_s is None:
            return DEFAULT_HISTORY_STEPS
        needed = math.ceil((self.season_s + self.trend_window_s) / _tick(interval_s))
        return max(DEFAULT_HISTORY_STEPS, needed + self.horizon_steps(interval_s) + 1)


def _tick(interval_s: float) -> float:
    """The loop's tick in seconds; a loop that does not pause between ticks (tests) is
    taken as ticking every second."""
    return interval_s if interval_s > 0 else 1.0
