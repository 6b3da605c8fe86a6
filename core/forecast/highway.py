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
from dataclasses import dataclass, field

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
SCORED_CELLS = 4_000_000
"""(Origin, step) pairs × entities × metrics scored at once, to bound memory."""


@dataclass
class Made:
    """What successive live forecasts share, by the absolute step of each origin.

    ``parts``: both parts' forecasts ``(H, N, M)`` (neural, linear), kept until every
    step a later call may score has been scored. ``errors``: each step's error per
    candidate weight ``(H, W, M)``, NaN until scored (a step already past every call's
    recent window stays so), kept while the origin is in the lookback. A target is
    scored once, when it is first known: a value that arrives later for a step already
    scored does not change it."""

    parts: dict[int, tuple[FloatArray, FloatArray]] = field(default_factory=dict)
    errors: dict[int, FloatArray] = field(default_factory=dict)


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

        Windows of one panel share most of the earlier origins they score, and each
        origin's error at a step is the same for every window that scores it: each
        distinct origin is forecast once, and each of its steps scored once.

        ``memo``: what earlier calls made, by origin (a window's origin + ``offset``: a
        clock shared by successive calls), taken from it instead of made again, and the
        new ones added — the live path, whose successive forecasts share all but one of
        their earlier origins, so that a call forecasts one new origin and scores the
        one step of each earlier forecast whose target has just become known."""
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
        # before it (`which`: the distinct origin `shift` steps before each window's).
        made = windows.origins[:, None] - np.arange(lookback + 1)[None, :]  # (B, L + 1)
        origins, first, which = np.unique(made, return_index=True, return_inverse=True)
        which = which.reshape(made.shape)
        horizon, metrics = self.weights.shape
        scored = np.zeros((len(origins), horizon), dtype=bool)  # (origin, step) some window scores
        for h in range(horizon):
            scored[np.unique(which[:, h + 1 : h + self.recent + 1]), h] = True
        errors = np.full((len(origins), horizon, len(BLEND_WEIGHTS), metrics), np.nan)
        at = origins + offset
        if memo is not None:
            for u, origin in enumerate(at.tolist()):
                if origin in memo.errors:
                    errors[u] = memo.errors[origin]
        todo = scored & np.isnan(errors[:, :, 0, 0])
        want = todo.any(axis=1)
        want[which[:, 0]] = True
        slot, parts = self._parts(neural, windows, first, want, history, memo, offset)
        pairs = np.argwhere(todo)
        if len(pairs):
            errors[pairs[:, 0], pairs[:, 1]] = self._scored_errors(
                parts, slot[pairs[:, 0]], pairs[:, 1], origins[pairs[:, 0]], windows, series_scale
            )
        if memo is not None:
            self._remember(memo, at, errors, slot, parts)
        # Per window, step and metric, each weight's error over its `recent` latest
        # matured forecasts: those made h + 1 to h + recent steps before its origin.
        recent = np.stack(
            [errors[which[:, h + 1 : h + self.recent + 1], h].sum(axis=1) for h in range(horizon)],
            axis=1,
        )  # (B, H, W, M)
        chosen = self._choose(recent)[:, :, None, :]
        now = slot[which[:, 0]]
        blended: FloatArray = chosen * parts[0][now] + (1.0 - chosen) * parts[1][now]
        return blended

    def _choose(self, errors: FloatArray) -> FloatArray:
        """Per window, step and metric ``(B, H, M)``, the weight with the least error
        (``errors (B, H, W, M)``); among tied ones the nearest the validation weight, and
        the validation weight where all are tied (nothing was observed)."""
        best = errors.min(axis=2, keepdims=True)
        tied = errors <= best + 1e-9 * np.maximum(best, 1e-9)
        prior = self.weights[None, :, None, :]
        distance = np.where(tied, np.abs(BLEND_WEIGHTS[None, None, :, None] - prior), np.inf)
        chosen = BLEND_WEIGHTS[np.argmin(distance, axis=2)]
        picked: FloatArray = np.where(tied.all(axis=2), self.weights[None], chosen)
        return picked

    def _parts(
        self,
        neural: NeuralPredict,
        windows: Windows,
        first: IntArray,
        want: np.ndarray,
        history: int,
        memo: Made | None,
        offset: int,
    ) -> tuple[IntArray, tuple[FloatArray, FloatArray]]:
        """Both parts' forecasts ``(K, H, N, M)`` from the distinct origins ``want``
        marks, and each origin's row in them (−1 where not wanted); each is cut from the
        window and shift of its ``first`` use (flat over ``(B, L + 1)``), or taken from
        ``memo`` where it holds the origin."""
        rows, shifts = np.divmod(first, self.lookback() + 1)
        slot = np.full(len(first), -1, dtype=np.int64)
        slot[want] = np.arange(int(want.sum()))
        at = windows.origins[rows] - shifts + offset
        kept = np.array([memo is not None and int(o) in memo.parts for o in at], dtype=bool)
        new = want & ~kept
        shape = (int(want.sum()), *windows.targets.shape[1:])
        neural_parts, linear_parts = np.empty(shape), np.empty(shape)
        if new.any():
            cut = earlier(subset(windows, rows[new]), shifts[new], history)
            neural_parts[slot[new]], linear_parts[slot[new]] = neural(cut), self.linear.predict(cut)
        if memo is not None:
            for u in np.flatnonzero(want & kept):
                neural_parts[slot[u]], linear_parts[slot[u]] = memo.parts[int(at[u])]
        return slot, (neural_parts, linear_parts)

    def _scored_errors(
        self,
        parts: tuple[FloatArray, FloatArray],
        rows: IntArray,
        steps: IntArray,
        origins: IntArray,
        windows: Windows,
        series_scale: FloatArray,
    ) -> FloatArray:
        """Per (origin, step) pair ``(P, W, M)``: each candidate blend's absolute error
        at the pair's target, summed over entities in their own units. ``rows``: the
        pairs' origins' rows in ``parts``; ``origins``: their steps on the windows' clock."""
        start, truth, seen = self._strip(windows)
        entities, metrics = series_scale.shape
        out = np.empty((len(rows), len(BLEND_WEIGHTS), metrics))
        chunk = max(1, SCORED_CELLS // max(entities * metrics, 1))
        for lo in range(0, len(rows), chunk):
            part = slice(lo, lo + chunk)
            target = origins[part] + steps[part] - start
            neural, linear = parts[0][rows[part], steps[part]], parts[1][rows[part], steps[part]]
            # w · neural + (1 − w) · linear − truth = miss + w · gap, for every weight w.
            miss, gap = linear - truth[target], neural - linear
            weight = seen[target] * series_scale[None]
            for k, w in enumerate(BLEND_WEIGHTS):
                out[part, k] = (np.abs(miss + w * gap) * weight).sum(axis=1)
        return out

    def _strip(self, windows: Windows) -> tuple[int, FloatArray, np.ndarray]:
        """The step the strip starts at (on the windows' clock), and the normalised values
        and their masks ``(S, N, M)`` at every step the scored forecasts can target: the
        ``lookback()`` steps before each window's origin, from the earliest window's to the
        latest's (windows of one panel agree where they overlap)."""
        lookback, metrics = self.lookback(), windows.targets.shape[3]
        start = int(windows.origins.min()) - lookback
        steps = int(windows.origins.max()) - start
        recent = windows.inputs[:, windows.inputs.shape[1] - lookback :]
        where = (windows.origins - start)[:, None] + np.arange(-lookback, 0)[None, :]
        values = np.zeros((steps, *recent.shape[2:3], metrics))
        seen = np.zeros(values.shape, dtype=bool)
        values[where], seen[where] = recent[..., :metrics], recent[..., metrics:] > 0.5
        return start, values, seen

    def _remember(
        self,
        memo: Made,
        at: IntArray,
        errors: FloatArray,
        slot: IntArray,
        parts: tuple[FloatArray, FloatArray],
    ) -> None:
        """Keep the scored errors of the origins in the lookback, and the parts of those
        with a step a later call may still score (its target not yet known)."""
        newest = int(at.max())
        for u, origin in enumerate(at.tolist()):
            memo.errors[origin] = errors[u].copy()
            if slot[u] >= 0 and origin not in memo.parts:
                memo.parts[origin] = (parts[0][slot[u]].copy(), parts[1][slot[u]].copy())
        for origin in list(memo.errors):
            if origin < newest - self.lookback():
                del memo.errors[origin]
        for origin in list(memo.parts):
            # Later calls score steps from `newest + 1 − origin − recent` on (from one
            # lower here, to be safe); once those have all been scored the forecasts are
            # no longer needed.
            later = max(0, newest - origin - self.recent)
            if origin not in memo.errors or not np.isnan(memo.errors[origin][later:, 0, 0]).any():
                del memo.parts[origin]
