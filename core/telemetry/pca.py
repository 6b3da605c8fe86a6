"""PCA of per-node feature vectors: fitted on history, saved and loaded as safetensors.

:func:`fit_pca` standardises each feature (centre on the mean, divide by the standard
deviation; a constant feature keeps scale 1 so it maps to 0) and takes the SVD of the
standardised rows. It keeps ``n_components`` (default 128) or fewer: never more than
the features, nor more than ``samples − 1`` (centred data has no more directions), and
:attr:`PcaModel.limited_by` says which bound applied. Explained variance (absolute and
as a ratio of the total) is kept per component.

Files are safetensors (arrays only; never code) with a JSON header holding the format
version, the feature names the model was fitted on and the fit's counts. Loading
rejects with :class:`ModelError` a missing or garbled file, another format or
version, arrays whose shapes do not fit the header, and non-finite numbers;
:meth:`PcaModel.transform` rejects features laid out differently from the fit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import InputError, ModelError
from kubesage.core.telemetry.features import NodeFeatures

FORMAT = "kubesage.pca"
VERSION = 1
DEFAULT_COMPONENTS = 128


@dataclass(frozen=True)
class PcaModel:
    """A fitted PCA: ``transform(x) = ((x − mean) / scale) @ components.T``."""

    feature_names: tuple[str, ...]
    mean: FloatArray
    scale: FloatArray
    components: FloatArray
    """``[k, features]``, orthonormal rows, by decreasing explained variance."""
    explained_variance: FloatArray
    explained_variance_ratio: FloatArray
    samples: int
    requested_components: int

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])

    @property
    def limited_by(self) -> str | None:
        """Why fewer components than requested were kept (None when all were)."""
        if self.n_components >= self.requested_components:
            return None
        if self.n_components == len(self.feature_names):
            return f"{len(self.feature_names)} features"
        return f"{self.samples} samples (at most samples − 1 directions after centring)"

    def transform(self, features: NodeFeatures | FloatArray) -> FloatArray:
        """Project rows onto the components: ``[rows, n_components]``."""
        if isinstance(features, NodeFeatures):
            if features.names != self.feature_names:
                raise ModelError(
                    "the features are not laid out as the PCA model's: "
                    f"{len(features.names)} vs {len(self.feature_names)} names"
                    + _first_difference(features.names, self.feature_names)
                )
            rows = features.values
        else:
            rows = np.asarray(features, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != len(self.feature_names):
            raise ModelError(
                f"expected rows of {len(self.feature_names)} features, got shape {rows.shape}"
            )
        if not np.isfinite(rows).all():
            raise InputError("features must be finite (the builder imputes and flags gaps)")
        return np.asarray(((rows - self.mean) / self.scale) @ self.components.T, dtype=np.float64)


def _first_difference(a: Sequence[str], b: Sequence[str]) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"; first difference {x!r} vs {y!r}"
    return ""


def fit_pca(
    rows: FloatArray, feature_names: Sequence[str], *, n_components: int = DEFAULT_COMPONENTS
) -> PcaModel:
    """Fit on ``rows[samples, features]`` (e.g. ``FeatureBuilder.training_matrix``)."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != len(feature_names):
        raise InputError(f"rows of shape {rows.shape} do not match {len(feature_names)} names")
    if rows.shape[0] < 2:
        raise InputError(f"PCA needs at least 2 samples, got {rows.shape[0]}")
    if n_components < 1:
        raise InputError(f"n_components must be at least 1, got {n_components}")
    finite = np.isfinite(rows)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise InputError(
            f"training rows must be finite: feature {feature_names[column]!r} is "
            f"{rows[row, column]} in row {row} ({int((~finite).sum())} non-finite value(s))"
        )
    samples, width = rows.shape
    mean = rows.mean(axis=0)
    std = rows.std(axis=0)
    scale = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    standardised = (rows - mean) / scale
    _, singular, vt = np.linalg.svd(standardised, full_matrices=False)
    keep = min(n_components, width, samples - 1)
    variance = singular**2 / (samples - 1)
    total = float(variance.sum())
    ratio = variance / total if total > 0 else np.zeros_like(variance)
    components = vt[:keep]
    # Deterministic signs: the largest-magnitude loading of each component is positive.
    signs = np.sign(components[np.arange(keep), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1.0, signs)[:, np.newaxis]
    return PcaModel(
        feature_names=tuple(feature_names),
        mean=mean,
        scale=scale,
        components=np.ascontiguousarray(components),
        explained_variance=variance[:keep].copy(),
        explained_variance_ratio=ratio[:keep].copy(),
        samples=samples,
        requested_components=n_components,
    )


def save_pca(model: PcaModel, path: Path | str) -> Path:
    """Write ``model`` as safetensors with its header; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "feature_names": list(model.feature_names),
        "samples": model.samples,
        "requested_components": model.requested_components,
    }
    tensors = {
        "mean": model.mean,
        "scale": model.scale,
        "components": model.components,
        "explained_variance": model.explained_variance,
        "explained_variance_ratio": model.explained_variance_ratio,
    }
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in tensors.items()},
        str(path),
        metadata={"kubesage": json.dumps(header)},
    )
    return path


def load_pca(path: Path | str) -> PcaModel:
    """Read a model written by :func:`save_pca`; ModelError for anything else."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such PCA model file")
    try:
        with safe_open(str(path), framework="numpy") as handle:
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
            header = json.loads((handle.metadata() or {})["kubesage"])
        if not isinstance(header, dict):
            raise ValueError("the kubesage header is not an object")
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{path}: not a kubesage PCA file ({exc})") from exc
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ModelError(
            f"{path}: format {header.get('format')!r} version {header.get('version')!r}; "
            f"expected {FORMAT} version {VERSION}"
        )
    try:
        names = header["feature_names"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("feature_names is not a list of strings")
        if len(set(names)) != len(names):
            raise ValueError("feature_names repeat")
        arrays = {
            key: np.asarray(tensors[key], dtype=np.float64)
            for key in ("mean", "scale", "components", "explained_variance")
        }
        ratio = np.asarray(tensors["explained_variance_ratio"], dtype=np.float64)
        width = len(names)
        k = arrays["components"].shape[0] if arrays["components"].ndim == 2 else -1
        expected = {
            "mean": (width,),
            "scale": (width,),
            "components": (k, width),
            "explained_variance": (k,),
        }
        for key, shape in expected.items():
            if arrays[key].shape != shape:
                raise ValueError(f"{key} has shape {arrays[key].shape}, expected {shape}")
        if ratio.shape != (k,) or k < 1:
            raise ValueError(f"explained_variance_ratio has shape {ratio.shape}, expected ({k},)")
        samples = int(header["samples"])
        requested = int(header["requested_components"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{path}: malformed kubesage PCA file ({exc})") from exc
    for key, array in (*arrays.items(), ("explained_variance_ratio", ratio)):
        if not np.isfinite(array).all():
            raise ModelError(f"{path}: {key} holds non-finite numbers")
    if (arrays["scale"] <= 0).any():
        raise ModelError(f"{path}: scale must be positive")
    return PcaModel(
        feature_names=tuple(names),
        mean=arrays["mean"],
        scale=arrays["scale"],
        components=arrays["components"],
        explained_variance=arrays["explained_variance"],
        explained_variance_ratio=ratio,
        samples=samples,
        requested_components=requested,
    )
