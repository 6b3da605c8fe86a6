"""Any panel forecaster — point or upper quantile — as the control loop's forecaster.

The loop keeps a rolling history per (entity, metric) series
(:class:`kubesage.core.loop.forecasts.ForecastPanel`) and asks a plugged-in forecaster
for a value ``horizon_steps`` ahead per series (its ``TrainedForecaster`` protocol).
:class:`LoopForecaster` answers that with a forecaster of this package (anything with
``predict(history: MetricPanel, horizon) -> Forecast``: the ST-GCN, the LSTM, a
baseline, or a :class:`~kubesage.core.forecast.quantile.QuantileForecaster` whose
forecast is the upper quantile the packing replay reserves), so the loop's
forecast-aware placement term and ``benchmarks/forecast_packing.py`` read the same
forecasts:

    panel.use(LoopForecaster(QuantileForecaster(fitted), entities, metrics))

The rolling history is laid on a grid of the loop's ticks, latest tick last; ticks
where a series had no sample (NaN in the panel's history) and series the loop has not
seen are masked (never filled). Loop metric names that differ from
the model's (a node's ``dcgm.gpu_util_percent.gpu0`` for a model trained on
``gpu_duty_cycle``) are mapped by ``rename``. Only series the loop has seen get an
answer; the rest keep the loop's last value.

A model whose entities and metrics are none of the loop's (one trained on pods, or on
another cluster's nodes) would answer nothing, forever: once the loop has asked it for
as many ticks as its history and it knows none of the series the loop has, it logs a
warning once naming the model's entities and metrics and the loop's, keeps the reason in
:attr:`LoopForecaster.mismatch`, and its name — the loop's forecast ``source`` in
``/healthz`` and ``/debug/loop`` — says ``(matches no series)`` until it matches one.

:func:`load_loop_forecaster` reads a model file for ``kubesage serve --forecast-model``
(one trained by ``kubesage forecast train --prometheus``, whose entities are the nodes
and whose metrics are the loop's own column names; with ``--quantile`` the loop reads
its upper quantile) and checks that the loop's tick is
the step it was trained on: a model of 15 s steps read every 5 s would forecast three
times too near.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import Forecast, NeuralForecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.quantile import MIN_RESIDUALS, QuantileForecaster
from kubesage.core.listing import a_few

log = logging.getLogger(__name__)

STEP_TOLERANCE = 0.1
"""How far (as a share of the tick) the model's step may be from the loop's tick."""

Series = tuple[str, str]
"""(entity, metric), as the loop names them."""
Cell = tuple[int, int]
"""A series' (entity, metric) indices in the model's panel."""


class PanelForecaster(Protocol):
    @property
    def name(self) -> str: ...

    def predict(self, history: MetricPanel, horizon: int) -> Forecast: ...


class LoopForecaster:
    """A fitted panel forecaster behind the loop's ``TrainedForecaster`` protocol."""

    def __init__(
        self,
        forecaster: PanelForecaster,
        entities: Sequence[str],
        metrics: Sequence[str],
        *,
        rename: Mapping[str, str] | None = None,
        step_s: float = 1.0,
        history_steps: int = 1,
        horizon_steps: int = 1,
        path: Path | None = None,
    ) -> None:
        self.forecaster = forecaster
        self.entities = tuple(entities)
        self.metrics = tuple(metrics)
        self.rename = dict(rename or {})
        """Loop metric name → the model's metric name."""
        self.step_s = step_s
        self.history_steps = history_steps
        """Steps of history the model reads (the loop keeps at least that many)."""
        self.horizon_steps = horizon_steps
        """The farthest step the model forecasts."""
        self._entity_index = {e: i for i, e in enumerate(self.entities)}
        self._metric_index = {m: i for i, m in enumerate(self.metrics)}
        self.path = path
        """The file the model came from (None: built in memory)."""
        self._cells: dict[Series, Cell | None] = {}
        self._matched = False
        """Whether any series the loop asked about is one of the model's."""
        self._ticks = 0
        """Times the loop asked for forecasts: one per tick."""
        self.mismatch = ""
        """Why the model answers none of the loop's series ("" while it knows one of them,
        or before the loop has asked for ``history_steps`` ticks); see the module docstring."""

    @property
    def name(self) -> str:
        """The model's name; an upper quantile's says its level (``stgcn@q0.95``); and
        ``(matches no series)`` after it while :attr:`mismatch` is set."""
        if isinstance(self.forecaster, QuantileForecaster):
            name = f"{self.forecaster.name}@q{self.forecaster.quantile:g}"
        else:
            name = self.forecaster.name
        return f"{name} (matches no series)" if self.mismatch else name

    def _cell(self, series: Series) -> Cell | None:
        """The model's (entity, metric) indices of a loop series (None: not the model's)."""
        if series in self._cells:
            return self._cells[series]
        entity, metric = series
        n = self._entity_index.get(entity)
        m = self._metric_index.get(self.rename.get(metric, metric))
        cell = self._cells[series] = None if n is None or m is None else (n, m)
        if cell is not None and not self._matched:
            self._matched = True
            if self.mismatch:
                self.mismatch = ""
                log.info("forecaster %s now knows a series of the loop's: %s", self.name, series)
        return cell

    def knows(self, series: Series) -> bool:
        """A series of one of the model's entities and metrics (after ``rename``)."""
        return self._cell(series) is not None

    def panel_of(
        self, history: Mapping[Series, Sequence[float]], first_tick: int = 0
    ) -> MetricPanel:
        """The rolling history as a panel of the model's entities and metrics, its step 0
        at ``first_tick`` ticks (the clock the model's memory of earlier forecasts keys on)."""
        return self._panel(history, self._known(history), first_tick)

    def _known(self, history: Mapping[Series, Sequence[float]]) -> list[tuple[Series, Cell]]:
        """The series of ``history`` the model knows, with their cells."""
        known = []
        for series, samples in history.items():
            cell = self._cell(series)
            if cell is not None and len(samples):
                known.append((series, cell))
        return known

    def _panel(
        self,
        history: Mapping[Series, Sequence[float]],
        known: Sequence[tuple[Series, Cell]],
        first_tick: int,
    ) -> MetricPanel:
        steps = max((len(v) for v in history.values()), default=0)
        shape = (steps, len(self.entities), len(self.metrics))
        values, mask = np.zeros(shape), np.zeros(shape, dtype=bool)
        if known and all(len(history[series]) == steps for series, _ in known):
            # The panel's usual case: one row per series over the same ticks, read at once.
            rows = np.array([history[series] for series, _ in known], dtype=np.float64)
            entity, metric = np.array([cell for _, cell in known]).T
            seen = np.isfinite(rows)
            values[:, entity, metric] = np.where(seen, rows, 0.0).T
            mask[:, entity, metric] = seen.T
        else:
            for series, (n, m) in known:
                row = np.asarray(history[series], dtype=np.float64)
                seen = np.isfinite(row)
                values[steps - len(row) :, n, m] = np.where(seen, row, 0.0)
                mask[steps - len(row) :, n, m] = seen
        return MetricPanel(
            entities=self.entities,
            metrics=self.metrics,
            start_s=first_tick * self.step_s,
            step_s=self.step_s,
            values=values,
            mask=mask,
            alive=np.asarray(mask.any(axis=2)),
        )

    def forecast(
        self, history: Mapping[Series, Sequence[float]], horizon_steps: int, first_tick: int = 0
    ) -> Mapping[Series, float]:
        """The forecast ``horizon_steps`` ahead for every seen series the model knows;
        ``first_tick`` as :meth:`TrainedForecaster.forecast` says."""
        self._ticks += 1
        if not self._matched and not self.mismatch and self._ticks >= self.history_steps:
            self._check_match()
        known = self._known(history)
        panel = self._panel(history, known, first_tick)
        if panel.steps == 0:
            return {}
        values = self.forecaster.predict(panel, horizon_steps).values[horizon_steps - 1]
        sampled = np.asarray(panel.mask.any(axis=0))  # none in the window: nothing to forecast
        return {series: float(values[cell]) for series, cell in known if sampled[cell]}

    def _check_match(self) -> None:
        """Set :attr:`mismatch` and warn when the loop has series and the model knows none."""
        if not self._cells:
            return  # no telemetry yet: nothing to match
        theirs = [series for series, cell in self._cells.items() if cell is None]
        origin = f" from {self.path}" if self.path is not None else ""
        self.mismatch = (
            f"forecaster {self.name}{origin} knows none of the loop's {len(theirs)} series "
            f"after {self._ticks} tick(s): it was trained on entities "
            f"{_few(self.entities)} and metrics {_few(self.metrics)}, the loop has entities "
            f"{_few({e for e, _ in theirs})} and metrics {_few({m for _, m in theirs})}; "
            "every forecast is the last value (train it on these nodes' metrics: "
            "`kubesage forecast train --prometheus`)"
        )
        log.warning("%s", self.mismatch)


def _few(names: Iterable[str]) -> str:
    """Up to three of ``names``, sorted, and how many there are."""
    return a_few(sorted(names), 3)


def load_loop_forecaster(path: Path, tick_s: float) -> LoopForecaster:
    """The model in ``path`` as the loop's forecaster, for a loop that ticks every
    ``tick_s``; InputError for a file that cannot be read or a step that is not the tick."""
    from kubesage.core.forecast.persistence import load_panel_forecaster

    forecaster, header = load_panel_forecaster(path)
    point = forecaster.point if isinstance(forecaster, QuantileForecaster) else forecaster
    assert isinstance(point, NeuralForecaster)  # what a model file holds
    if point.fallback_reason:  # written before `forecast train` refused such models
        raise InputError(
            f"{path} was saved from a cold start ({point.fallback_reason}): it would only "
            "repeat the last value; train it again on more history"
        )
    calibration = forecaster.calibration if isinstance(forecaster, QuantileForecaster) else None
    if calibration is not None and calibration.residuals < MIN_RESIDUALS:
        raise InputError(
            f"{path}: its q={calibration.quantile:g} calibration rests on "
            f"{calibration.residuals} residual(s), need {MIN_RESIDUALS}: its upper quantile "
            "would be the point forecast; train it again on more history"
        )
    step_s = header.get("step_s")
    if step_s is None:
        log.warning(
            "%s records no step; the loop reads it every %g s, so it must have been trained "
            "on %g s steps",
            path,
            tick_s,
            tick_s,
        )
        step_s = tick_s
    elif (
        isinstance(step_s, bool)
        or not isinstance(step_s, int | float)
        or not (math.isfinite(step_s) and step_s > 0)
    ):
        raise InputError(f"{path}: step_s {step_s!r} is not a positive number of seconds")
    elif abs(step_s - tick_s) > STEP_TOLERANCE * tick_s:
        raise InputError(
            f"{path} was trained on {step_s:g} s steps but the loop ticks every {tick_s:g} s: "
            f"run with --tick-s {step_s:g}, or train with --step {tick_s:g}s"
        )
    return LoopForecaster(
        forecaster,
        point.entities,
        point.metrics,
        step_s=float(step_s),
        history_steps=point.context,
        horizon_steps=point.horizon,
        path=path,
    )
