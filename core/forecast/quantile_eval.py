"""Upper quantiles in the evaluation protocol: pinball loss, wQL and coverage.

``kubesage forecast eval --quantiles 0.9,0.95`` scores each model's upper quantiles
beside its point forecast. The quantiles come from the product's own
:class:`~kubesage.core.forecast.quantile.QuantileForecaster` (the one ``forecast train
--quantile`` saves and the loop reads): a second fit of the model on the first 80 % of
the steps before the cut-off, split-conformal offsets calibrated on the last 20 %. The
point figures keep their own fit on all of the steps, so asking for quantiles changes
none of them; it costs that second fit.

The second fit computes its correlation graph on its own training steps (never on the
calibration steps), and an ST-GCN reuses the LSTM's second fit as its temporal part, as
the point fits do. Scores are per horizon and quantile (:func:`quantile_scores`): the
headline ``wql`` and ``coverage`` are means over metrics, as WAPE is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.metrics import mean_of, quantile_scores
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.quantile import QuantileForecaster
from kubesage.core.forecast.training import TrainConfig


@dataclass(frozen=True)
class UpperFit:
    forecaster: QuantileForecaster
    seconds: float
    """Training and calibration, a reused temporal part's training included."""


def fit_upper(
    name: str,
    panel: MetricPanel,
    until_step: int,
    *,
    config: TrainConfig | None,
    history: int,
    horizon: int,
    temporal: tuple[torch.nn.Module, float] | None = None,
) -> UpperFit:
    """Model ``name`` fitted and calibrated on the steps before ``until_step``
    (``temporal``: a fitted LSTM an ST-GCN takes as its temporal part, and its seconds)."""
    started = time.perf_counter()
    point = make_forecaster(name, config=config, history=history, horizon=horizon)
    reused = 0.0
    if isinstance(point, NeuralForecaster) and point.kind == "stgcn" and temporal is not None:
        point.temporal_from, reused = temporal
    upper = QuantileForecaster(point)
    upper.fit(panel, until_step)
    return UpperFit(upper, time.perf_counter() - started + reused)


def score_upper(
    upper: QuantileForecaster,
    panel: MetricPanel,
    origins: IntArray,
    quantiles: Sequence[float],
    truth: FloatArray,
    mask: BoolArray,
    horizons: Sequence[int],
) -> dict[str, dict[str, object]]:
    """``{"<h>": {"<q>": {"wql", "coverage", "per_metric"}}}`` for forecasts from
    ``origins`` against ``truth`` ``(B, H, N, M)`` where ``mask`` holds."""
    forecasts = upper.forecast_windows_at(upper.point.windows_at(panel, origins), quantiles)
    out: dict[str, dict[str, object]] = {str(h): {} for h in horizons}
    for q, forecast in forecasts.items():
        for h in horizons:
            per_metric = {
                metric: quantile_scores(
                    forecast[:, h - 1, :, m], truth[:, h - 1, :, m], mask[:, h - 1, :, m], q
                )
                for m, metric in enumerate(panel.metrics)
            }
            out[str(h)][f"{q:g}"] = {
                "wql": mean_of([v["wql"] for v in per_metric.values()]),
                "coverage": mean_of([v["coverage"] for v in per_metric.values()]),
                "per_metric": per_metric,
            }
    return out
