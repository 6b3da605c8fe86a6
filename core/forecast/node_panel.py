"""Prometheus history as a forecaster's panel: the nodes are the entities.

``kubesage forecast train --prometheus`` trains on the cluster's own telemetry, the same
series the control loop's forecast panel keeps (:mod:`kubesage.core.loop.forecasts`):
per node, the metric map's columns under their map names (``dcgm.gpu_util_percent.gpu0``
…). So a model trained here knows the loop's series by name, with no renaming, and
``kubesage serve --forecast-model`` can plug it in.

Columns are chosen by shell-style patterns (``dcgm.gpu_util_percent.gpu*``: every
per-GPU utilisation slot). A chosen column that no node ever reported (the slots past a
node's last GPU, on every node) is left out; a node that reported none of the chosen
columns is left out; both are counted, never dropped unsaid. Missing samples stay
masked — a 4-GPU node's ``gpu7`` is masked, not zero.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError
from kubesage.core.forecast.panel import MetricPanel

DEFAULT_COLUMNS = ("dcgm.gpu_util_percent.gpu*",)
"""What the loop's forecast-aware placement reads: each GPU's utilisation."""


class NodeHistory(Protocol):
    """Columns per node over time, ``values[t, n, c]`` at ``times_s[t]`` (NaN: no sample):
    the telemetry layer's ``MetricHistory`` has this shape."""

    @property
    def times_s(self) -> FloatArray: ...

    @property
    def nodes(self) -> tuple[str, ...]: ...

    @property
    def columns(self) -> tuple[str, ...]: ...

    @property
    def values(self) -> FloatArray: ...


@dataclass(frozen=True)
class NodePanel:
    """The panel and what was left out of the history to make it."""

    panel: MetricPanel
    empty_columns: tuple[str, ...]
    """Chosen columns no node reported."""
    silent_nodes: tuple[str, ...]
    """Nodes that reported none of the chosen columns."""


def select_columns(columns: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The columns matching any pattern, in the history's order; an error naming the
    patterns and a few columns when none matches."""
    chosen = [c for c in columns if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    if not chosen:
        sample = ", ".join(list(columns)[:6])
        raise InputError(
            f"--metrics {','.join(patterns)} matches no column of the metric map "
            f"(it has {len(columns)}, e.g. {sample})"
        )
    return chosen


def node_panel(history: NodeHistory, patterns: Sequence[str] = DEFAULT_COLUMNS) -> NodePanel:
    """The chosen columns of ``history`` as a panel over its nodes (see the module)."""
    chosen = select_columns(history.columns, patterns)
    index = [history.columns.index(c) for c in chosen]
    values = np.asarray(history.values[:, :, index], dtype=np.float64)
    seen = np.isfinite(values)
    keep_columns = [bool(k) for k in np.asarray(seen.any(axis=(0, 1)))]
    keep_nodes = [bool(k) for k in np.asarray(seen[:, :, keep_columns].any(axis=(0, 2)))]
    if not any(keep_columns) or not any(keep_nodes):
        raise InputError(
            f"no node reported any of {', '.join(chosen)} in the history: nothing to learn from"
        )
    if len(history.times_s) < 2:
        raise InputError(
            f"the history has {len(history.times_s)} step(s); a forecaster needs a series"
        )
    values = values[:, keep_nodes][:, :, keep_columns]
    mask = np.isfinite(values)
    times = history.times_s
    panel = MetricPanel(
        entities=tuple(n for n, k in zip(history.nodes, keep_nodes, strict=True) if k),
        metrics=tuple(c for c, k in zip(chosen, keep_columns, strict=True) if k),
        start_s=float(times[0]),
        step_s=float(np.median(np.diff(times))),
        values=np.where(mask, values, 0.0),
        mask=mask,
        alive=np.asarray(mask.any(axis=2)),
    )
    return NodePanel(
        panel,
        tuple(c for c, k in zip(chosen, keep_columns, strict=True) if not k),
        tuple(n for n, k in zip(history.nodes, keep_nodes, strict=True) if not k),
    )
