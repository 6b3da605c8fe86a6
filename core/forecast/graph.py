"""The graph over entities that the ST-GCN attends along.

From the topology graph when the caller has one (an ``edge_index``); otherwise the
k nearest neighbours by Pearson correlation of the training window only, over all
metrics (observed cells), made symmetric. The description says which was used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubesage.core.arrays import IntArray
from kubesage.core.forecast.panel import MetricPanel

DEFAULT_NEIGHBOURS = 8
BLOCK_ROWS = 2048
"""Rows of the similarity matrix computed and ranked at a time."""


@dataclass(frozen=True)
class EntityGraph:
    edge_index: IntArray  # (2, E), source → target
    description: str


def correlation_graph(
    panel: MetricPanel, until_step: int, k: int = DEFAULT_NEIGHBOURS
) -> EntityGraph:
    """Symmetric k-nearest-neighbour graph by correlation over steps before ``until_step``.

    The similarity (summed over metrics) is an N × N matrix; it is computed and ranked
    ``BLOCK_ROWS`` rows at a time so that a large cluster holds no N × N temporaries
    beside it.
    """
    values = panel.values[:until_step]
    mask = panel.mask[:until_step]
    nodes = len(panel.entities)
    k = max(0, min(k, nodes - 1))
    blocks = [slice(start, start + BLOCK_ROWS) for start in range(0, nodes, BLOCK_ROWS)] or [
        slice(0, 0)
    ]
    similarity = np.zeros((nodes, nodes))
    for m in range(len(panel.metrics)):
        series = np.where(mask[:, :, m], values[:, :, m], np.nan)
        mean = np.nanmean(np.where(np.isnan(series).all(axis=0), 0.0, series), axis=0)
        centred = np.nan_to_num(series - mean[None, :])
        norms = np.sqrt((centred**2).sum(axis=0))
        norms[norms == 0] = 1.0
        for rows in blocks:
            similarity[rows] += (centred[:, rows].T @ centred) / np.outer(norms[rows], norms)
    np.fill_diagonal(similarity, -np.inf)
    neighbours = np.concatenate(
        [np.argsort(-similarity[rows], axis=1)[:, :k] for rows in blocks]
    ).reshape(nodes, k)
    pairs = {(int(j), int(i)) for i in range(nodes) for j in neighbours[i]}
    pairs |= {(b, a) for a, b in pairs}
    edge_index = np.array(sorted(pairs), dtype=np.int64).T.reshape(2, -1)
    return EntityGraph(
        edge_index=edge_index,
        description=(
            f"correlation k-NN (k={k}, symmetric, training window only; "
            f"{edge_index.shape[1]} edges)"
        ),
    )
