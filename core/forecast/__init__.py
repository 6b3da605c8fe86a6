"""Load forecasting: per-entity metric panels, ST-GCN (LSTM + gated graph) and honest baselines.

This package module stays light (no torch import) so the CLI starts fast; the
models live in :mod:`kubesage.core.forecast.forecaster`.
"""

MODEL_NAMES = (
    "stgcn",
    "lstm",
    "last_value",
    "moving_average",
    "moving_median",
    "linear",
    "linear_lad",
)
"""Every forecasting model, ST-GCN first; the rest are the baselines it is measured against."""

ABLATION_NAMES = (
    "stgcn_temporal",
    "stgcn_no_adaptive",
    "stgcn_no_correlation",
    "stgcn_no_highway",
    "stgcn_no_floor",
    "stgcn_no_neural",
)
"""ST-GCN with parts removed: its temporal part alone (no graph, no highway), without
the self-adaptive adjacency (correlation graph only), without the correlation graph
(adaptive only), without the linear highway (both graphs), a highway that blends its
two parts only (no floor), a highway of the linear part and the floor only (no neural
forecast)."""

DEFAULT_HISTORY = 24
"""Input steps (about 23 minutes at the GenAI trace's 57 s)."""
DEFAULT_HORIZON = 15
"""Steps forecast."""
