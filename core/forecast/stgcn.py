"""ST-GCN: a strong temporal encoder plus a gated graph residual across entities.

Input ``(B, T, N, F)`` windows (normalised values and their mask, all of an
entity's metrics as node features), a graph over the N entities, and each series'
last observed value ``(B, N, M)``. Each window is rescaled by its own spread (see
``window_scaled``) and every head predicts the change from the window's anchor, in
that scale, for all horizons and metrics at once (multi-task). The anchor is the
median of the observed values in the last ``ANCHOR_STEPS`` steps
(:mod:`~kubesage.core.forecast.anchor`); a model built with ``anchor_steps=0`` (one
saved before the anchor) starts from the last observed value instead.

The temporal part is one LSTM shared by every entity — the ``lstm`` baseline
itself (:class:`LSTMBaseline`), so the comparison isolates the graph. The
spatial part reads the temporal encodings of all entities at the forecast time
and mixes them along two graphs:

* the correlation (or topology) graph, with graph attention (PyG ``GATConv``);
* a self-adaptive adjacency learned from node embeddings,
  ``softmax(relu(E₁ E₂ᵀ))`` (Graph WaveNet), which can link entities whose
  relation the correlation of the training window does not show.

Its forecast is added through a learned gate initialised at zero (a gated
residual): with the gate at zero the ST-GCN is exactly its temporal part, so the
graph can only add to it (training keeps the gate at zero unless the graph
lowers the validation loss; see :mod:`kubesage.core.forecast.training`). Every
operation is causal: a forecast made at time t depends on inputs up to t only.
The forecaster then blends this module's forecast with a linear one
(:mod:`kubesage.core.forecast.highway`).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import GATConv

from kubesage.core.forecast.anchor import ANCHOR_STEPS, recent_median

WINDOW_STD_FLOOR = 0.1
"""Smallest window scale, in units of the series' training standard deviation."""

Spatial = Literal["both", "correlation", "adaptive", "none"]
"""Which graphs the spatial part mixes along (``none``: the temporal part alone)."""


def window_scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs rescaled by each window's own spread, and that spread ``(B, N, M)``.

    The training-window normalisation cannot follow a level shift (a busy day then
    a quiet night); rescaling every window by the spread of its own observed values
    (reversible instance normalisation) lets the model predict changes relative to
    the recent regime. The input layout is ``[values (M), mask (M)]``.
    """
    metrics = x.shape[-1] // 2
    values, mask = x[..., :metrics], x[..., metrics:]
    count = mask.sum(dim=1).clamp(min=1.0)
    mean = (values * mask).sum(dim=1) / count
    variance = (((values - mean[:, None]) ** 2) * mask).sum(dim=1) / count
    scale = torch.sqrt(variance + WINDOW_STD_FLOOR**2)
    scaled = (values - mean[:, None]) / scale[:, None] * mask
    return torch.cat([scaled, mask], dim=-1), scale


def batched_edges(edge_index: torch.Tensor, copies: int, nodes: int) -> torch.Tensor:
    """``edge_index`` repeated for ``copies`` disjoint graphs of ``nodes`` nodes each."""
    offsets = torch.arange(copies, device=edge_index.device).repeat_interleave(edge_index.shape[1])
    return edge_index.repeat(1, copies) + offsets * nodes


class LSTMBaseline(nn.Module):
    """One LSTM shared by every entity (no graph); also the ST-GCN's temporal part."""

    def __init__(
        self,
        in_features: int,
        metrics: int,
        horizon: int,
        *,
        hidden: int = 64,
        anchor_steps: int = ANCHOR_STEPS,
    ):
        super().__init__()
        self.metrics, self.horizon, self.anchor_steps = metrics, horizon, anchor_steps
        self.lstm = nn.LSTM(in_features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, horizon * metrics)

    def encode(self, scaled: torch.Tensor) -> torch.Tensor:
        """Per-step encodings ``(B, T, N, C)`` of window-scaled inputs; step τ sees steps ≤ τ."""
        batch, steps, nodes, features = scaled.shape
        series = scaled.permute(0, 2, 1, 3).reshape(batch * nodes, steps, features)
        output, _ = self.lstm(series)
        encoded: torch.Tensor = output.reshape(batch, nodes, steps, -1).permute(0, 2, 1, 3)
        return encoded

    def anchor(self, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """What the forecast is a change from, ``(B, N, M)``: see :func:`recent_median`."""
        return recent_median(x, self.anchor_steps, last)

    def change(self, state: torch.Tensor) -> torch.Tensor:
        """The change ``(B, H, N, M)``, in window scale, from the last encodings ``(B, N, C)``."""
        batch, nodes, _ = state.shape
        out: torch.Tensor = (
            self.head(state).reshape(batch, nodes, self.horizon, self.metrics).permute(0, 2, 1, 3)
        )
        return out

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        scaled, scale = window_scaled(x)
        anchor = self.anchor(x, last)
        out: torch.Tensor = (
            anchor[:, None] + self.change(self.encode(scaled)[:, -1]) * scale[:, None]
        )
        return out


class SpatialResidual(nn.Module):
    """The graph part: entity encodings ``(B, N, C)`` → a change ``(B, H, N, M)``."""

    def __init__(
        self,
        hidden: int,
        metrics: int,
        horizon: int,
        *,
        nodes: int,
        spatial: Spatial = "both",
        embedding: int = 10,
        heads: int = 1,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.metrics, self.horizon, self.spatial = metrics, horizon, spatial
        self.attention = (
            GATConv(hidden, hidden, heads=heads, concat=False, dropout=dropout)
            if spatial in ("both", "correlation")
            else None
        )
        self.source: nn.Parameter | None = None
        self.target: nn.Parameter | None = None
        self.adaptive = None
        if spatial in ("both", "adaptive"):
            self.source = nn.Parameter(torch.randn(nodes, embedding) / embedding**0.5)
            self.target = nn.Parameter(torch.randn(nodes, embedding) / embedding**0.5)
            self.adaptive = nn.Linear(hidden, hidden)
        paths = (self.attention is not None) + (self.adaptive is not None)
        self.mix = nn.Linear(hidden * (1 + paths), hidden)
        self.head = nn.Linear(hidden, horizon * metrics)
        self.gate = nn.Parameter(torch.zeros(horizon * metrics))
        """Per horizon and metric; zero: the ST-GCN is its temporal part."""
        self._edge_cache: dict[tuple[int, int, int], torch.Tensor] = {}
        self._adjacency: tuple[object, torch.Tensor] | None = None

    def adjacency(self) -> torch.Tensor | None:
        """The self-adaptive adjacency ``softmax(relu(E₁ E₂ᵀ))`` (rows sum to 1).

        N × N, so at 10,000 entities it is most of a forecast's cost; outside training
        (eval mode, no gradients) it is computed once per version of the embeddings.
        """
        if self.source is None or self.target is None:
            return None
        if self.training or torch.is_grad_enabled():
            return torch.softmax(F.relu(self.source @ self.target.T), dim=1)
        key = tuple((p._version, p.data_ptr(), str(p.device)) for p in (self.source, self.target))
        if self._adjacency is None or self._adjacency[0] != key:
            self._adjacency = (key, torch.softmax(F.relu(self.source @ self.target.T), dim=1))
        return self._adjacency[1]

    def _edges(self, edge_index: torch.Tensor, copies: int, nodes: int) -> torch.Tensor:
        key = (copies, nodes, int(edge_index.shape[1]))
        cached = self._edge_cache.get(key)
        if cached is None or cached.device != edge_index.device:
            cached = batched_edges(edge_index, copies, nodes)
            self._edge_cache = {key: cached}
        return cached

    def forward(self, state: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        batch, nodes, channels = state.shape
        parts = [state]
        if self.attention is not None:
            edges = self._edges(edge_index, batch, nodes)
            mixed = self.attention(state.reshape(batch * nodes, channels), edges)
            parts.append(mixed.reshape(batch, nodes, channels))
        adjacency = self.adjacency()
        if adjacency is not None and self.adaptive is not None:
            parts.append(torch.einsum("nm,bmc->bnc", adjacency, self.adaptive(state)))
        hidden = F.relu(self.mix(torch.cat(parts, dim=-1)))
        change = self.head(hidden) * self.gate
        out: torch.Tensor = change.reshape(batch, nodes, self.horizon, self.metrics).permute(
            0, 2, 1, 3
        )
        return out


class STGCN(nn.Module):
    """Temporal part (the LSTM baseline) + gated graph residual → multi-horizon forecast."""

    def __init__(
        self,
        in_features: int,
        metrics: int,
        horizon: int,
        *,
        nodes: int,
        hidden: int = 64,
        spatial: Spatial = "both",
        anchor_steps: int = ANCHOR_STEPS,
    ):
        super().__init__()
        self.metrics, self.horizon = metrics, horizon
        self.temporal = LSTMBaseline(
            in_features, metrics, horizon, hidden=hidden, anchor_steps=anchor_steps
        )
        self.residual = SpatialResidual(hidden, metrics, horizon, nodes=nodes, spatial=spatial)
        self.spatial: Spatial = spatial

    def features(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Per-step temporal encodings ``(B, T, N, C)`` of window-scaled inputs; step τ
        depends on inputs up to τ only."""
        return self.temporal.encode(x)

    def combine(
        self,
        state: torch.Tensor,
        scale: torch.Tensor,
        anchor: torch.Tensor,
        edge_index: torch.Tensor,
    ) -> torch.Tensor:
        """The forecast from the entities' last encodings ``(B, N, C)``, their window
        scales and anchors ``(B, N, M)``."""
        change = self.temporal.change(state)
        if self.spatial != "none":
            change = change + self.residual(state, edge_index)
        out: torch.Tensor = anchor[:, None] + change * scale[:, None]
        return out

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        scaled, scale = window_scaled(x)
        anchor = self.temporal.anchor(x, last)
        return self.combine(self.temporal.encode(scaled)[:, -1], scale, anchor, edge_index)
