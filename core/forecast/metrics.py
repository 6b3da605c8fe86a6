"""Forecast accuracy in each metric's own units, and the burst subset.

All figures are pooled over entities and test steps of one metric — never across
metrics, whose units differ; a model's headline WAPE and sMAPE are the means of
its per-metric values.

* WAPE = Σ|ŷ−y| / Σ|y| (primary; robust to the many zeros of GPU utilisation)
* MAE, RMSE
* sMAPE = mean of 2|ŷ−y| / (|ŷ|+|y|), a fraction in [0, 2]; a cell where both are 0 counts 0
* MAPE over non-zero truths only (``mape_nonzero``): mean |ŷ−y| / |y| where y ≠ 0

Upper quantiles (``quantile_scores``), for a forecast meant to lie above the truth a
share ``q`` of the time:

* pinball loss = mean of max(q·(y−ŷ), (q−1)·(y−ŷ)), in the metric's units
* wQL = 2 · Σ pinball / Σ|y|, the weighted quantile loss (at q = 0.5 it is the WAPE)
* coverage = the share of truths at or below the forecast (q for a calibrated one)

Burst: a target cell whose truth jumped from the step before by more than
``BURST_SIGMAS`` training standard deviations of that series (both cells observed).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kubesage.core.arrays import BoolArray, FloatArray

BURST_SIGMAS = 2.0


def scores(prediction: FloatArray, truth: FloatArray, mask: BoolArray) -> dict[str, float | None]:
    """Accuracy over the cells where ``mask`` is true (None when there are none)."""
    p, y = prediction[mask], truth[mask]
    if y.size == 0:
        return {"wape": None, "mae": None, "rmse": None, "smape": None, "mape_nonzero": None}
    error = np.abs(p - y)
    denominator = np.abs(y).sum()
    both = np.abs(p) + np.abs(y)
    smape_terms = np.divide(2 * error, both, out=np.zeros_like(error), where=both > 0)
    nonzero = y != 0
    return {
        "wape": float(error.sum() / denominator) if denominator > 0 else None,
        "mae": float(error.mean()),
        "rmse": float(np.sqrt((error**2).mean())),
        "smape": float(smape_terms.mean()),
        "mape_nonzero": float((error[nonzero] / np.abs(y[nonzero])).mean())
        if nonzero.any()
        else None,
    }


def quantile_scores(
    prediction: FloatArray, truth: FloatArray, mask: BoolArray, quantile: float
) -> dict[str, float | None]:
    """Pinball loss, wQL and coverage of a ``quantile`` forecast where ``mask`` is true."""
    p, y = prediction[mask], truth[mask]
    if y.size == 0:
        return {"pinball": None, "wql": None, "coverage": None}
    miss = y - p
    loss = np.maximum(quantile * miss, (quantile - 1.0) * miss)
    denominator = np.abs(y).sum()
    return {
        "pinball": float(loss.mean()),
        "wql": float(2.0 * loss.sum() / denominator) if denominator > 0 else None,
        "coverage": float((y <= p).mean()),
    }


def burst_cells(normalised: FloatArray, mask: BoolArray) -> BoolArray:
    """``(S, N, M)``: cells whose value jumped by more than BURST_SIGMAS from the step before."""
    jump = np.zeros(mask.shape, dtype=bool)
    both = mask[1:] & mask[:-1]
    jump[1:] = both & (np.abs(normalised[1:] - normalised[:-1]) > BURST_SIGMAS)
    return jump


def mean_of(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def undefined_wape(truth: FloatArray, mask: BoolArray, metrics: Sequence[str]) -> list[str]:
    """The ``metrics`` (last axis of ``truth``) whose cells under ``mask`` hold no non-zero
    truth: their WAPE is undefined (0 / 0), so a headline over metrics leaves them out."""
    return [
        metric for m, metric in enumerate(metrics) if not np.any(truth[..., m][mask[..., m]] != 0)
    ]


def headlines_from_per_metric(document: object) -> None:
    """Set, in place, every headline figure beside a ``per_metric`` table (a horizon's
    ``wape``, ``smape``, …; a quantile's ``wql``, ``coverage``) to the mean over metrics
    of that table, wherever one is nested in ``document``. After a mean over rolling
    blocks this makes the headline the mean of each metric's own mean over the blocks
    where it is defined, rather than a mean of headlines over different metric sets."""
    if not isinstance(document, dict):
        return
    per_metric = document.get("per_metric")
    if isinstance(per_metric, dict):
        rows = [row for row in per_metric.values() if isinstance(row, dict)]
        for key, value in document.items():
            headline = key != "per_metric" and (value is None or isinstance(value, float | int))
            if headline and rows and all(key in row for row in rows):
                document[key] = mean_of([row[key] for row in rows])
    for value in document.values():
        headlines_from_per_metric(value)
