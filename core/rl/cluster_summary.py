"""What the PPO policy sees of the whole cluster: 64 quantiles of four per-node series.

The series, over the GPU nodes (every node when there is none): free GPU share, free
CPU share, free memory share, share of whole free GPUs (``GLOBAL_SERIES``). Their 64
quantiles each (``np.quantile``'s default, linear interpolation) make the 256 numbers
of ``GLOBAL_RAW``; quantiles keep the vector one size on any cluster size.

Computed from scratch, that is four selections over every GPU node — about 1.5 ms at
10,000 nodes, most of the learned policy's decision, paid again for every pod because
each placement changes one node. :class:`ClusterSummary` keeps each series sorted and
moves only the nodes whose stamp (``ClusterState.node_version``) changed since it last
looked, so a decision after one placement costs a few sorted-array shifts and the
interpolation. Its vector is bit-for-bit :func:`global_raw`'s (tested against
``np.quantile``).
"""

from __future__ import annotations

import numpy as np

from kubesage.core.arrays import Float32Array, FloatArray, IntArray
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import GPU_MILLI_PER_GPU

QUANTILES = 64
GLOBAL_SERIES = ("gpu_free", "cpu_free", "memory_free", "gpu_whole_free")
GLOBAL_RAW = QUANTILES * len(GLOBAL_SERIES)
POINTS = np.linspace(0.0, 1.0, QUANTILES)

REBUILD_SHARE = 0.02
"""Past this share of the summarised nodes changed at once, sort afresh instead."""


def share(free: IntArray, capacity: IntArray) -> Float32Array:
    """``free / capacity`` as float32, 0 where the capacity is 0."""
    return np.divide(
        free, capacity, out=np.zeros(free.shape, dtype=np.float64), where=capacity > 0
    ).astype(np.float32)


def summarised_nodes(state: ClusterState) -> IntArray:
    """The nodes the series run over: the GPU nodes, or every node when there is none."""
    gpu_nodes = np.flatnonzero(state.gpu_count > 0)
    return gpu_nodes if gpu_nodes.size else np.arange(state.num_nodes)


def series_of(state: ClusterState, nodes: IntArray) -> Float32Array:
    """``(len(GLOBAL_SERIES), len(nodes))``: each series at ``nodes``, in that order."""
    gpus = state.gpu_count[nodes]
    free = np.stack(
        [
            state.gpu_free_milli_node[nodes],
            state.cpu_free_milli[nodes],
            state.memory_free_mib[nodes],
            state.gpu_whole_free_count[nodes],
        ]
    )
    capacity = np.stack(
        [
            gpus * GPU_MILLI_PER_GPU,
            state.cpu_capacity_milli[nodes],
            state.memory_capacity_mib[nodes],
            gpus,
        ]
    )
    return share(free, capacity)


class _Interpolation:
    """``np.quantile(row, POINTS)`` (linear) of each row of an array whose rows are
    already sorted, with numpy's own index, weight and interpolation arithmetic, so the
    result is identical."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError("quantiles of an empty series")
        virtual = (count - 1) * POINTS
        previous = np.floor(virtual).astype(np.intp)
        following = previous + 1
        last = virtual >= count - 1
        previous[last] = -1  # numpy's own indices: -1, a row's last element, at the end
        following[last] = -1
        self.weight: FloatArray = np.asarray(virtual - previous, dtype=virtual.dtype)
        self.upper = np.broadcast_to(self.weight >= 0.5, (len(GLOBAL_SERIES), QUANTILES))
        # The same elements as positions in the flattened rows:
        rows = np.arange(len(GLOBAL_SERIES))[:, None] * count
        self.previous: IntArray = rows + np.where(last, count - 1, previous)
        self.following: IntArray = rows + np.where(last, count - 1, following)

    def __call__(self, ordered: Float32Array) -> Float32Array:
        """The quantiles of every row (``ordered`` is C-contiguous), concatenated, as
        float32."""
        flat = ordered.ravel()
        low, high = flat.take(self.previous), flat.take(self.following)
        step = high - low
        result: FloatArray = np.add(low, step * self.weight)
        np.subtract(high, step * (1 - self.weight), out=result, where=self.upper, casting="unsafe")
        return result.ravel().astype(np.float32)


def global_raw(state: ClusterState) -> Float32Array:
    """The 256 numbers describing the whole cluster, from scratch."""
    series = series_of(state, summarised_nodes(state))
    return _Interpolation(series.shape[1])(np.sort(series, axis=1))


def _move(ordered: Float32Array, change: Float32Array) -> None:
    """Replace one occurrence of ``change[0]`` in the sorted ``ordered`` by ``change[1]``,
    in place (``change`` in ``ordered``'s dtype: numpy searches a Python float several
    times slower)."""
    at, to = ordered.searchsorted(change).tolist()
    new = change[1]
    if to > at:
        ordered[at : to - 1] = ordered[at + 1 : to]
        ordered[to - 1] = new
    elif to < at:
        ordered[to + 1 : at + 1] = ordered[to:at]
        ordered[to] = new
    else:
        ordered[at] = new


class ClusterSummary:
    """:func:`global_raw` kept up to date across decisions (see the module docstring).

    One instance follows any number of states: a node's values are trusted while its
    stamp is the one they were read at (stamps are unique across states and their
    copies), and a state of another lineage is summarised afresh.
    """

    def __init__(self) -> None:
        self._lineage = -1
        self._stamp: IntArray = np.zeros(0, dtype=np.int64)
        """Every node's stamp when last read (the summarised ones matter)."""
        self._nodes: IntArray = np.zeros(0, dtype=np.int64)
        """The summarised nodes: column ``i`` of ``_values`` is node ``_nodes[i]``."""
        self._column: IntArray = np.zeros(0, dtype=np.int64)
        """Each node's column in ``_values``; -1 for a node not summarised."""
        self._values: Float32Array = np.zeros((len(GLOBAL_SERIES), 0), dtype=np.float32)
        self._sorted: Float32Array = self._values
        self._interpolate: _Interpolation | None = None
        self._vector: Float32Array | None = None

    def of(self, state: ClusterState) -> Float32Array:
        """``global_raw(state)`` (a fresh array each call)."""
        if self._lineage != state.lineage:  # (a lineage's nodes never change)
            self._rebuild(state)
        else:
            changed = np.flatnonzero(self._stamp != state.node_version)
            if changed.size > REBUILD_SHARE * self._values.shape[1]:
                self._rebuild(state)
            elif changed.size:
                self._update(state, changed)
        if self._vector is None:
            assert self._interpolate is not None
            self._vector = self._interpolate(self._sorted)
        return self._vector.copy()

    def _rebuild(self, state: ClusterState) -> None:
        nodes = summarised_nodes(state)
        self._lineage = state.lineage
        self._nodes = nodes
        self._stamp = state.node_version.copy()
        self._column = np.full(state.num_nodes, -1, dtype=np.int64)
        self._column[nodes] = np.arange(nodes.size)
        self._values = series_of(state, nodes)
        self._sorted = np.sort(self._values, axis=1)
        self._interpolate = _Interpolation(nodes.size)
        self._vector = None

    def _update(self, state: ClusterState, changed: IntArray) -> None:
        self._stamp[changed] = state.node_version[changed]
        columns = self._column[changed]
        columns = columns[columns >= 0]
        if columns.size == 0:
            return
        fresh = series_of(state, self._nodes[columns])
        old = self._values[:, columns]
        rows, at = np.nonzero(old != fresh)
        if rows.size:
            changes = np.stack([old[rows, at], fresh[rows, at]], axis=1)
            for row, change in zip(rows.tolist(), changes, strict=True):
                _move(self._sorted[row], change)
            self._values[:, columns] = fresh
            self._vector = None
