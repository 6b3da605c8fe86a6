"""The ST-GCN's linear highway: its neural forecast blended with a least-absolute-error
linear forecast and the series' floor, shares per horizon step and metric chosen on
validation windows and again at every forecast origin on the latest forecasts whose
truth is known.

LSTNet runs a linear autoregressive component beside its neural network for the
same reason: on sparse, bursty series a neural forecaster can lose the scale that a
linear model over recent levels keeps. Here the linear part is the ``linear_lad``
model (:class:`~kubesage.core.forecast.baselines.LeastAbsoluteForecaster`). The
blend is ``a · neural + (1 − a − s) · linear + s · floor``, where the floor is zero
in each series' own units (the metrics forecast are utilisations, memory and rates):
a share ``s`` of it shrinks the forecast toward zero, which is what the least absolute
error asks of a series that is mostly idle while both parts expect its recent level.
The shares ``(a, s)`` are tenths (:data:`BLEND_WEIGHTS`) summing to at most one
(:func:`blend_candidates`); for each horizon step and metric the one whose blend has
the least absolute error on the validation windows, pooled in each series' own units
(what WAPE pools), is kept. The linear part is fitted on the training windows for that
choice, then refitted on all of them, as the ``linear_lad`` baseline is. Files before
the floor choose among convex blends of the two parts only (``convex``).

On the validation windows the blend is never worse than either part alone (both
are candidates). Later data can change regime — a quiet hour after busy ones — where
shares chosen before it no longer hold. So, with ``recent`` set, the shares are chosen
again at every forecast origin from the forecasts of the ``recent`` latest origins
whose truth is already known at that origin: each part's forecast is recomputed there
from the window (which holds :meth:`LinearHighway.lookback` steps beyond the neural
part's history), each candidate blend scored on those matured cells as above; among
equally good blends the one nearest the validation shares wins, and where none of
those cells was observed the validation shares are kept. A forecast still reads
nothing after its origin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.forecast.baselines import LeastAbsoluteForecaster
from kubesage.core.forecast.windows import Windows, earlier

BLEND_WEIGHTS = np.linspace(0.0, 1.0, 11)
"""The candidate shares of the neural part and of the floor: 0 to 1 in tenths."""
BlendSet = Literal["floored", "convex", "linear"]
"""The blends a highway chooses among: ``floored`` (the default) every share of the
neural part, the linear part and the floor; ``convex`` the two parts only (files before
the floor); ``linear`` the linear part and the floor only (the ``stgcn_no_neural``
ablation: what the online choice gives without the neural forecast)."""
BLEND_SETS: tuple[BlendSet, ...] = ("floored", "convex", "linear")
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


def blend_candidates(blends: BlendSet) -> FloatArray:
    """``(W, 2)``: each candidate blend's (neural, floor) shares, the linear part taking
    the rest; the floor's share ascending, then the neural part's, so that where
    candidates tie the first wins — the least shrunk, then the most linear."""
    tenths = len(BLEND_WEIGHTS) - 1
    pairs = [
        (BLEND_WEIGHTS[i], BLEND_WEIGHTS[j])
        for j in range(tenths + 1)
        for i in range(tenths + 1 - j)
        if blends == "floored" or (j == 0 if blends == "convex" else i == 0)
    ]
    return np.array(pairs)


def combine(
    shares: FloatArray, neural: FloatArray, linear: FloatArray, floor: FloatArray
) -> FloatArray:
    """``a · neural + (1 − a − s) · linear + s · floor`` for ``shares[..., 0] = a`` and
    ``shares[..., 1] = s`` broadcast against the forecasts (a convex blend's floor term is
    an exact zero, so its values are those of ``a · neural + (1 − a) · linear``)."""
    a, s = shares[..., 0], shares[..., 1]
    mixed: FloatArray = a * neural + np.maximum((1.0 - a) - s, 0.0) * linear + s * floor
    return mixed


def choose_weights(
    neural: FloatArray,
    linear: FloatArray,
    targets: FloatArray,
    mask: np.ndarray,
    series_scale: FloatArray,
    series_floor: FloatArray,
    blends: BlendSet = "floored",
) -> FloatArray:
    """Per horizon step and metric ``(H, M, 2)``, the shares of
    :func:`blend_candidates` whose blend has the least absolute error over ``mask``, each
    series' error in its own units (normalised error × ``series_scale (N, M)``);
    ``series_floor (N, M)`` is each series' zero, normalised. Ties go to the first."""
    scale, floor = series_scale[None, None], series_floor[None, None]  # (1, 1, N, M)
    candidates = blend_candidates(blends)
    errors = np.stack(
        [
            (np.abs(combine(c, neural, linear, floor) - targets) * scale * mask).sum(axis=(0, 2))
            for c in candidates
        ]
    )  # (W, H, M)
    chosen: FloatArray = candidates[np.argmin(errors, axis=0)]
    return chosen


@dataclass
class LinearHighway:
    """The fitted linear part, the validation blend shares ``(H, M, 2)`` (neural, floor;
    see :func:`combine`), how many recent matured origins choose them again at each
    forecast (0: the fixed shares) and the blends it chooses among."""

    linear: LeastAbsoluteForecaster
    weights: FloatArray
    recent: int = 0
    blends: BlendSet = "floored"

    @cached_property
    def candidates(self) -> FloatArray:
        """``(W, 2)``: the blends it chooses among (:func:`blend_candidates`), made once:
        every forecast reads them."""
        return blend_candidates(self.blends)

    @classmethod
    def fit(
        cls,
        neural: NeuralPredict,
        windows: Windows,
        train_index: IntArray,
        validation_index: IntArray,
        series_scale: FloatArray,
        series_floor: FloatArray,
        recent: int = 0,
        blends: BlendSet = "floored",
    ) -> LinearHighway:
        """Choose the shares on ``validation_index`` (the linear part fitted on
        ``train_index``), then refit the linear part on every window."""
        validation = subset(windows, validation_index)
        held_out = LeastAbsoluteForecaster().fit(subset(windows, train_index), series_scale)
        weights = choose_weights(
            neural(validation),
            held_out.predict(validation),
            validation.targets.astype(np.float64),
            validation.target_mask,
            series_scale,
            series_floor,
            blends,
        )
        linear = LeastAbsoluteForecaster().fit(windows, series_scale)
        return cls(linear, weights, recent, blends)

    def lookback(self) -> int:
        """Input steps the forecast needs beyond the neural part's history: the origin of
        the oldest scored forecast, ``horizon + recent − 1`` steps back (0 when fixed)."""
        return self.weights.shape[0] + self.recent - 1 if self.recent > 0 else 0

    def blend(self, neural: FloatArray, windows: Windows, series_floor: FloatArray) -> FloatArray:
        """The validation shares' blend for normalised forecasts ``(B, H, N, M)``."""
        shares = self.weights[None, :, None]  # (1, H, 1, M, 2)
        return combine(shares, neural, self.linear.predict(windows), series_floor[None, None])

    def forecast(
        self,
        neural: NeuralPredict,
        windows: Windows,
        history: int,
        series_scale: FloatArray,
        series_floor: FloatArray,
        memo: Made | None = None,
        offset: int = 0,
    ) -> FloatArray:
        """The blend for ``windows`` of ``history + lookback()`` steps, all cut from one
        panel (normalised ``(B, H, N, M)``), its shares chosen at each origin as the
        module says; ``series_scale (N, M)`` puts each series' error in its own units,
        ``series_floor (N, M)`` is each series' zero, normalised.

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
            return self.blend(neural(now), now, series_floor)
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
        horizon, metrics = self.weights.shape[:2]
        candidates = self.candidates
        scored = np.zeros((len(origins), horizon), dtype=bool)  # (origin, step) some window scores
        for h in range(horizon):
            scored[np.unique(which[:, h + 1 : h + self.recent + 1]), h] = True
        errors = np.full((len(origins), horizon, len(candidates), metrics), np.nan)
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
                parts,
                slot[pairs[:, 0]],
                pairs[:, 1],
                origins[pairs[:, 0]],
                windows,
                series_scale,
                series_floor,
            )
        if memo is not None:
            self._remember(memo, at, errors, slot, parts)
        # Per window, step and metric, each blend's error over its `recent` latest
        # matured forecasts: those made h + 1 to h + recent steps before its origin.
        recent = np.stack(
            [errors[which[:, h + 1 : h + self.recent + 1], h].sum(axis=1) for h in range(horizon)],
            axis=1,
        )  # (B, H, W, M)
        chosen = self._choose(recent)[:, :, None]  # (B, H, 1, M, 2)
        now = slot[which[:, 0]]
        return combine(chosen, parts[0][now], parts[1][now], series_floor[None, None])

    def _choose(self, errors: FloatArray) -> FloatArray:
        """Per window, step and metric ``(B, H, M, 2)``, the shares with the least error
        (``errors (B, H, W, M)``); among tied ones the nearest the validation shares, and
        the validation shares where all are tied (nothing was observed)."""
        candidates = self.candidates
        best = errors.min(axis=2, keepdims=True)
        tied = errors <= best + 1e-9 * np.maximum(best, 1e-9)
        prior = self.weights[None, :, None]  # (1, H, 1, M, 2)
        apart = np.abs(candidates[None, None, :, None] - prior).sum(axis=-1)  # (1, H, W, M)
        distance = np.where(tied, apart, np.inf)
        chosen = candidates[np.argmin(distance, axis=2)]  # (B, H, M, 2)
        picked: FloatArray = np.where(tied.all(axis=2)[..., None], self.weights[None], chosen)
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
        series_floor: FloatArray,
    ) -> FloatArray:
        """Per (origin, step) pair ``(P, W, M)``: each candidate blend's absolute error
        at the pair's target, summed over entities in their own units. ``rows``: the
        pairs' origins' rows in ``parts``; ``origins``: their steps on the windows' clock."""
        start, truth, seen = self._strip(windows)
        entities, metrics = series_scale.shape
        candidates = self.candidates
        out = np.empty((len(rows), len(candidates), metrics))
        chunk = max(1, SCORED_CELLS // max(entities * metrics, 1))
        for lo in range(0, len(rows), chunk):
            part = slice(lo, lo + chunk)
            target = origins[part] + steps[part] - start
            neural, linear = parts[0][rows[part], steps[part]], parts[1][rows[part], steps[part]]
            # The blend − truth = miss + a · gap + s · drop, for every candidate (a, s);
            # each neural share's `miss + a · gap` is made once for all its floor shares.
            miss, gap = linear - truth[target], neural - linear
            drop = series_floor[None] - linear
            weight = seen[target] * series_scale[None]
            for a in np.unique(candidates[:, 0]):
                base = miss + a * gap
                for k in np.flatnonzero(candidates[:, 0] == a):
                    s = candidates[k, 1]
                    error = base + s * drop if s else base
                    out[part, k] = (np.abs(error) * weight).sum(axis=1)
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
