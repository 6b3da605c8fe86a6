"""The moving-median baseline and the neural models' anchor: the recent median of the
observed samples only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from kubesage.core.forecast.anchor import recent_median
from kubesage.core.forecast.forecaster import make_forecaster
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.synthetic import write_synthetic_metrics


@pytest.fixture
def sparse(tmp_path: Path) -> MetricPanel:
    """Entity 0 idles at 0 with a burst every 4 steps; entity 1 is flat at 7."""
    panel = read_panel(write_synthetic_metrics(tmp_path, entities=2, steps=120))
    panel.values[:] = 7.0
    panel.values[:, 0] = 0.0
    panel.values[::4, 0] = 90.0
    panel.mask[:] = True
    return panel


def test_a_sparse_series_is_forecast_at_its_idle_level_not_its_bursts(
    sparse: MetricPanel,
) -> None:
    median = make_forecaster("moving_median", horizon=3)
    median.fit(sparse, 100)
    mean = make_forecaster("moving_average", horizon=3)
    mean.fit(sparse, 100)
    history = sparse.head(101)  # the last step (100) is a burst
    forecast = median.predict(history, 3)
    assert forecast.model == "moving_median"
    assert forecast.values[:, 0] == pytest.approx(0.0, abs=1e-6)
    assert forecast.values[:, 1] == pytest.approx(7.0, abs=1e-6)
    assert mean.predict(history, 3).values[:, 0] == pytest.approx(22.5, abs=1e-4)


def test_missing_samples_are_left_out_of_the_median(sparse: MetricPanel) -> None:
    sparse.values[89:101, 1, 0] = [1, 2, 3, 100, 100, 100, 100, 100, 4, 5, 6, 7]
    sparse.mask[92:97, 1, 0] = False  # the five 100s were never observed
    median = make_forecaster("moving_median", horizon=1)
    median.fit(sparse, 80)
    forecast = median.predict(sparse.head(101), 1)
    assert forecast.values[0, 1, 0] == pytest.approx(4.0, abs=1e-5)  # median of 1…7


def test_the_anchor_is_numpys_median_of_the_observed_values() -> None:
    rng = np.random.default_rng(0)
    batch, steps, nodes, metrics = 6, 24, 5, 3
    values = rng.integers(0, 4, size=(batch, steps, nodes, metrics)).astype(np.float32)
    mask = rng.random((batch, steps, nodes, metrics)) > 0.3
    mask[0, :, 0, 0] = False  # a series with nothing observed: its last value
    last = rng.normal(size=(batch, nodes, metrics)).astype(np.float32)
    inputs = torch.from_numpy(np.concatenate([values, mask.astype(np.float32)], axis=-1))
    observed = np.where(mask, values, np.nan)
    observed[0, :, 0, 0] = 0.0  # numpy's median of nothing would warn; replaced below
    for count in (11, 12, 30):  # odd, even, longer than the window
        expected = np.nanmedian(observed[:, -count:], axis=1)
        expected[0, 0, 0] = last[0, 0, 0]
        anchor = recent_median(inputs, count, torch.from_numpy(last))
        assert anchor.numpy() == pytest.approx(expected)
    assert torch.equal(recent_median(inputs, 0, torch.from_numpy(last)), torch.from_numpy(last))
