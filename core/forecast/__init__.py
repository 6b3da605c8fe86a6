"""Load forecasting: per-entity metric panels, ST-GCN (GAT + TCN) and honest baselines.

This package module stays light (no torch import) so the CLI starts fast; the
models live in :mod:`kubesage.core.forecast.forecaster`.
"""

MODEL_NAMES = ("stgcn", "lstm", "last_value", "moving_average", "linear")
"""Every forecasting model, ST-GCN first; the rest are the baselines it is measured against."""
