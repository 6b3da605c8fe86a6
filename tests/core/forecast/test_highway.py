"""The ST-GCN's linear highway: how its blend weights are chosen, how it is wired, saved."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from kubesage.core.errors import InputError
from kubesage.core.forecast.baselines import LAD_FEATURES, MEAN_ONLY_LAD_FEATURES
from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.highway import (
    RECENT_ORIGINS,
    LinearHighway,
    Made,
    blend_candidates,
    choose_weights,
    combine,
)
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.persistence import load_forecaster, save_forecaster
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.forecast.windows import make_windows

TINY = TrainConfig(epochs=2, batch_size=32, seed=3)


def test_each_metric_and_step_takes_the_part_that_was_right() -> None:
    rng = np.random.default_rng(0)
    targets = rng.normal(size=(20, 3, 4, 2))
    neural, linear = targets + rng.normal(size=targets.shape), targets.copy()
    neural[:, :, :, 0], linear[:, :, :, 0] = targets[:, :, :, 0], targets[:, :, :, 0] + 1.0
    mask, scale, floor = np.ones(targets.shape, bool), np.ones((4, 2)), np.full((4, 2), -50.0)
    weights = choose_weights(neural, linear, targets, mask, scale, floor)
    assert weights.shape == (3, 2, 2)
    assert (weights[:, 0] == [1.0, 0.0]).all() and (weights[:, 1] == [0.0, 0.0]).all()


def test_two_parts_wrong_in_opposite_directions_are_averaged() -> None:
    targets = np.zeros((10, 1, 3, 1))
    weights = choose_weights(
        targets + 1.0, targets - 1.0, targets, targets == 0, np.ones((3, 1)), np.full((3, 1), 9.0)
    )
    assert weights.tolist() == [[[0.5, 0.0]]]


def test_a_series_idle_where_both_parts_expect_its_level_is_shrunk_toward_its_zero() -> None:
    # Normalised units: the series' zero is at -2; both parts forecast its recent level
    # (0) where it is idle eight windows in ten and at its level in the other two.
    targets = np.full((10, 1, 2, 1), -2.0)
    targets[:2] = 0.0
    neural, linear = np.zeros(targets.shape), np.zeros(targets.shape)
    mask, scale, floor = np.ones(targets.shape, bool), np.ones((2, 1)), np.full((2, 1), -2.0)
    assert choose_weights(neural, linear, targets, mask, scale, floor).tolist() == [[[0.0, 1.0]]]
    # A convex highway cannot: it keeps the first of its equally wrong blends.
    convex = choose_weights(neural, linear, targets, mask, scale, floor, "convex")
    assert convex.tolist() == [[[0.0, 0.0]]]
    # Idle in two windows of ten only, it keeps its level.
    targets[:] = 0.0
    targets[:2] = -2.0
    assert choose_weights(neural, linear, targets, mask, scale, floor).tolist() == [[[0.0, 0.0]]]


def test_the_blends_sum_to_one_and_the_first_is_the_linear_part_alone() -> None:
    floored = blend_candidates("floored")
    assert len(floored) == 66 and floored[0].tolist() == [0.0, 0.0]
    assert (floored.sum(axis=1) <= 1 + 1e-9).all() and (np.diff(floored[:, 1]) >= 0).all()
    assert (blend_candidates("convex")[:, 1] == 0).all() and len(blend_candidates("convex")) == 11
    assert (blend_candidates("linear")[:, 0] == 0).all() and len(blend_candidates("linear")) == 11
    # A convex blend is computed as before the floor, to the last bit.
    rng = np.random.default_rng(1)
    neural, linear = rng.normal(size=(2, 50))
    for a in blend_candidates("convex")[:, 0]:
        got = combine(np.array([a, 0.0]), neural, linear, rng.normal(size=50))
        assert (got == a * neural + (1.0 - a) * linear).all()


def test_errors_pool_in_each_series_own_units_and_skip_unobserved_targets() -> None:
    targets = np.zeros((10, 1, 2, 1))
    neural, linear = targets.copy(), targets.copy()
    neural[:, :, 1], linear[:, :, 0] = 1.0, 1.0  # each part wrong on one series
    # Series 0 is 100× the scale of series 1: the neural part, right on it, wins.
    scale = np.array([[100.0], [1.0]])
    observed, floor = np.ones(targets.shape, bool), np.full((2, 1), 5.0)
    assert choose_weights(neural, linear, targets, observed, scale, floor).tolist() == [
        [[1.0, 0.0]]
    ]
    # With series 0 unobserved only series 1 counts: the linear part wins.
    observed[:, :, 0] = False
    assert choose_weights(neural, linear, targets, observed, scale, floor).tolist() == [
        [[0.0, 0.0]]
    ]


def test_the_stgcn_blends_its_neural_forecast_with_its_linear_part(panel: MetricPanel) -> None:
    stgcn = make_forecaster("stgcn", config=TINY, horizon=5)
    neural = make_forecaster("stgcn_no_highway", config=TINY, horizon=5)
    assert isinstance(stgcn, NeuralForecaster) and isinstance(neural, NeuralForecaster)
    stgcn.highway_recent = 0  # the validation weights throughout
    stgcn.fit(panel, 120)
    assert stgcn.context == stgcn.history
    neural.fit(panel, 120)
    highway = stgcn.linear_highway
    assert highway is not None and neural.linear_highway is None
    assert highway.weights.shape == (5, len(panel.metrics), 2)
    candidates = {tuple(c) for c in blend_candidates("floored").tolist()}
    assert {tuple(w) for w in highway.weights.reshape(-1, 2).tolist()} <= candidates
    assert stgcn.normaliser is not None
    windows = make_windows(panel, stgcn.normaliser, np.arange(120, 150), history=24, horizon=5)
    expected = combine(
        highway.weights[None, :, None],
        neural.forecast_windows(windows),
        stgcn.normaliser.invert(highway.linear.predict(windows)),
        np.zeros((1, 1, *stgcn.normaliser.mean.shape)),  # the floor: zero in raw units
    )
    assert np.allclose(stgcn.forecast_windows(windows), expected)


def _fitted(panel: MetricPanel, name: str = "stgcn") -> NeuralForecaster:
    """A tiny ST-GCN (or ablation) fitted on the panel's first 120 steps."""
    forecaster = make_forecaster(name, config=TINY, horizon=5)
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 120)
    return forecaster


def _saved(panel: MetricPanel, path: Path) -> Path:
    return save_forecaster(_fitted(panel), path, train_until_s=0.0)


def _rewrite(path: Path, tensors: dict[str, torch.Tensor], header: dict[str, object]) -> None:
    save_file(tensors, str(path), metadata={"kubesage": json.dumps(header)})


def _header(path: Path) -> dict[str, object]:
    _, header = load_forecaster(path)
    return header


def test_the_highway_is_saved_and_a_v2_file_without_one_still_loads(
    panel: MetricPanel, tmp_path: Path
) -> None:
    path = _saved(panel, tmp_path / "m.safetensors")
    loaded, header = load_forecaster(path)
    assert header["highway"] is True and loaded.linear_highway is not None
    tensors = {k: v for k, v in load_file(str(path)).items() if not k.startswith("highway.")}
    _rewrite(path, tensors, {**header, "format": "kubesage.forecast/v2", "highway": False})
    old, _ = load_forecaster(path)
    assert old.linear_highway is None and old.name == "stgcn_no_highway"


def test_a_v3_highway_fitted_before_the_medians_still_forecasts(
    panel: MetricPanel, tmp_path: Path
) -> None:
    path = _saved(panel, tmp_path / "m.safetensors")
    _, header = load_forecaster(path)
    tensors = load_file(str(path))
    linear = tensors["highway.linear"]
    assert linear.shape[-1] == LAD_FEATURES
    mean_only = torch.zeros(*linear.shape[:-1], MEAN_ONLY_LAD_FEATURES, dtype=linear.dtype)
    mean_only[..., 0] = 1.0  # the last value
    tensors["highway.linear"] = mean_only
    tensors["highway.weights"] = torch.zeros_like(tensors["highway.weights"])  # linear only
    del tensors["highway.floor"]
    _rewrite(path, tensors, {**header, "format": "kubesage.forecast/v3"})
    old, _ = load_forecaster(path)
    forecast = old.predict(panel.head(140), 5).values
    seen = np.where(panel.mask[:140], np.arange(140)[:, None, None], -1).max(axis=0)
    last = np.take_along_axis(panel.values[:140], seen[None], axis=0)[0]  # last observed
    assert forecast == pytest.approx(np.repeat(last[None], 5, axis=0), rel=1e-6, abs=1e-6)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("highway.weights", torch.zeros(3, 4, dtype=torch.float64), "do not fit"),
        ("highway.weights", torch.full((5, 4), 1.5, dtype=torch.float64), "outside"),
        ("highway.floor", torch.full((5, 4), 1.0, dtype=torch.float64), "sum to more than 1"),
        ("highway.floor", torch.zeros(5, 3, dtype=torch.float64), "do not fit"),
        ("highway.floor", None, "highway.floor"),
        ("highway.linear", torch.zeros(4, 5, dtype=torch.float64), "do not fit"),
        ("highway.linear", torch.zeros(4, 5, 3, dtype=torch.float64), "do not fit"),
        ("highway.linear", None, "highway.linear"),
    ],
)
def test_a_malformed_highway_is_refused_naming_the_file(
    panel: MetricPanel, tmp_path: Path, key: str, value: torch.Tensor | None, message: str
) -> None:
    path = _saved(panel, tmp_path / "bad.safetensors")
    header = _header(path)
    tensors = dict(load_file(str(path)))
    if value is None:
        del tensors[key]
    else:
        tensors[key] = value
    _rewrite(path, tensors, header)
    with pytest.raises(InputError, match=rf"bad\.safetensors.*{message}"):
        load_forecaster(path)


def test_every_combination_of_parts_has_a_name() -> None:
    assert make_forecaster("stgcn").name == "stgcn"
    assert make_forecaster("stgcn_no_highway").name == "stgcn_no_highway"
    assert make_forecaster("stgcn_no_floor").name == "stgcn_no_floor"
    unnamed = NeuralForecaster(kind="stgcn", spatial="none", highway=True)
    assert unnamed.name == "stgcn(spatial=none, highway=True, blends=floored)"


def _online(panel: MetricPanel) -> tuple[NeuralForecaster, LinearHighway]:
    """An ST-GCN whose highway chooses its weights online, and that highway."""
    stgcn = _fitted(panel)
    assert stgcn.linear_highway is not None
    return stgcn, stgcn.linear_highway


def _fixed(stgcn: NeuralForecaster) -> NeuralForecaster:
    """The same model with its highway's validation weights throughout."""
    assert stgcn.linear_highway is not None
    return replace(stgcn, highway_recent=0, linear_highway=replace(stgcn.linear_highway, recent=0))


def test_the_online_highway_scores_each_weight_on_the_latest_matured_forecasts(
    panel: MetricPanel,
) -> None:
    """Recomputed from scratch: each part's forecast at every earlier origin from its own
    24-step window, each candidate blend's error on the targets known at the origin."""
    stgcn, highway = _online(panel)
    normaliser = stgcn.normaliser
    assert normaliser is not None
    assert stgcn.context == 24 + 5 + RECENT_ORIGINS - 1
    neural_only = replace(stgcn, linear_highway=None)
    origin = 150
    made_at = np.arange(origin - stgcn.context + 24, origin + 1)
    windows = make_windows(panel, normaliser, made_at, history=24, horizon=5)
    neural = neural_only.forecast_windows(windows)
    linear = normaliser.invert(highway.linear.predict(windows))
    candidates = blend_candidates("floored")
    chosen = np.empty((5, len(panel.metrics), 2))
    for h in range(5):
        made = np.arange(origin - h - RECENT_ORIGINS, origin - h)  # targets before the origin
        at = made - made_at[0]
        truth, seen = panel.values[made + h], panel.mask[made + h]
        errors = np.array(
            [
                (np.abs(a * neural[at, h] + (1 - a - s) * linear[at, h] - truth) * seen).sum(
                    axis=(0, 1)
                )
                for a, s in candidates
            ]
        )
        for m in range(len(panel.metrics)):
            tied = candidates[errors[:, m] <= errors[:, m].min() * (1 + 1e-9)]
            prior = highway.weights[h, m]
            everywhere = len(tied) == len(candidates)
            nearest = tied[np.argmin(np.abs(tied - prior).sum(axis=1))]
            chosen[h, m] = prior if everywhere else nearest
    assert (chosen != highway.weights).any()  # the recent errors chose something else
    a, s = chosen[:, None, :, 0], chosen[:, None, :, 1]
    want = a * neural[-1] + (1 - a - s) * linear[-1]  # the floor: zero
    got = stgcn.forecast_windows(stgcn.windows_at(panel, np.array([origin])))[0]
    assert got == pytest.approx(want, rel=1e-6, abs=1e-6)
    assert stgcn.predict(panel.head(origin), 5).values == pytest.approx(got, rel=1e-6, abs=1e-6)


def test_with_no_target_known_lately_the_online_highway_keeps_its_validation_weights(
    panel: MetricPanel,
) -> None:
    stgcn, highway = _online(panel)
    # Every step the scored forecasts target is unobserved: nothing to choose on.
    mask = panel.mask[:150].copy()
    mask[-highway.lookback() :] = False
    history = replace(panel.head(150), mask=mask)
    assert stgcn.predict(history, 5).values == pytest.approx(
        _fixed(stgcn).predict(history, 5).values, rel=1e-6, abs=1e-6
    )


def test_a_v5_file_keeps_choosing_among_convex_blends(panel: MetricPanel, tmp_path: Path) -> None:
    stgcn = _fitted(panel, "stgcn_no_floor")
    path = save_forecaster(stgcn, tmp_path / "m.safetensors", train_until_s=0.0)
    _, header = load_forecaster(path)
    assert header["highway_blends"] == "convex"
    tensors = {k: v for k, v in load_file(str(path)).items() if k != "highway.floor"}
    _rewrite(path, tensors, {**header, "format": "kubesage.forecast/v5", "highway_blends": None})
    old, _ = load_forecaster(path)
    assert old.linear_highway is not None and old.linear_highway.blends == "convex"
    history = panel.head(150)
    assert old.predict(history, 5).values == pytest.approx(
        replace(stgcn, made=Made()).predict(history, 5).values, rel=1e-6, abs=1e-6
    )
    _rewrite(path, load_file(str(path)), {**header, "highway_blends": "wild"})
    with pytest.raises(InputError, match=r"m\.safetensors.*highway_blends 'wild'"):
        load_forecaster(path)


def test_the_online_highway_is_saved_and_a_v4_file_keeps_the_validation_weights(
    panel: MetricPanel, tmp_path: Path
) -> None:
    path = _saved(panel, tmp_path / "m.safetensors")
    loaded, header = load_forecaster(path)
    assert header["format"] == "kubesage.forecast/v6" and header["highway_blends"] == "floored"
    assert header["highway_recent"] == RECENT_ORIGINS and loaded.context > loaded.history
    history = panel.head(150)
    online = loaded.predict(history, 5).values
    fixed = _fixed(loaded).predict(history, 5).values
    assert not np.allclose(online, fixed)
    tensors = load_file(str(path))
    # A v4 file holds no floor: its validation blends are those of the two parts.
    _rewrite(path, tensors, {**header, "format": "kubesage.forecast/v4"})
    old, _ = load_forecaster(path)
    assert old.context == old.history
    highway = loaded.linear_highway
    assert highway is not None
    convex = replace(highway, weights=highway.weights * [1.0, 0.0], blends="convex")
    fixed = _fixed(replace(loaded, linear_highway=convex)).predict(history, 5).values
    assert old.predict(history, 5).values == pytest.approx(fixed, rel=1e-6, abs=1e-6)
    _rewrite(path, tensors, {**header, "highway_recent": -1})
    with pytest.raises(InputError, match=r"m\.safetensors.*highway_recent -1"):
        load_forecaster(path)


def test_successive_live_forecasts_reuse_the_earlier_origins_forecasts(
    panel: MetricPanel,
) -> None:
    stgcn, highway = _online(panel)
    for origin in range(140, 146):
        live = stgcn.predict(panel.head(origin), 5).values
        fresh = replace(stgcn, made=Made()).predict(panel.head(origin), 5).values
        assert live == pytest.approx(fresh, rel=1e-6, abs=1e-6)
    step = round(panel.start_s / panel.step_s)
    # One new origin a call; the errors of those older than the lookback are dropped,
    # and the forecasts of those whose every step a later call may score is known.
    assert sorted(stgcn.made.errors) == list(range(step + 145 - highway.lookback(), step + 146))
    assert sorted(stgcn.made.parts) == list(range(step + 145 - 4, step + 146))
    scored = stgcn.made.errors[step + 143]  # made two steps ago: its first two steps known
    assert not np.isnan(scored[:2]).any() and np.isnan(scored[2:]).all()
    # Missed ticks: a call after a gap scores the steps the skipped calls would have.
    for origin in (149, 150, 190):
        live = stgcn.predict(panel.head(origin), 5).values
        fresh = replace(stgcn, made=Made()).predict(panel.head(origin), 5).values
        assert live == pytest.approx(fresh, rel=1e-6, abs=1e-6)
    # The same clock with other data (another history, a restarted panel): started afresh.
    other = replace(panel, values=panel.values * 1.5)
    assert stgcn.predict(other.head(190), 5).values == pytest.approx(
        replace(stgcn, made=Made()).predict(other.head(190), 5).values, rel=1e-6, abs=1e-6
    )
    stgcn.fit(panel, 120)
    assert stgcn.made == Made()
