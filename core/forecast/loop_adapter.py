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

The rolling history is laid on a grid of the loop's ticks, latest sample last; series
the loop has not seen are masked (never filled). Loop metric names that differ from
the model's (a node's ``dcgm.gpu_util_percent.gpu0`` for a model trained on
``gpu_duty_cycle``) are mapped by ``rename``. Only series the loop has seen get an
answer; the rest keep the loop's last value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from kubesage.core.forecast.forecaster import Forecast
from kubesage.core.forecast.panel import MetricPanel

Series = tuple[str, str]
"""(entity, metric), as the loop names them."""


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
    ) -> None:
        self.forecaster = forecaster
        self.entities = tuple(entities)
        self.metrics = tuple(metrics)
        self.rename = dict(rename or {})
        """Loop metric name → the model's metric name."""
        self.step_s = step_s

    @property
    def name(self) -> str:
        return self.forecaster.name

    def panel_of(self, history: Mapping[Series, Sequence[float]]) -> MetricPanel:
        """The rolling history as a panel of the model's entities and metrics."""
        entity_index = {e: i for i, e in enumerate(self.entities)}
        metric_index = {m: i for i, m in enumerate(self.metrics)}
        steps = max((len(v) for v in history.values()), default=0)
        shape = (steps, len(self.entities), len(self.metrics))
        values, mask = np.zeros(shape), np.zeros(shape, dtype=bool)
        for (entity, metric), samples in history.items():
            n = entity_index.get(entity)
            m = metric_index.get(self.rename.get(metric, metric))
            if n is None or m is None or not samples:
                continue
            values[steps - len(samples) :, n, m] = samples
            mask[steps - len(samples) :, n, m] = True
        return MetricPanel(
            entities=self.entities,
            metrics=self.metrics,
            start_s=0.0,
            step_s=self.step_s,
            values=values,
            mask=mask,
            alive=np.asarray(mask.any(axis=2)),
        )

    def forecast(
        self, history: Mapping[Series, Sequence[float]], horizon_steps: int
    ) -> Mapping[Series, float]:
        """The forecast ``horizon_steps`` ahead for every seen series the model knows."""
        panel = self.panel_of(history)
        if panel.steps == 0:
            return {}
        values = self.forecaster.predict(panel, horizon_steps).values[horizon_steps - 1]
        entity_index = {e: i for i, e in enumerate(self.entities)}
        metric_index = {m: i for i, m in enumerate(self.metrics)}
        out: dict[Series, float] = {}
        for entity, metric in history:
            n = entity_index.get(entity)
            m = metric_index.get(self.rename.get(metric, metric))
            if n is not None and m is not None:
                out[(entity, metric)] = float(values[n, m])
        return out
