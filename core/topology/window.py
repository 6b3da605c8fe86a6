"""The sliding window that turns telemetry samples into the DRTG's dynamic indicators.

The window (default 5 s) is cut into :data:`WINDOW_BUCKETS` buckets of equal length;
each holds, per edge and per dynamic indicator, the sum and the count of the samples
that fell in it. Time is the newest sample's: a bucket is emptied when that moves past
it, so a value is the mean of its samples in the last ``window_s`` seconds at bucket
resolution, and expiring old samples costs one pass over a bucket rather than a
timestamp per sample. A sample already older than the window when it arrives (a
collector running far behind) is dropped and counted, never let displace newer ones.
"""

from __future__ import annotations

import math

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.errors import InputError
from kubesage.core.topology.indicators import DYNAMIC, Indicator

DEFAULT_WINDOW_S = 5.0
WINDOW_BUCKETS = 5
_EMPTY = np.iinfo(np.int64).min
"""The epoch of a bucket that holds no samples."""


class SampleWindow:
    """Per-edge sums and counts of the dynamic indicators over the last ``window_s``.

    The window ends at the newest sample seen so far (:attr:`latest_epoch`, in
    buckets), not at the wall clock: a sample from a collector running behind goes into
    its own bucket while that bucket is still in the window, and is dropped (counted in
    :attr:`late_samples`) once it is not. A late sample never empties a bucket that
    holds newer samples.
    """

    def __init__(self, num_edges: int, window_s: float) -> None:
        self.window_s = window_s
        shape = (WINDOW_BUCKETS, num_edges, len(DYNAMIC))
        self._sums = np.zeros(shape)
        self._counts = np.zeros(shape, dtype=np.int64)
        self._bucket_epoch = np.full(WINDOW_BUCKETS, _EMPTY, dtype=np.int64)
        self.latest_epoch: int | None = None
        """The bucket epoch of the newest sample recorded (None before the first)."""
        self.late_samples = 0
        """Samples dropped because they were older than the window when they arrived."""

    def add(
        self, edges: IntArray, indicator: Indicator, samples: FloatArray, timestamp_s: float
    ) -> IntArray:
        """Record ``samples`` of a dynamic ``indicator`` on ``edges`` at ``timestamp_s``.

        Returns the edges whose windowed values may have changed (sorted, unique): the
        sampled ones and those whose samples just left the window; none when the samples
        are older than the window (they are dropped and counted in :attr:`late_samples`).
        """
        if not math.isfinite(timestamp_s):
            raise InputError(f"sample timestamp must be a finite number, got {timestamp_s}")
        epoch = int(timestamp_s // (self.window_s / WINDOW_BUCKETS))
        latest = self.latest_epoch
        if latest is not None and epoch <= latest - WINDOW_BUCKETS:
            self.late_samples += int(edges.size)
            return np.empty(0, dtype=np.int64)
        touched = edges
        if latest is None or epoch > latest:
            self.latest_epoch = epoch
            for b in range(WINDOW_BUCKETS):
                held = int(self._bucket_epoch[b])
                if held != _EMPTY and held <= epoch - WINDOW_BUCKETS:
                    expired = np.flatnonzero(self._counts[b].any(axis=1))
                    touched = np.concatenate([touched, expired])
                    self._sums[b] = 0.0
                    self._counts[b] = 0
                    self._bucket_epoch[b] = _EMPTY
        # Every bucket now holds an epoch in (latest - WINDOW_BUCKETS, latest] or none,
        # so the one for ``epoch`` is empty or already holds ``epoch``: nothing to clear.
        bucket = epoch % WINDOW_BUCKETS
        self._bucket_epoch[bucket] = epoch
        column = DYNAMIC.index(indicator)
        np.add.at(self._sums[bucket, :, column], edges, samples)
        np.add.at(self._counts[bucket, :, column], edges, 1)
        return np.unique(touched)

    def overlay(self, edges: IntArray, rows: FloatArray) -> None:
        """Write the window's means into ``rows`` (one indicator row per edge of
        ``edges``), in place, for each dynamic indicator that has samples."""
        sums = self._sums[:, edges].sum(axis=0)
        counts = self._counts[:, edges].sum(axis=0)
        for column, indicator in enumerate(DYNAMIC):
            seen = counts[:, column] > 0
            rows[seen, indicator] = sums[seen, column] / counts[seen, column]
