"""ST-GCN: graph attention across entities at every step, a dilated causal TCN over time.

Input ``(B, T, N, F)`` windows (normalised values and their mask), a graph over the
N entities, and each series' last observed value ``(B, N, M)``. Every step's graph
is processed at once as one disjoint graph of ``B·T`` copies (no Python loop over
batch or time). The temporal convolutions are causal (left padding only), and the
head reads the last step, so a forecast made at time t never depends on inputs
after t. Each window is rescaled by its own spread (see ``window_scaled``), and
the head predicts the change from the last observed value, in that scale, for all
horizons and metrics at once (multi-task). The LSTM baseline gets the same inputs,
scaling and head, so the comparison isolates the graph.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import GATConv

WINDOW_STD_FLOOR = 0.1
"""Smallest window scale, in units of the series' training standard deviation."""


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


class CausalConvBlock(nn.Module):
    """Residual dilated causal convolution over time: ``(batch, channels, T)`` → same."""

    def __init__(self, channels: int, dilation: int, kernel_size: int = 2, dropout: float = 0.0):
        super().__init__()
        self.left_pad = (kernel_size - 1) * dilation
        self.conv = nn.Conv1d(channels, channels, kernel_size, dilation=dilation)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.dropout(F.relu(self.conv(F.pad(x, (self.left_pad, 0)))))
        return out


class STGCN(nn.Module):
    """Spatio-temporal graph network: [GAT → causal TCN] × blocks → multi-horizon head.

    The defaults (one block, one attention head, 32 channels) keep a training epoch
    on the GenAI trace's 124 entities to seconds on two CPU cores.
    """

    def __init__(
        self,
        in_features: int,
        metrics: int,
        horizon: int,
        *,
        hidden: int = 32,
        heads: int = 1,
        blocks: int = 1,
        dilations: tuple[int, ...] = (1, 2, 4, 8),
        dropout: float = 0.1,
    ):
        super().__init__()
        self.metrics, self.horizon = metrics, horizon
        self.project = nn.Linear(in_features, hidden)
        self.spatial = nn.ModuleList(
            GATConv(hidden, hidden, heads=heads, concat=False, dropout=dropout)
            for _ in range(blocks)
        )
        self.spatial_norm = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(blocks))
        self.temporal = nn.ModuleList(
            nn.Sequential(*(CausalConvBlock(hidden, d, dropout=dropout) for d in dilations))
            for _ in range(blocks)
        )
        self.head = nn.Linear(hidden, horizon * metrics)
        self._edge_cache: dict[tuple[int, int, int], torch.Tensor] = {}

    def _edges(self, edge_index: torch.Tensor, copies: int, nodes: int) -> torch.Tensor:
        key = (copies, nodes, int(edge_index.shape[1]))
        cached = self._edge_cache.get(key)
        if cached is None or cached.device != edge_index.device:
            cached = batched_edges(edge_index, copies, nodes)
            self._edge_cache = {key: cached}
        return cached

    def features(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Per-step features ``(B, T, N, C)``; step τ depends on inputs up to τ only."""
        batch, steps, nodes, _ = x.shape
        h = self.project(x)
        edges = self._edges(edge_index, batch * steps, nodes)
        for gat, norm, tcn in zip(self.spatial, self.spatial_norm, self.temporal, strict=True):
            mixed = gat(h.reshape(batch * steps * nodes, -1), edges).reshape(h.shape)
            h = norm(h + F.relu(mixed))
            channels = h.shape[-1]
            series = h.permute(0, 2, 3, 1).reshape(batch * nodes, channels, steps)
            h = tcn(series).reshape(batch, nodes, channels, steps).permute(0, 3, 1, 2)
        features: torch.Tensor = h
        return features

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        batch, _, nodes, _ = x.shape
        scaled, scale = window_scaled(x)
        h = self.features(scaled, edge_index)
        change = self.head(h[:, -1]).reshape(batch, nodes, self.horizon, self.metrics)
        out: torch.Tensor = last[:, None] + change.permute(0, 2, 1, 3) * scale[:, None]
        return out


class LSTMBaseline(nn.Module):
    """One LSTM shared by every entity (no graph), same inputs and head as ST-GCN."""

    def __init__(self, in_features: int, metrics: int, horizon: int, *, hidden: int = 64):
        super().__init__()
        self.metrics, self.horizon = metrics, horizon
        self.lstm = nn.LSTM(in_features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, horizon * metrics)

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, last: torch.Tensor
    ) -> torch.Tensor:
        batch, steps, nodes, features = x.shape
        scaled, scale = window_scaled(x)
        series = scaled.permute(0, 2, 1, 3).reshape(batch * nodes, steps, features)
        _, (hidden, _) = self.lstm(series)
        change = self.head(hidden[-1]).reshape(batch, nodes, self.horizon, self.metrics)
        out: torch.Tensor = last[:, None] + change.permute(0, 2, 1, 3) * scale[:, None]
        return out
