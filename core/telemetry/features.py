"""Per-node feature vectors of fixed width from metric-map columns.

A collector gives raw columns per node (``NodeMetrics`` at one instant,
``MetricHistory`` over time; NaN where a series is absent). :class:`FeatureBuilder`
turns a window of them into one row per node: for every column, the windowed
statistics the map asks for (``last``, ``mean``, ``max``, ``p95``, ``slope`` per
second) and a ``missing`` flag — the share of the window without a sample (0 =
complete, 1 = never seen). Where a column has no sample in the whole window its
statistics hold the map's declared ``impute`` value and the flag is 1: nothing is
zero-filled without saying so. ``last`` is the latest sample in the window (held over
a trailing gap); ``slope`` is the least-squares slope and reads 0 with fewer than two
samples.

Feature names are ``<column>:<stat>`` then ``<column>:missing`` per column, in the
map's column order, so the layout is stable across runs and a saved PCA model can
check it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError
from kubesage.core.telemetry.metric_map import MetricMap

MISSING = "missing"


@dataclass(frozen=True)
class NodeMetrics:
    """Raw metric-map columns per node at one instant: ``values[n, c]`` (NaN = no series)."""

    nodes: tuple[str, ...]
    columns: tuple[str, ...]
    values: FloatArray
    taken_at: float

    def __post_init__(self) -> None:
        if self.values.shape != (len(self.nodes), len(self.columns)):
            raise InputError(
                f"values shape {self.values.shape} does not match "
                f"{len(self.nodes)} nodes × {len(self.columns)} columns"
            )

    def column(self, name: str) -> FloatArray:
        """One column over the nodes (KeyError-free: InputError for an unknown name)."""
        if name not in self.columns:
            raise InputError(f"no column {name!r}")
        return np.asarray(self.values[:, self.columns.index(name)], dtype=np.float64)


@dataclass(frozen=True)
class MetricHistory:
    """Raw columns over time: ``values[t, n, c]`` at ``times_s[t]`` (NaN = no sample)."""

    times_s: FloatArray
    nodes: tuple[str, ...]
    columns: tuple[str, ...]
    values: FloatArray

    def __post_init__(self) -> None:
        expected = (len(self.times_s), len(self.nodes), len(self.columns))
        if self.values.shape != expected:
            raise InputError(f"values shape {self.values.shape} does not match {expected}")

    @property
    def steps(self) -> int:
        return len(self.times_s)

    def window(self, end: int, steps: int) -> MetricHistory:
        """The ``steps`` steps ending at index ``end`` (inclusive; fewer at the start)."""
        start = max(0, end - steps + 1)
        return MetricHistory(
            self.times_s[start : end + 1], self.nodes, self.columns, self.values[start : end + 1]
        )

    def aligned(self, nodes: Sequence[str]) -> MetricHistory:
        """The same history over exactly ``nodes`` (a node without data gets NaN rows)."""
        index = {node: i for i, node in enumerate(self.nodes)}
        values = np.full((self.steps, len(nodes), len(self.columns)), np.nan)
        for i, node in enumerate(nodes):
            if node in index:
                values[:, i, :] = self.values[:, index[node], :]
        return MetricHistory(self.times_s, tuple(nodes), self.columns, values)

    @classmethod
    def from_snapshots(cls, snapshots: Sequence[NodeMetrics]) -> MetricHistory:
        """Stack instant snapshots (a live rolling window) over the union of their nodes."""
        if not snapshots:
            raise InputError("no snapshots to stack")
        columns = snapshots[0].columns
        if any(s.columns != columns for s in snapshots):
            raise InputError("snapshots disagree on their columns (another metric map?)")
        nodes = tuple(sorted({node for s in snapshots for node in s.nodes}))
        index = {node: i for i, node in enumerate(nodes)}
        values = np.full((len(snapshots), len(nodes), len(columns)), np.nan)
        for t, snapshot in enumerate(snapshots):
            rows = [index[node] for node in snapshot.nodes]
            values[t, rows, :] = snapshot.values
        times = np.array([s.taken_at for s in snapshots], dtype=np.float64)
        return cls(times, nodes, columns, values)


@dataclass(frozen=True)
class NodeFeatures:
    """One fixed-width feature row per node: ``values[n, d]`` named ``names[d]``."""

    nodes: tuple[str, ...]
    names: tuple[str, ...]
    values: FloatArray

    def row(self, node: str) -> FloatArray:
        if node not in self.nodes:
            raise InputError(f"no features for node {node!r}")
        return np.asarray(self.values[self.nodes.index(node)], dtype=np.float64)

    def feature(self, name: str) -> FloatArray:
        if name not in self.names:
            raise InputError(f"no feature {name!r}")
        return np.asarray(self.values[:, self.names.index(name)], dtype=np.float64)


class FeatureBuilder:
    """Computes :class:`NodeFeatures` from windows of raw columns, as the map lays out."""

    def __init__(self, metric_map: MetricMap) -> None:
        self.columns = metric_map.columns
        self.stats = tuple(metric_map.spec.stats)
        self.impute = np.array(
            [metric.spec.impute for metric in metric_map.metrics for _ in metric.columns],
            dtype=np.float64,
        )
        self.names = tuple(
            f"{column}:{stat}" for column in self.columns for stat in (*self.stats, MISSING)
        )

    @property
    def width(self) -> int:
        return len(self.names)

    def node_features(self, window: MetricHistory) -> NodeFeatures:
        """One row per node from every step of ``window``."""
        self._check(window.columns)
        if window.steps == 0:
            raise InputError("an empty window has no features")
        values = self._stats(window.times_s, window.values)
        return NodeFeatures(window.nodes, self.names, values)

    def instant_features(self, snapshot: NodeMetrics) -> NodeFeatures:
        """Rows from one instant (mean = max = p95 = last, slope 0)."""
        return self.node_features(
            MetricHistory(
                np.array([snapshot.taken_at]),
                snapshot.nodes,
                snapshot.columns,
                snapshot.values[np.newaxis],
            )
        )

    def training_matrix(self, history: MetricHistory, window_steps: int) -> FloatArray:
        """Rows for fitting PCA: the features of every node over a sliding window of
        ``window_steps`` steps ending at each step that has a full window. Rows of a node
        with no sample at all in their window carry no information and are left out."""
        self._check(history.columns)
        if window_steps < 1:
            raise InputError(f"window_steps must be at least 1, got {window_steps}")
        if history.steps < window_steps:
            raise InputError(
                f"history has {history.steps} steps, fewer than one window of {window_steps}"
            )
        rows = []
        for end in range(window_steps - 1, history.steps):
            window = history.window(end, window_steps)
            features = self._stats(window.times_s, window.values)
            seen = np.isfinite(window.values).any(axis=(0, 2))
            rows.append(features[seen])
        return np.concatenate(rows, axis=0)

    def _check(self, columns: tuple[str, ...]) -> None:
        if columns != self.columns:
            raise InputError(
                "the data's columns are not the metric map's "
                f"({len(columns)} vs {len(self.columns)}; first differing: "
                f"{next((a for a, b in zip(columns, self.columns, strict=False) if a != b), '?')})"
            )

    def _stats(self, times_s: FloatArray, values: FloatArray) -> FloatArray:
        """``values[t, n, c]`` → ``features[n, c * (stats + 1)]`` (vectorised over n, c)."""
        steps, nodes, columns = values.shape
        observed = np.isfinite(values)
        count = observed.sum(axis=0)
        present = count > 0
        filled = np.where(observed, values, 0.0)
        out: dict[str, FloatArray] = {}
        # last: the latest observed step per (node, column)
        last_index = steps - 1 - np.argmax(observed[::-1], axis=0)
        out["last"] = np.take_along_axis(values, last_index[np.newaxis], axis=0)[0]
        out["mean"] = filled.sum(axis=0) / np.maximum(count, 1)
        out["max"] = np.where(observed, values, -np.inf).max(axis=0)
        if "p95" in self.stats:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells: imputed below
                out["p95"] = np.nanpercentile(np.where(observed, values, np.nan), 95, axis=0)
        times = np.broadcast_to(times_s[:, np.newaxis, np.newaxis], values.shape)
        t_mean = np.where(observed, times, 0.0).sum(axis=0) / np.maximum(count, 1)
        dt = np.where(observed, times - t_mean, 0.0)
        dv = np.where(observed, values - out["mean"], 0.0)
        denominator = (dt * dt).sum(axis=0)
        out["slope"] = np.where(
            (count >= 2) & (denominator > 0),
            (dt * dv).sum(axis=0) / np.where(denominator > 0, denominator, 1.0),
            0.0,
        )
        impute = np.broadcast_to(self.impute, (nodes, columns))
        planes = [np.where(present, out[stat], impute) for stat in self.stats]
        planes.append(1.0 - count / max(steps, 1))
        stacked = np.stack(planes, axis=2)  # (nodes, columns, stats + 1)
        return np.asarray(stacked.reshape(nodes, columns * (len(self.stats) + 1)), dtype=np.float64)
