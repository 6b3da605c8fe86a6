"""The ST-GCN's linear highway: its neural forecast blended with a least-absolute-error
linear forecast, one weight per horizon step and metric, chosen on validation windows.

LSTNet runs a linear autoregressive component beside its neural network for the
same reason: on sparse, bursty series a neural forecaster can lose the scale that a
linear model over recent levels keeps. Here the linear part is the ``linear_lad``
model (:class:`~kubesage.core.forecast.baselines.LeastAbsoluteForecaster`) and the
blend is convex, ``w · neural + (1 − w) · linear``, with ``w`` taken from
:data:`BLEND_WEIGHTS` for each horizon step and metric: the one whose blend has the
least absolute error on the validation windows, pooled in each series' own units
(what WAPE pools). The linear part is fitted on the training windows for that
choice, then refitted on all of them, as the ``linear_lad`` baseline is.

On the validation windows the blend is never worse than either part alone (both
ends of the grid are candidates); on later data it is as good as that choice
carries over, which the rolling evaluation measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.forecast.baselines import LeastAbsoluteForecaster
from kubesage.core.forecast.windows import Windows

BLEND_WEIGHTS = np.linspace(0.0, 1.0, 11)
"""The neural part's candidate weights, 0 (linear only) to 1 (neural only)."""

NeuralPredict = Callable[[Windows], FloatArray]
"""Normalised neural forecasts ``(B, H, N, M)`` for windows."""


def subset(windows: Windows, index: IntArray) -> Windows:
    """The windows at ``index``."""
    return Windows(
        inputs=windows.inputs[index],
        targets=windows.targets[index],
        target_mask=windows.target_mask[index],
        last=windows.last[index],
        origins=windows.origins[index],
    )


def choose_weights(
    neural: FloatArray,
    linear: FloatArray,
    targets: FloatArray,
    mask: np.ndarray,
    series_scale: FloatArray,
) -> FloatArray:
    """Per horizon step and metric ``(H, M)``, the weight of :data:`BLEND_WEIGHTS` whose
    blend has the least absolute error over ``mask``, each series' error in its own
    units (normalised error × ``series_scale (N, M)``). Ties go to the smaller weight."""
    scale = series_scale[None, None]  # (1, 1, N, M)
    errors = np.stack(
        [
            (np.abs(w * neural + (1.0 - w) * linear - targets) * scale * mask).sum(axis=(0, 2))
            for w in BLEND_WEIGHTS
        ]
    )  # (W, H, M)
    chosen: FloatArray = BLEND_WEIGHTS[np.argmin(errors, axis=0)]
    return chosen


@dataclass
class LinearHighway:
    """The fitted linear part and the blend weights ``(H, M)``."""

    linear: LeastAbsoluteForecaster
    weights: FloatArray

    @classmethod
    def fit(
        cls,
        neural: NeuralPredict,
        windows: Windows,
        train_index: IntArray,
        validation_index: IntArray,
        series_scale: FloatArray,
    ) -> LinearHighway:
        """Choose the weights on ``validation_index`` (the linear part fitted on
        ``train_index``), then refit the linear part on every window."""
        validation = subset(windows, validation_index)
        held_out = LeastAbsoluteForecaster().fit(subset(windows, train_index), series_scale)
        weights = choose_weights(
            neural(validation),
            held_out.predict(validation),
            validation.targets.astype(np.float64),
            validation.target_mask,
            series_scale,
        )
        return cls(LeastAbsoluteForecaster().fit(windows, series_scale), weights)

    def blend(self, neural: FloatArray, windows: Windows) -> FloatArray:
        """``w · neural + (1 − w) · linear`` for normalised forecasts ``(B, H, N, M)``."""
        weight = self.weights[None, :, None, :]
        blended: FloatArray = weight * neural + (1.0 - weight) * self.linear.predict(windows)
        return blended
