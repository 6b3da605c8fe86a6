"""The small synthetic panel the forecasting model tests train on (a module may define
its own ``panel`` of another size, which overrides this one)."""

from __future__ import annotations

import pytest

from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.synthetic import write_synthetic_metrics


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> MetricPanel:
    """8 entities × 4 metrics, 160 steps."""
    return read_panel(
        write_synthetic_metrics(tmp_path_factory.mktemp("metrics"), entities=8, steps=160)
    )
