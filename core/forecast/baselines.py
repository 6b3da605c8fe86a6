"""Forecasts that need no training (last value, moving average and median) and two linear
models.

All of them see exactly what the neural models see — the windows of
:mod:`kubesage.core.forecast.windows`, normalised — and return normalised
forecasts ``(B, H, N, M)``.
"""

from __future__ import annotations

import numpy as np
import torch

from kubesage.core.arrays import FloatArray
from kubesage.core.forecast import anchor
from kubesage.core.forecast.windows import Windows

MOVING_AVERAGE_STEPS = 12
RIDGE_LAMBDA = 1.0
RECENT_STEPS = 3
"""The short mean :class:`LeastAbsoluteForecaster` reads beside the last value."""
LAD_MEDIAN_STEPS = (3, 12, 24)
"""The recent medians :class:`LeastAbsoluteForecaster` reads."""
LAD_FEATURES = 4 + len(LAD_MEDIAN_STEPS)
"""The linear model's features: last value, recent mean, moving average, the recent
medians, bias."""
MEAN_ONLY_LAD_FEATURES = 4
"""The features of a model fitted before the medians (last value, two means, bias):
a saved ST-GCN's highway may hold one."""
IRLS_ITERATIONS = 40


def _split(windows: Windows) -> tuple[FloatArray, FloatArray]:
    metrics = windows.targets.shape[3]
    values = windows.inputs[..., :metrics].astype(np.float64)
    mask = windows.inputs[..., metrics:].astype(np.float64)
    return values, mask


def last_value(windows: Windows, horizon: int) -> FloatArray:
    """Repeat the last observed value (the series mean when the window saw none)."""
    return np.repeat(windows.last[:, None].astype(np.float64), horizon, axis=1)


def moving_average(windows: Windows, horizon: int, steps: int = MOVING_AVERAGE_STEPS) -> FloatArray:
    """The mean of the observed values in the last ``steps`` steps."""
    values, mask = _split(windows)
    recent_values, recent_mask = values[:, -steps:], mask[:, -steps:]
    count = recent_mask.sum(axis=1)
    mean = np.divide(
        (recent_values * recent_mask).sum(axis=1),
        count,
        out=windows.last.astype(np.float64),
        where=count > 0,
    )
    return np.repeat(mean[:, None], horizon, axis=1)


def recent_median(windows: Windows, steps: int = MOVING_AVERAGE_STEPS) -> FloatArray:
    """Per series ``(B, N, M)``, the median of the observed values in the last ``steps``
    steps (the last observed value where none): :func:`anchor.recent_median`."""
    median = anchor.recent_median(
        torch.from_numpy(windows.inputs), steps, torch.from_numpy(windows.last)
    )
    return median.numpy().astype(np.float64)


def moving_median(windows: Windows, horizon: int, steps: int = MOVING_AVERAGE_STEPS) -> FloatArray:
    """The median of the observed values in the last ``steps`` steps: what the least
    absolute error asks for when the recent past is all there is to go on. On a sparse
    series (mostly zeros, rare bursts) it is zero, where the mean and the last value
    carry every burst into the next steps."""
    return np.repeat(recent_median(windows, steps)[:, None], horizon, axis=1)


class LinearForecaster:
    """Ridge regression per metric and horizon, weights shared across entities.

    Features: the series' last T normalised values, their mask and a bias; the
    target is the change from the last observed value.
    """

    name = "linear"

    def __init__(self, ridge: float = RIDGE_LAMBDA):
        self.ridge = ridge
        self.weights: FloatArray | None = None  # (M, H, F)

    @staticmethod
    def _features(windows: Windows, metric: int) -> FloatArray:
        values, mask = _split(windows)
        batch, history, nodes, _ = values.shape
        series = values[..., metric].transpose(0, 2, 1).reshape(batch * nodes, history)
        observed = mask[..., metric].transpose(0, 2, 1).reshape(batch * nodes, history)
        return np.concatenate([series, observed, np.ones((batch * nodes, 1))], axis=1)

    def fit(self, windows: Windows) -> LinearForecaster:
        _, horizon, _, metrics = windows.targets.shape
        weights = []
        for m in range(metrics):
            features = self._features(windows, m)
            last = windows.last[..., m].reshape(-1).astype(np.float64)
            per_horizon = []
            for h in range(horizon):
                target = windows.targets[:, h, :, m].reshape(-1) - last
                keep = windows.target_mask[:, h, :, m].reshape(-1)
                x, y = features[keep], target[keep]
                gram = x.T @ x + self.ridge * np.eye(x.shape[1])
                per_horizon.append(np.linalg.solve(gram, x.T @ y))
            weights.append(per_horizon)
        self.weights = np.asarray(weights)
        return self

    def predict(self, windows: Windows) -> FloatArray:
        if self.weights is None:
            raise RuntimeError("LinearForecaster.predict before fit")
        batch, _, nodes, metrics = (
            windows.inputs.shape[0],
            0,
            windows.inputs.shape[2],
            self.weights.shape[0],
        )
        horizon = self.weights.shape[1]
        out = np.zeros((batch, horizon, nodes, metrics))
        for m in range(metrics):
            change = self._features(windows, m) @ self.weights[m].T  # (B·N, H)
            last = windows.last[..., m].reshape(-1, 1)
            out[..., m] = (change + last).reshape(batch, nodes, horizon).transpose(0, 2, 1)
        return out


def least_absolute(x: FloatArray, y: FloatArray, weights: FloatArray | None = None) -> FloatArray:
    """Coefficients minimising ``Σ weights · |x · c − y|`` (iteratively reweighted least
    squares from the least-squares start; every weight 1 when none are given)."""
    row_weight = np.ones(y.shape) if weights is None else weights
    ridge = 1e-6 * np.eye(x.shape[1])
    coefficients = np.asarray(np.linalg.lstsq(x, y, rcond=None)[0], dtype=np.float64)
    floor = 1e-3 * (np.abs(y).mean() + 1e-12)
    for _ in range(IRLS_ITERATIONS):
        scale = row_weight / np.maximum(np.abs(x @ coefficients - y), floor)
        weighted = x * scale[:, None]
        coefficients = np.asarray(
            np.linalg.solve(weighted.T @ x + ridge, weighted.T @ y), dtype=np.float64
        )
    return coefficients


class LeastAbsoluteForecaster:
    """A linear model per metric and horizon, weights shared across entities, fitted for
    the least absolute error in each series' own units — what WAPE pools.

    Features: the last observed value, the means of the observed values in the last
    3 and 12 steps and their medians in the last 3, 12 and 24 steps (the last value
    where none), and a bias; all normalised, so one model serves every entity. The
    medians let the fit keep a sparse series at its idle level, which the least
    absolute error favours and the means and last value carry every burst away from.
    Each training error counts in its series' units (the normalised error times the
    series' training scale, ``series_scale``). A model fitted before the medians
    (:data:`MEAN_ONLY_LAD_FEATURES` weights, from a saved highway) reads the first
    three features and the bias.
    """

    name = "linear_lad"

    def __init__(self) -> None:
        self.weights: FloatArray | None = None  # (M, H, features)

    @staticmethod
    def _features(windows: Windows, count: int = LAD_FEATURES) -> FloatArray:
        """``(B, N, M, count)``: :data:`LAD_FEATURES`, or :data:`MEAN_ONLY_LAD_FEATURES`."""
        values, mask = _split(windows)
        last = windows.last.astype(np.float64)
        columns = [last]
        for steps in (RECENT_STEPS, MOVING_AVERAGE_STEPS):
            observed = mask[:, -steps:].sum(axis=1)
            total = (values[:, -steps:] * mask[:, -steps:]).sum(axis=1)
            columns.append(np.divide(total, observed, out=last.copy(), where=observed > 0))
        if count == LAD_FEATURES:
            columns += [recent_median(windows, steps) for steps in LAD_MEDIAN_STEPS]
        elif count != MEAN_ONLY_LAD_FEATURES:
            raise ValueError(f"a least-absolute model has {LAD_FEATURES} features, not {count}")
        columns.append(np.ones_like(last))
        return np.stack(columns, axis=-1)

    def fit(self, windows: Windows, series_scale: FloatArray) -> LeastAbsoluteForecaster:
        """``series_scale (N, M)``: each series' training scale (the normaliser's std)."""
        features = self._features(windows)
        _, horizon, nodes, metrics = windows.targets.shape
        scale = np.broadcast_to(series_scale[None], (features.shape[0], nodes, metrics))
        weights = np.zeros((metrics, horizon, features.shape[-1]))
        for m in range(metrics):
            for h in range(horizon):
                keep = windows.target_mask[:, h, :, m]
                weights[m, h] = least_absolute(
                    features[:, :, m][keep],
                    windows.targets[:, h, :, m][keep].astype(np.float64),
                    scale[..., m][keep],
                )
        self.weights = weights
        return self

    def predict(self, windows: Windows) -> FloatArray:
        if self.weights is None:
            raise RuntimeError("LeastAbsoluteForecaster.predict before fit")
        # (B, N, M, F) · (M, H, F) → (B, H, N, M)
        features = self._features(windows, self.weights.shape[-1])
        forecast: FloatArray = np.einsum("bnmf,mhf->bhnm", features, self.weights)
        return forecast
