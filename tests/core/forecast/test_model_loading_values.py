"""A forecaster file that would load but could not forecast — non-finite weights or
normalisation statistics, a standard deviation that is not positive, sizes under 1,
repeated names — is refused with a ModelError naming the file and the field, from
``load_forecaster`` and from ``serve --forecast-model``'s loader alike."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from kubesage.core.errors import InputError, ModelError
from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.loop_adapter import load_loop_forecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.persistence import load_forecaster, save_forecaster
from kubesage.core.forecast.training import TrainConfig

Tensors = dict[str, torch.Tensor]
Header = dict[str, Any]
STEP_S = 5.0


@pytest.fixture(scope="module")
def good(panel: MetricPanel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    forecaster = make_forecaster(
        "stgcn", config=TrainConfig(epochs=1, batch_size=32, seed=3), horizon=5
    )
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 120)
    path = tmp_path_factory.mktemp("model") / "good.safetensors"
    return save_forecaster(forecaster, path, train_until_s=0.0, step_s=STEP_S)


def variant(
    good: Path,
    folder: Path,
    tensors: Callable[[Tensors], object] = lambda t: None,
    header: Callable[[Header], object] = lambda h: None,
) -> Path:
    """``good`` with its tensors and header changed in place by the two functions."""
    changed = {k: v.clone() for k, v in load_file(str(good)).items()}
    _, saved = load_forecaster(good)
    record = json.loads(json.dumps(saved))
    tensors(changed)
    header(record)
    path = folder / "bad.safetensors"
    save_file(changed, str(path), metadata={"kubesage": json.dumps(record)})
    return path


def first_weight(t: Tensors) -> torch.Tensor:
    return t[next(k for k in sorted(t) if k.startswith("model.") and t[k].is_floating_point())]


CASES: dict[str, tuple[Callable[[Tensors], object], Callable[[Header], object], str]] = {
    "NaN std": (
        lambda t: t["normaliser.std"].fill_(float("nan")),
        lambda h: None,
        "normaliser.std is not a finite positive number",
    ),
    "zero std": (
        lambda t: t["normaliser.std"].zero_(),
        lambda h: None,
        "normaliser.std is not a finite positive number",
    ),
    "negative std": (
        lambda t: t["normaliser.std"].neg_(),
        lambda h: None,
        "normaliser.std is not a finite positive number",
    ),
    "infinite mean": (
        lambda t: t["normaliser.mean"].fill_(float("inf")),
        lambda h: None,
        "normaliser.mean is not finite",
    ),
    "NaN weight": (
        lambda t: first_weight(t).fill_(float("nan")),
        lambda h: None,
        "non-finite weights in model.",
    ),
    "hidden 0": (lambda t: None, lambda h: h.update(hidden=0), "hidden 0 is not a whole number"),
    "hidden a string": (
        lambda t: None,
        lambda h: h.update(hidden=str(h["hidden"])),
        "is not a whole number of at least 1",
    ),
    "history 0": (lambda t: None, lambda h: h.update(history=0), "history 0 is not a whole"),
    "history -3": (lambda t: None, lambda h: h.update(history=-3), "history -3 is not a whole"),
    "horizon 0": (lambda t: None, lambda h: h.update(horizon=0), "horizon 0 is not a whole"),
    "no history": (lambda t: None, lambda h: h.pop("history"), "(no 'history')"),
    "anchor -1": (lambda t: None, lambda h: h.update(anchor_steps=-1), "anchor_steps -1 is not"),
    "anchor 1.5": (lambda t: None, lambda h: h.update(anchor_steps=1.5), "of at least 0"),
    "anchor a string": (
        lambda t: None,
        lambda h: h.update(anchor_steps="12"),
        "anchor_steps '12' is not",
    ),
    "no anchor in a v6 file": (
        lambda t: None,
        lambda h: h.pop("anchor_steps"),
        "(no 'anchor_steps')",
    ),
    "recent origins true": (
        lambda t: None,
        lambda h: h.update(highway_recent=True),
        "highway_recent True is not a whole number of at least 0",
    ),
    "no recent origins in a v6 file": (
        lambda t: None,
        lambda h: h.pop("highway_recent"),
        "(no 'highway_recent')",
    ),
    "no blends in a v6 file": (
        lambda t: None,
        lambda h: h.pop("highway_blends"),
        "(no 'highway_blends')",
    ),
    "entities twice": (
        lambda t: None,
        lambda h: h.update(entities=[h["entities"][0]] * len(h["entities"])),
        "more than once",
    ),
    "entities a string": (
        lambda t: None,
        lambda h: h.update(entities="ab"),
        "entities is not a non-empty list of names",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_could_not_forecast_is_refused_naming_the_file_and_field(
    good: Path, tmp_path: Path, case: str
) -> None:
    tensors, header, message = CASES[case]
    path = variant(good, tmp_path, tensors, header)
    with pytest.raises(ModelError, match=rf"bad\.safetensors: .*{re.escape(message)}"):
        load_forecaster(path)


@pytest.mark.parametrize("case", ["hidden 0", "history 0", "NaN std", "NaN weight"])
def test_the_loops_loader_refuses_it_too(good: Path, tmp_path: Path, case: str) -> None:
    tensors, header, message = CASES[case]
    path = variant(good, tmp_path, tensors, header)
    with pytest.raises(ModelError, match=rf"bad\.safetensors: .*{re.escape(message)}"):
        load_loop_forecaster(path, STEP_S)


def test_the_good_file_forecasts_and_a_step_that_is_a_boolean_is_refused(
    good: Path, tmp_path: Path, panel: MetricPanel
) -> None:
    loop = load_loop_forecaster(good, STEP_S)
    history = {
        (e, m): tuple(np.linspace(0.0, 1.0, 30)) for e in panel.entities for m in panel.metrics
    }
    forecast = loop.forecast(history, 1)
    assert len(forecast) == len(history) and np.isfinite(list(forecast.values())).all()
    path = variant(good, tmp_path, header=lambda h: h.update(step_s=True))
    with pytest.raises(InputError, match="step_s True is not a positive number"):
        load_loop_forecaster(path, 1.0)


def test_the_loops_loader_refuses_a_model_saved_from_a_cold_start(
    good: Path, tmp_path: Path
) -> None:
    # `forecast train` now refuses to write one; a file from before still loads as a
    # model, but the loop would read the last value under the name "stgcn".
    reason = "cold start: 40 steps of history give 12 training windows, need 21"
    path = variant(good, tmp_path, header=lambda h: h.update(fallback_reason=reason))
    with pytest.raises(InputError, match=r"bad\.safetensors was saved from a cold start \(cold"):
        load_loop_forecaster(path, STEP_S)


def test_the_anchor_round_trips_and_a_v3_file_loads_anchored_at_the_last_value(
    good: Path, tmp_path: Path, panel: MetricPanel
) -> None:
    loaded, header = load_forecaster(good)
    assert header["format"] == "kubesage.forecast/v6" and loaded.anchor_steps == 12
    history = panel.head(140)
    path = variant(good, tmp_path, header=lambda h: h.update(format="kubesage.forecast/v3"))
    old, _ = load_forecaster(path)
    assert old.anchor_steps == 0  # files before v4 were trained from the last value
    assert not np.allclose(old.predict(history, 5).values, loaded.predict(history, 5).values)
