"""Normalisation per series and cutting panels into (past T → future H) windows.

Statistics come from the training steps only. A window's input holds, per step,
the normalised values (0 where missing) and the mask, so a model always knows
which inputs are real; targets carry their own mask and unobserved targets never
enter a loss or a score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubesage.core.arrays import BoolArray, FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.panel import MetricPanel

MIN_STD = 1e-6
MAX_WINDOW_SERIES = 500_000
"""Training windows × entities a model is fitted on at most (about 1 GB of windows at
eight metrics): beyond it, origins are thinned evenly (see :func:`thinned_origins`)."""


@dataclass(frozen=True)
class Normaliser:
    """Per-series (entity × metric) mean and scale, from the training steps."""

    mean: FloatArray  # (N, M)
    std: FloatArray  # (N, M)

    @classmethod
    def fit(cls, panel: MetricPanel, until_step: int) -> Normaliser:
        values = panel.values[:until_step]
        mask = panel.mask[:until_step]
        count = mask.sum(axis=0)
        total = np.where(mask, values, 0.0).sum(axis=0)
        mean = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
        # Entities without training data fall back to the metric's pooled statistics.
        pooled_mean = np.where(mask, values, 0.0).sum(axis=(0, 1)) / np.maximum(
            mask.sum(axis=(0, 1)), 1
        )
        mean = np.where(count > 0, mean, pooled_mean[None, :])
        deviation = np.where(mask, (values - mean[None]) ** 2, 0.0).sum(axis=0)
        std = np.sqrt(np.divide(deviation, count, out=np.zeros_like(deviation), where=count > 1))
        pooled = np.sqrt(
            np.where(mask, (values - pooled_mean[None, None]) ** 2, 0.0).sum(axis=(0, 1))
            / np.maximum(mask.sum(axis=(0, 1)), 1)
        )
        std = np.where(count > 1, std, pooled[None, :])
        std = np.maximum(std, np.maximum(MIN_STD, 1e-3 * np.abs(mean)))
        return cls(mean=mean, std=std)

    def apply(self, values: FloatArray) -> FloatArray:
        return (values - self.mean) / self.std

    def invert(self, values: FloatArray) -> FloatArray:
        return values * self.std + self.mean


@dataclass(frozen=True)
class Windows:
    """``inputs (B, T, N, 2M)``, ``targets (B, H, N, M)`` normalised, ``target_mask (B, H, N, M)``,
    ``last (B, N, M)`` the last observed normalised value per series, ``origins (B,)``."""

    inputs: npt.NDArray[np.float32]
    targets: npt.NDArray[np.float32]
    target_mask: BoolArray
    last: npt.NDArray[np.float32]
    origins: IntArray


def last_observed(values: FloatArray, mask: BoolArray, fallback: FloatArray) -> FloatArray:
    """Per series, the last observed value along axis 0 (``fallback`` if none)."""
    steps = values.shape[0]
    index = np.where(mask, np.arange(steps)[:, None, None], -1).max(axis=0)
    picked = np.take_along_axis(values, np.maximum(index, 0)[None], axis=0)[0]
    return np.where(index >= 0, picked, fallback)


def earlier(windows: Windows, shift: int | IntArray, steps: int) -> Windows:
    """The windows of the origins ``shift`` steps before ``windows``' own (one shift for
    all, or one per window), ``steps`` input steps each, cut from longer windows (``shift
    + steps`` at most their length). Their ``last`` is recomputed from the cut, as
    :func:`make_windows` computes it; targets are not carried (zeros, unobserved)."""
    batch, length = windows.inputs.shape[:2]
    shifts = np.broadcast_to(np.asarray(shift, dtype=np.int64), (batch,))
    if steps < 1 or (shifts.size and (shifts.min() < 0 or shifts.max() + steps > length)):
        raise ValueError(f"cannot cut {steps} steps {shift} earlier from {length}-step windows")
    if np.ndim(shift) == 0:
        inputs = windows.inputs[:, length - int(shift) - steps : length - int(shift)]
    else:
        at = (length - shifts)[:, None] + np.arange(-steps, 0)[None, :]
        inputs = windows.inputs[np.arange(batch)[:, None], at]
    metrics = windows.targets.shape[3]
    values, seen = inputs[..., :metrics], inputs[..., metrics:] > 0.5
    index = np.where(seen, np.arange(steps)[None, :, None, None], -1).max(axis=1)
    picked = np.take_along_axis(values, np.maximum(index, 0)[:, None], axis=1)[:, 0]
    return Windows(
        inputs=inputs,
        targets=np.zeros_like(windows.targets),
        target_mask=np.zeros_like(windows.target_mask),
        last=np.where(index >= 0, picked, 0.0).astype(np.float32),
        origins=windows.origins - shifts,
    )


def thinned_origins(origins: IntArray, entities: int, budget: int, keep_at_least: int) -> IntArray:
    """``origins`` thinned evenly so that windows × ``entities`` stays within ``budget``
    (never below ``keep_at_least`` windows); unchanged when they already fit.

    Consecutive origins share all but one input step, so an even stride over the
    whole period keeps its variety (day and night, bursts) at a fraction of the
    memory and training time that every origin of a large cluster would take.
    """
    if entities <= 0:
        return origins  # no series to bound
    keep = max(keep_at_least, budget // entities)
    if origins.size <= keep:
        return origins
    picked = np.unique(np.linspace(0, origins.size - 1, keep).round().astype(np.int64))
    return origins[picked]


def make_windows(
    panel: MetricPanel,
    normaliser: Normaliser,
    origins: IntArray,
    *,
    history: int,
    horizon: int,
) -> Windows:
    """Windows whose forecast starts at each origin step (history = steps before it)."""
    if np.any(origins < history):
        raise InputError(f"an origin leaves less than {history} steps of history")
    norm = normaliser.apply(panel.values)
    norm = np.where(panel.mask, norm, 0.0)
    mask = panel.mask.astype(np.float64)
    # float32 before cutting: the windows repeat every step `history` times.
    features = np.concatenate([norm, mask], axis=2).astype(np.float32)  # (S, N, 2M)
    steps = panel.steps
    past = origins[:, None] + np.arange(-history, 0)[None, :]
    inputs = features[past]  # (B, T, N, 2M)
    future = origins[:, None] + np.arange(horizon)[None, :]
    valid = future < steps
    future_clipped = np.minimum(future, steps - 1)
    targets = norm[future_clipped]
    target_mask = panel.mask[future_clipped] & valid[:, :, None, None]
    zeros = np.zeros(normaliser.mean.shape)
    last = np.stack(
        [last_observed(norm[o - history : o], panel.mask[o - history : o], zeros) for o in origins]
    )
    return Windows(
        inputs=inputs,
        targets=targets.astype(np.float32),
        target_mask=target_mask,
        last=last.astype(np.float32),
        origins=origins.astype(np.int64),
    )
