"""The ST-GCN's linear highway: its neural forecast blended with a least-absolute-error
linear forecast, one weight per horizon step and metric, chosen on validation windows
and again at every forecast origin on the latest forecasts whose truth is known.

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
ends of the grid are candidates). Later data can change regime — a quiet hour after
busy ones — where a weight chosen before it no longer holds. So, with ``recent``
set, the weight is chosen again at every forecast origin from the forecasts of the
``recent`` latest origins whose truth is already known at that origin: each part's
forecast is recomputed there from the window (which holds :meth:`LinearHighway.lookback`
steps beyond the neural part's history), each candidate blend scored on those matured
cells as above; among equally good weights the one nearest the validation weight wins,
and where none of those cells was observed the validation weight is kept.
A forecast still reads nothing after its origin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.forecast.baselines import LeastAbsoluteForecaster
from kubesage.core.forecast.windows import Windows, earlier

BLEND_WEIGHTS = np.linspace(0.0, 1.0, 11)
"""The neural part's candidate weights, 0 (linear only) to 1 (neural only)."""
RECENT_ORIGINS = 12
"""Matured forecasts per horizon step the online choice scores (the anchor's 12 steps;
6 and 24 gave the same WAPE to within 0.002 in a trial on the shared hours)."""

NeuralPredict = Callable[[Windows], FloatArray]
"""Normalised neural forecasts ``(B, H, N, M)`` for windows."""
Made = dict[int, tuple[FloatArray, FloatArray]]
"""The highway's parts' forecasts ``(H, N, M)`` (neural, linear) by origin step."""


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
    """The fitted linear part, the validation blend weights ``(H, M)`` and how many recent
    matured origins choose the weights again at each forecast (0: the fixed weights)."""

    linear: LeastAbsoluteForecaster
    weights: FloatArray
    recent: int = 0

    @classmethod
    def fit(
        cls,
        neural: NeuralPredict,
        windows: Windows,
        train_index: IntArray,
        validation_index: IntArray,
        series_scale: FloatArray,
        recent: int = 0,
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
        return cls(LeastAbsoluteForecaster().fit(windows, series_scale), weights, recent)

    def lookback(self) -> int:
        """Input steps the forecast needs beyond the neural part's history: the origin of
        the oldest scored forecast, ``horizon + recent − 1`` steps back (0 when fixed)."""
        return self.weights.shape[0] + self.recent - 1 if self.recent > 0 else 0

    def blend(self, neural: FloatArray, windows: Windows) -> FloatArray:
        """``w · neural + (1 − w) · linear`` for normalised forecasts ``(B, H, N, M)``."""
        weight = self.weights[None, :, None, :]
        blended: FloatArray = weight * neural + (1.0 - weight) * self.linear.predict(windows)
        return blended

    def forecast(
        self,
        neural: NeuralPredict,
        windows: Windows,
        history: int,
        series_scale: FloatArray,
        memo: Made | None = None,
        offset: int = 0,
    ) -> FloatArray:
        """The blend for ``windows`` of ``history + lookback()`` steps, all cut from one
        panel (normalised ``(B, H, N, M)``), its weights chosen at each origin as the
        module says; ``series_scale (N, M)`` puts each series' error in its own units.

        ``memo``: the parts' forecasts already made, by origin (a window's origin +
        ``offset``: a clock shared by successive calls), taken from it instead of made
        again, and the new ones added (those older than the lookback dropped) — the live
        path, whose successive forecasts share all but one of their earlier origins."""
        if self.recent == 0:
            now = earlier(windows, 0, history)
            return self.blend(neural(now), now)
        lookback = self.lookback()
        if windows.inputs.shape[1] < history + lookback:
            raise ValueError(
                f"the online highway needs {history + lookback}-step windows, "
                f"got {windows.inputs.shape[1]}"
            )
        # Every origin a forecast is needed from: each window's own and the `lookback`
        # before it. Windows of one panel share most of them, so each is forecast once.
        made = windows.origins[:, None] - np.arange(lookback + 1)[None, :]  # (B, L + 1)
        _, first, which = np.unique(made, return_index=True, return_inverse=True)
        which = which.reshape(made.shape)
        parts = self._parts(neural, windows, first, history, memo, offset)  # (U, H, N, M) each
        errors = self.recent_errors(parts, which, windows, series_scale)
        weights = self.weights[None]  # the validation weights: the prior
        best = errors.min(axis=0)
        tied = errors <= best + 1e-9 * np.maximum(best, 1e-9)
        distance = np.where(tied, np.abs(BLEND_WEIGHTS[:, None, None, None] - weights), np.inf)
        chosen = BLEND_WEIGHTS[np.argmin(distance, axis=0)]  # (B, H, M)
        chosen = np.where(tied.all(axis=0), weights, chosen)[:, :, None, :]
        now = which[:, 0]
        blended: FloatArray = chosen * parts[0][now] + (1.0 - chosen) * parts[1][now]
        return blended

    def _parts(
        self,
        neural: NeuralPredict,
        windows: Windows,
        first: IntArray,
        history: int,
        memo: Made | None,
        offset: int,
    ) -> tuple[FloatArray, FloatArray]:
        """Both parts' forecasts ``(U, H, N, M)`` from the distinct origins, each cut from
        the window and shift of its ``first`` use (flat over ``(B, L + 1)``), or taken
        from ``memo`` where it holds the origin."""
        rows, shifts = np.divmod(first, self.lookback() + 1)
        if memo is None:
            cut = earlier(subset(windows, rows), shifts, history)
            return neural(cut), self.linear.predict(cut)
        at = windows.origins[rows] - shifts + offset
        new = np.array([int(origin) not in memo for origin in at], dtype=bool)
        shape = (len(at), *windows.targets.shape[1:])
        neural_parts, linear_parts = np.empty(shape), np.empty(shape)
        if new.any():
            cut = earlier(subset(windows, rows[new]), shifts[new], history)
            neural_parts[new], linear_parts[new] = neural(cut), self.linear.predict(cut)
        for row, origin in enumerate(int(origin) for origin in at):
            if new[row]:
                memo[origin] = (neural_parts[row].copy(), linear_parts[row].copy())
            else:
                neural_parts[row], linear_parts[row] = memo[origin]
        for origin in [o for o in memo if o < int(at.max()) - self.lookback()]:
            del memo[origin]
        return neural_parts, linear_parts

    def recent_errors(
        self,
        parts: tuple[FloatArray, FloatArray],
        which: IntArray,
        windows: Windows,
        series_scale: FloatArray,
    ) -> FloatArray:
        """Per candidate weight, window, horizon step and metric ``(W, B, H, M)``, the
        absolute error of the blend over the ``recent`` latest matured forecasts (pooled
        over entities, in their units). ``parts`` are the neural and linear forecasts
        from the distinct origins, ``which (B, L + 1)`` the one made ``shift`` steps
        before each window's origin."""
        horizon = self.weights.shape[0]
        batch, end = windows.inputs.shape[:2]
        metrics = windows.targets.shape[3]
        recent = windows.inputs[:, end - self.lookback() :]  # the steps scored forecasts target
        values, seen = recent[..., :metrics].astype(np.float64), recent[..., metrics:] > 0.5
        scale = series_scale[None, None]
        errors = np.zeros((len(BLEND_WEIGHTS), batch, horizon, metrics))
        for shift in range(1, self.lookback() + 1):
            # The forecast made `shift` steps ago has matured at steps h < shift; it is among
            # the `recent` latest matured ones for step h while shift ≤ h + recent.
            steps = np.arange(max(0, shift - self.recent), min(horizon, shift))
            past_neural = parts[0][which[:, shift]][:, steps]
            past_linear = parts[1][which[:, shift]][:, steps]
            at = self.lookback() - shift + steps
            # w · neural + (1 − w) · linear − truth = miss + w · gap, for every weight w.
            miss, gap = past_linear - values[:, at], past_neural - past_linear
            weight = seen[:, at] * scale
            for k, w in enumerate(BLEND_WEIGHTS):
                errors[k][:, steps] += (np.abs(miss + w * gap) * weight).sum(axis=2)
        return errors
