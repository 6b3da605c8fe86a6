"""The sliding window that turns telemetry samples into the DRTG's dynamic indicators.

The window (default 5 s) is cut into :data:`WINDOW_BUCKETS` buckets of equal length;
each holds, per edge and per dynamic indicator, the sum and the count of the samples
that fell in it. A bucket is emptied when time moves past it, so a value is the mean
of its samples in the last ``window_s`` seconds at bucket resolution, and expiring
old samples costs one pass over a bucket rather than a timestamp per sample.
"""

from __future__ import annotations

import numpy as np

from kubesage.core.arrays import FloatArray, IntArray
from kubesage.core.topology.indicators import DYNAMIC, Indicator

DEFAULT_WINDOW_S = 5.0
WINDOW_BUCKETS = 5


class SampleWindow:
    """Per-edge sums and counts of the dynamic indicators over the last ``window_s``."""

    def __init__(self, num_edges: int, window_s: float) -> None:
        self.window_s = window_s
        shape = (WINDOW_BUCKETS, num_edges, len(DYNAMIC))
        self._sums = np.zeros(shape)
        self._counts = np.zeros(shape, dtype=np.int64)
        self._bucket_epoch = np.full(WINDOW_BUCKETS, -1, dtype=np.int64)

    def add(
        self, edges: IntArray, indicator: Indicator, samples: FloatArray, timestamp_s: float
    ) -> IntArray:
        """Record ``samples`` of a dynamic ``indicator`` on ``edges`` at ``timestamp_s``.

        Returns the edges whose windowed values may have changed (sorted, unique): the
        sampled ones and those whose samples just left the window.
        """
        epoch = int(timestamp_s // (self.window_s / WINDOW_BUCKETS))
        bucket = epoch % WINDOW_BUCKETS
        stale = [
            b for b in range(WINDOW_BUCKETS) if self._bucket_epoch[b] <= epoch - WINDOW_BUCKETS
        ]
        touched = edges
        if self._bucket_epoch[bucket] != epoch:
            stale.append(bucket)
        for b in set(stale):
            if self._bucket_epoch[b] >= 0:
                expired = np.flatnonzero(self._counts[b].any(axis=1))
                touched = np.concatenate([touched, expired])
            self._sums[b] = 0.0
            self._counts[b] = 0
            self._bucket_epoch[b] = -1
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
