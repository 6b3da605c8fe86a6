"""Forecasts that need no training (last value, moving average) and a linear model.

All of them see exactly what the neural models see — the windows of
:mod:`kubesage.core.forecast.windows`, normalised — and return normalised
forecasts ``(B, H, N, M)``.
"""

from __future__ import annotations

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.forecast.windows import Windows

MOVING_AVERAGE_STEPS = 12
RIDGE_LAMBDA = 1.0


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
