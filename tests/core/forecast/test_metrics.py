"""Forecast metrics on values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.forecast.metrics import burst_cells, mean_of, quantile_scores, scores


def test_scores_on_known_values() -> None:
    truth = np.array([0.0, 2.0, 4.0, 10.0])
    prediction = np.array([1.0, 2.0, 2.0, 10.0])
    result = scores(prediction, truth, np.ones(4, dtype=bool))
    assert result["wape"] == pytest.approx(3 / 16)
    assert result["mae"] == pytest.approx(0.75)
    assert result["rmse"] == pytest.approx(np.sqrt(5 / 4))
    # sMAPE terms: 2·1/1 = 2, 0, 2·2/6, 0 → mean 2/3 + 1/6
    assert result["smape"] == pytest.approx((2 + 2 * 2 / 6) / 4)
    # MAPE only over the three non-zero truths: 0, 0.5, 0
    assert result["mape_nonzero"] == pytest.approx(0.5 / 3)


def test_masked_cells_do_not_count_and_empty_is_none() -> None:
    truth = np.array([1.0, 100.0])
    prediction = np.array([2.0, 0.0])
    assert scores(prediction, truth, np.array([True, False]))["wape"] == pytest.approx(1.0)
    empty = scores(prediction, truth, np.array([False, False]))
    assert all(value is None for value in empty.values())


def test_all_zero_truth_has_no_wape_but_has_mae() -> None:
    result = scores(np.array([1.0, 0.0]), np.zeros(2), np.ones(2, dtype=bool))
    assert result["wape"] is None and result["mape_nonzero"] is None
    assert result["mae"] == pytest.approx(0.5)
    assert result["smape"] == pytest.approx(1.0)  # 2·1/1 and 0/0 → 0


def test_burst_cells_mark_sharp_jumps_only() -> None:
    normalised = np.array([0.0, 0.1, 3.0, 3.2, 0.0])[:, None, None]
    mask = np.ones_like(normalised, dtype=bool)
    assert burst_cells(normalised, mask)[:, 0, 0].tolist() == [False, False, True, False, True]
    mask[1] = False
    assert not burst_cells(normalised, mask)[2, 0, 0]  # the step before was not observed


def test_mean_of_skips_missing() -> None:
    assert mean_of([1.0, None, 3.0]) == 2.0
    assert mean_of([None]) is None


def test_quantile_scores_on_known_values() -> None:
    truth = np.array([0.0, 2.0, 4.0, 10.0])
    upper = np.array([1.0, 3.0, 2.0, 10.0])
    result = quantile_scores(upper, truth, np.ones(4, dtype=bool), 0.9)
    # misses y − ŷ: −1, −1, +2, 0 → losses 0.1, 0.1, 1.8, 0
    assert result["pinball"] == pytest.approx(2.0 / 4)
    assert result["wql"] == pytest.approx(2 * 2.0 / 16)
    assert result["coverage"] == pytest.approx(3 / 4)  # at or below the forecast
    empty = quantile_scores(upper, truth, np.zeros(4, dtype=bool), 0.9)
    assert all(value is None for value in empty.values())
    assert quantile_scores(upper, np.zeros(4), np.ones(4, dtype=bool), 0.9)["wql"] is None


def test_the_weighted_quantile_loss_at_the_median_is_the_wape() -> None:
    rng = np.random.default_rng(3)
    truth, prediction = rng.gamma(0.5, 2.0, 200), rng.gamma(0.5, 2.0, 200)
    mask = rng.random(200) > 0.2
    median = quantile_scores(prediction, truth, mask, 0.5)
    assert median["wql"] == pytest.approx(scores(prediction, truth, mask)["wape"])
