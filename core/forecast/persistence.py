"""Saving and loading trained neural forecasters as safetensors (never code).

The file holds the weights, the normalisation statistics and the graph as
tensors, plus a JSON header naming the model kind, its sizes, the entities and
metrics it was trained on, the training cut-off and the data's step (``step_s``; null
in files written before it was recorded). Loading rebuilds the model
from that header and refuses anything that does not match exactly. A model saved with
its upper-quantile calibration (``forecast train --quantile``) also holds the conformal
offsets; :func:`load_panel_forecaster` gives it back as that quantile forecaster.

Loading refuses, with a :class:`~kubesage.core.errors.ModelError` naming the file and
what is wrong with it, a file that would load but not forecast: sizes (``history``,
``horizon``, ``hidden``) under 1, entities or metrics that are not distinct names,
weights or normalisation statistics that are not finite, or a standard deviation that
is not positive (every forecast would be NaN).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from kubesage.core.errors import InputError, ModelError
from kubesage.core.forecast.baselines import (
    LAD_FEATURES,
    MEAN_ONLY_LAD_FEATURES,
    LeastAbsoluteForecaster,
)
from kubesage.core.forecast.forecaster import NeuralForecaster
from kubesage.core.forecast.graph import EntityGraph
from kubesage.core.forecast.highway import BLEND_SETS, BlendSet, LinearHighway
from kubesage.core.forecast.quantile import Calibration, QuantileForecaster
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.forecast.windows import Normaliser

FORMAT = "kubesage.forecast/v6"
"""v6: the linear highway may shrink its forecast toward each series' zero (header
``highway_blends``; the floor's validation shares in ``highway.floor``). v5 files (a
highway choosing among convex blends of its two parts at each forecast from the latest
``highway_recent`` matured origins; 0: its validation weights throughout) load with
convex blends, as they were evaluated. v4 files (the neural forecast a change from the
median of the last ``anchor_steps`` observed values, header ``anchor_steps``) load with
the validation weights, as they were evaluated; v3 files (the ST-GCN as the LSTM
temporal part, a gated graph residual and a linear highway in ``highway.*``) and v2
files (no highway) load anchored at the last value as they were trained."""
ONLINE_FORMATS = ("kubesage.forecast/v5", FORMAT)
ANCHORED_FORMATS = ("kubesage.forecast/v4", *ONLINE_FORMATS)
READABLE_FORMATS = ("kubesage.forecast/v2", "kubesage.forecast/v3", *ANCHORED_FORMATS)


def save_forecaster(
    fitted: NeuralForecaster | QuantileForecaster,
    path: Path | str,
    *,
    train_until_s: float,
    step_s: float | None = None,
) -> Path:
    """Write a fitted forecaster — a neural one, or one wrapped for an upper quantile
    (its offsets in ``quantile.*``, its level and scale in the header's ``quantile``).
    ``step_s`` is the training data's grid step: the loop checks its tick against it
    before it plugs the model in."""
    upper = fitted if isinstance(fitted, QuantileForecaster) else None
    forecaster = upper.point if upper is not None else fitted
    if not isinstance(forecaster, NeuralForecaster):
        raise InputError("only a neural forecaster (or its upper quantile) can be saved")
    if forecaster.model is None or forecaster.normaliser is None or forecaster.graph is None:
        raise InputError("only a fitted forecaster can be saved")
    if upper is not None and upper.calibration is None:
        raise InputError("only a calibrated quantile forecaster can be saved")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        f"model.{k}": v.detach().cpu().contiguous()
        for k, v in forecaster.model.state_dict().items()
    }
    tensors["normaliser.mean"] = torch.from_numpy(forecaster.normaliser.mean.copy())
    tensors["normaliser.std"] = torch.from_numpy(forecaster.normaliser.std.copy())
    tensors["graph.edge_index"] = torch.from_numpy(forecaster.graph.edge_index.copy())
    highway = forecaster.linear_highway
    if highway is not None and highway.linear.weights is not None:
        tensors["highway.linear"] = torch.from_numpy(highway.linear.weights.copy())
        tensors["highway.weights"] = torch.from_numpy(highway.weights[..., 0].copy())
        tensors["highway.floor"] = torch.from_numpy(highway.weights[..., 1].copy())
    header: dict[str, Any] = {
        "format": FORMAT,
        "kind": forecaster.kind,
        "history": forecaster.history,
        "horizon": forecaster.horizon,
        "hidden": forecaster.hidden,
        "spatial": forecaster.spatial,
        "highway": forecaster.highway,
        "highway_blends": forecaster.highway_blends,
        "anchor_steps": forecaster.anchor_steps,
        "highway_recent": highway.recent if highway is not None else forecaster.highway_recent,
        "seed": forecaster.config.seed,
        "entities": list(forecaster.entities),
        "metrics": list(forecaster.metrics),
        "graph": forecaster.graph.description,
        "train_until_s": train_until_s,
        "step_s": step_s,
        "fallback_reason": forecaster.fallback_reason,
    }
    if upper is not None and upper.calibration is not None:
        calibration = upper.calibration
        tensors["quantile.step_offsets"] = torch.from_numpy(calibration.step_offsets.copy())
        tensors["quantile.peak_offsets"] = torch.from_numpy(calibration.peak_offsets.copy())
        header["quantile"] = {
            "q": calibration.quantile,
            "scale": upper.scale,
            "residuals": calibration.residuals,
            "note": upper.note,
        }
    save_file(tensors, str(path), metadata={"kubesage": json.dumps(header)})
    return path


def load_forecaster(path: Path | str) -> tuple[NeuralForecaster, dict[str, Any]]:
    """The forecaster in ``path`` and its header; ModelError for anything malformed."""
    tensors, header = _read(Path(path))
    return _point_model(Path(path), tensors, header), header


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The file's tensors and its kubesage header (a readable format)."""
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        tensors = load_file(str(path))
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            raw_header = json.loads(handle.read(size))
        header = json.loads(raw_header["__metadata__"]["kubesage"])
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ModelError(f"{path}: not a kubesage forecaster file ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") not in READABLE_FORMATS:
        found = header.get("format") if isinstance(header, dict) else None
        raise ModelError(
            f"{path}: unsupported format {found!r}, expected one of {', '.join(READABLE_FORMATS)}"
        )
    return tensors, header


def _point_model(
    path: Path, tensors: dict[str, torch.Tensor], header: dict[str, Any]
) -> NeuralForecaster:
    """The neural forecaster the tensors and header describe; ModelError if they do not fit."""
    try:
        kind = header["kind"]
        if kind not in ("stgcn", "lstm"):
            raise ValueError(f"unknown model kind {kind!r}")
        spatial = header.get("spatial", "both")
        if spatial not in ("both", "correlation", "adaptive", "none"):
            raise ValueError(f"unknown spatial part {spatial!r}")
        history, horizon, hidden = (_size(header, key) for key in ("history", "horizon", "hidden"))
        entities, metrics = _names(header, "entities"), _names(header, "metrics")
        mean = tensors["normaliser.mean"].numpy().astype(np.float64)
        std = tensors["normaliser.std"].numpy().astype(np.float64)
        edge_index = tensors["graph.edge_index"].numpy().astype(np.int64)
        if mean.shape != (len(entities), len(metrics)) or std.shape != mean.shape:
            raise ValueError(f"normaliser shape {mean.shape} does not fit the entities and metrics")
        if not np.isfinite(mean).all():
            raise ValueError("normaliser.mean is not finite")
        if not (np.isfinite(std).all() and (std > 0).all()):
            raise ValueError("normaliser.std is not a finite positive number everywhere")
        if (
            edge_index.ndim != 2
            or edge_index.shape[0] != 2
            or (edge_index.size and not 0 <= edge_index.min() <= edge_index.max() < len(entities))
        ):
            raise ValueError("graph edges do not fit the entities")
        anchor_steps = _count(header, "anchor_steps", ANCHORED_FORMATS)
        recent = _count(header, "highway_recent", ONLINE_FORMATS)
        blends = _blends(header)
        highway = _highway(tensors, len(metrics), horizon, recent, blends)
        forecaster = NeuralForecaster(
            history=history,
            horizon=horizon,
            kind=kind,
            config=TrainConfig(seed=int(header["seed"])),
            hidden=hidden,
            spatial=spatial,
            highway=bool(header.get("highway", False)),
            highway_blends=blends,
            anchor_steps=anchor_steps,
            linear_highway=highway,
            highway_recent=recent,
            entities=entities,
            metrics=metrics,
            graph=EntityGraph(edge_index=edge_index, description=str(header["graph"])),
            normaliser=Normaliser(mean=mean, std=std),
            fallback_reason=str(header.get("fallback_reason", "")),
        )
        model = forecaster.build(len(forecaster.metrics))
    except KeyError as exc:
        raise ModelError(f"{path}: malformed kubesage forecaster file (no {exc})") from exc
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{path}: malformed kubesage forecaster file ({exc})") from exc
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelError(f"{path}: weights do not fit a {kind} model ({exc})") from exc
    bad = sorted(f"model.{k}" for k, v in state.items() if not torch.isfinite(v).all())
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise ModelError(f"{path}: non-finite weights in {', '.join(bad[:3])}{more}")
    forecaster.model = model
    return forecaster


def _size(header: dict[str, Any], key: str) -> int:
    """The header's ``key``: a whole number of at least 1 (ValueError naming it if not)."""
    value = header[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} {value!r} is not a whole number of at least 1")
    return value


def _count(header: dict[str, Any], key: str, formats: tuple[str, ...]) -> int:
    """The header's ``key``, a whole number of at least 0, in files of ``formats`` (required
    there); 0 in the older files written before it (ValueError naming it if bad)."""
    if header["format"] not in formats:
        return 0
    value = header[key]
    if type(value) is not int or value < 0:
        raise ValueError(f"{key} {value!r} is not a whole number of at least 0")
    return value


def _blends(header: dict[str, Any]) -> BlendSet:
    """The blends the file's highway chooses among: ``convex`` in files before v6."""
    if header["format"] != FORMAT:
        return "convex"
    value = header["highway_blends"]
    for known in BLEND_SETS:
        if value == known:
            return known
    raise ValueError(f"highway_blends {value!r} is not one of {', '.join(BLEND_SETS)}")


def _names(header: dict[str, Any], key: str) -> tuple[str, ...]:
    """The header's ``key``: a non-empty list of distinct names (ValueError naming it if not)."""
    value = header[key]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{key} is not a non-empty list of names")
    names = tuple(str(name) for name in value)
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise ValueError(f"{key} name {', '.join(twice[:3])} more than once")
    return names


def load_panel_forecaster(
    path: Path | str,
) -> tuple[NeuralForecaster | QuantileForecaster, dict[str, Any]]:
    """The forecaster in ``path`` as it was saved: its upper quantile when the file holds
    one (``forecast train --quantile``), else the point model; and its header."""
    tensors, header = _read(Path(path))
    forecaster = _point_model(Path(path), tensors, header)
    if "quantile" not in header:
        return forecaster, header
    try:
        record = header["quantile"]
        quantile = float(record["q"])
        scale = record["scale"]
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile {quantile} is not in (0, 1)")
        if scale not in ("series", "window"):
            raise ValueError(f"unknown residual scale {scale!r}")
        step = tensors["quantile.step_offsets"].numpy().astype(np.float64)
        peak = tensors["quantile.peak_offsets"].numpy().astype(np.float64)
        metrics = len(forecaster.metrics)
        if step.shape != (forecaster.horizon, metrics) or peak.shape != (metrics,):
            raise ValueError(
                f"quantile offsets {step.shape} and {peak.shape} do not fit "
                f"{metrics} metrics and horizon {forecaster.horizon}"
            )
        if not (np.isfinite(step).all() and np.isfinite(peak).all()):
            raise ValueError("quantile offsets are not finite")
        calibration = Calibration(quantile, step, peak, int(record["residuals"]))
        upper = QuantileForecaster(
            forecaster,
            quantile=quantile,
            scale=scale,
            calibration=calibration,
            note=str(record.get("note", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{path}: malformed quantile part ({exc})") from exc
    return upper, header


def _highway(
    tensors: dict[str, torch.Tensor], metrics: int, horizon: int, recent: int, blends: BlendSet
) -> LinearHighway | None:
    """The saved linear highway, if the file holds one; ValueError if its shapes are wrong.
    Files before v6 hold no floor: its shares are 0."""
    if "highway.linear" not in tensors and "highway.weights" not in tensors:
        return None
    linear = tensors["highway.linear"].numpy().astype(np.float64)
    weights = tensors["highway.weights"].numpy().astype(np.float64)
    floor = (
        tensors["highway.floor"].numpy().astype(np.float64)
        if blends != "convex"
        else np.zeros_like(weights)
    )
    features = (LAD_FEATURES, MEAN_ONLY_LAD_FEATURES)
    if (
        linear.shape not in {(metrics, horizon, f) for f in features}
        or weights.shape != (horizon, metrics)
        or floor.shape != weights.shape
    ):
        raise ValueError(
            f"highway shapes {linear.shape}, {weights.shape} and {floor.shape} do not fit "
            f"{metrics} metrics and horizon {horizon}"
        )
    shares = np.stack([weights, floor], axis=-1)
    if not (
        np.isfinite(linear).all()
        and ((shares >= 0) & (shares <= 1)).all()
        and (shares.sum(axis=-1) <= 1 + 1e-9).all()
    ):
        raise ValueError(
            "highway weights are not finite, or a blend share is outside [0, 1] "
            "(or the neural and floor shares sum to more than 1)"
        )
    fitted = LeastAbsoluteForecaster()
    fitted.weights = linear
    return LinearHighway(fitted, shares, recent, blends)
