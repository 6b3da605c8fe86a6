"""PCA: fitted on real scraped history, component limits, save/load round trip and the
files it must refuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kubesage.core.errors import InputError, ModelError
from kubesage.core.telemetry.features import FeatureBuilder, MetricHistory, NodeFeatures
from kubesage.core.telemetry.metric_map import MetricMap
from kubesage.core.telemetry.pca import FORMAT, PcaModel, fit_pca, load_pca, save_pca

WINDOW_STEPS = 5


def names(width: int) -> list[str]:
    return [f"f{i}" for i in range(width)]


def low_rank(samples: int, width: int, rank: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(samples, rank)) @ rng.normal(size=(rank, width)) + 5.0


@pytest.fixture(scope="module")
def real_model(real_history: MetricHistory, test_map: MetricMap) -> tuple[PcaModel, np.ndarray]:
    builder = FeatureBuilder(test_map)
    rows = builder.training_matrix(real_history, WINDOW_STEPS)
    return fit_pca(rows, builder.names), rows


def test_pca_fitted_on_real_node_exporter_and_dcgm_history(
    real_model: tuple[PcaModel, np.ndarray], real_history: MetricHistory, test_map: MetricMap
) -> None:
    model, rows = real_model
    windows = real_history.steps - WINDOW_STEPS + 1
    assert 0 < rows.shape[0] <= windows * len(real_history.nodes)
    # fewer samples than 128: limited to samples - 1, and it says so
    assert model.n_components == min(128, rows.shape[0] - 1)
    assert model.limited_by is not None and "samples" in model.limited_by
    ratio = model.explained_variance_ratio
    assert np.all(np.diff(ratio) <= 1e-12) and 0.0 < ratio.sum() <= 1.0 + 1e-9
    latest = real_history.window(real_history.steps - 1, WINDOW_STEPS)
    features = FeatureBuilder(test_map).node_features(latest)
    projected = model.transform(features)
    assert projected.shape == (len(real_history.nodes), model.n_components)
    assert np.isfinite(projected).all()


def test_components_are_orthonormal_and_capture_a_low_rank_signal() -> None:
    rows = low_rank(400, 300, rank=3)
    model = fit_pca(rows, names(300))
    assert model.n_components == 128 and model.limited_by is None
    gram = model.components @ model.components.T
    assert np.allclose(gram, np.eye(128), atol=1e-8)
    assert model.explained_variance_ratio[:3].sum() > 0.99


def test_components_are_limited_by_features() -> None:
    model = fit_pca(low_rank(500, 40, rank=5), names(40))
    assert model.n_components == 40
    assert model.limited_by == "40 features"


def test_constant_features_do_not_break_scaling() -> None:
    rows = low_rank(50, 10, rank=2)
    rows[:, 3] = 7.0
    model = fit_pca(rows, names(10), n_components=4)
    assert model.scale[3] == 1.0
    assert np.isfinite(model.transform(rows)).all()


def test_save_load_round_trip(tmp_path: Path) -> None:
    rows = low_rank(60, 20, rank=4)
    model = fit_pca(rows, names(20), n_components=6)
    loaded = load_pca(save_pca(model, tmp_path / "pca.safetensors"))
    assert loaded.feature_names == model.feature_names
    assert loaded.samples == 60 and loaded.requested_components == 6
    assert np.array_equal(loaded.transform(rows), model.transform(rows))
    assert np.array_equal(loaded.explained_variance_ratio, model.explained_variance_ratio)


def test_transform_rejects_other_features(tmp_path: Path) -> None:
    model = fit_pca(low_rank(30, 5, rank=2), names(5), n_components=2)
    other = NodeFeatures(("n",), tuple(f"g{i}" for i in range(5)), np.zeros((1, 5)))
    with pytest.raises(ModelError, match="first difference 'g0' vs 'f0'"):
        model.transform(other)
    with pytest.raises(ModelError, match="5 features"):
        model.transform(np.zeros((1, 6)))
    with pytest.raises(InputError, match="finite"):
        model.transform(np.full((1, 5), np.nan))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (np.zeros((1, 3)), "at least 2 samples"),
        (
            np.array([[1.0, np.inf, 0.0], [0.0, 0.0, np.nan]]),
            r"must be finite: feature 'f1' is inf in row 0 \(2 non-finite value\(s\)\)",
        ),
        (np.zeros((4, 2)), "do not match"),
    ],
)
def test_fit_rejects_bad_rows(rows: np.ndarray, message: str) -> None:
    with pytest.raises(InputError, match=message):
        fit_pca(rows, names(3))


def write_raw(path: Path, tensors: dict[str, np.ndarray], header: dict[str, object]) -> Path:
    save_file(tensors, str(path), metadata={"kubesage": json.dumps(header)})
    return path


def good_parts() -> tuple[dict[str, np.ndarray], dict[str, object]]:
    tensors = {
        "mean": np.zeros(3),
        "scale": np.ones(3),
        "components": np.eye(3)[:2].copy(),
        "explained_variance": np.ones(2),
        "explained_variance_ratio": np.full(2, 0.5),
    }
    header: dict[str, object] = {
        "format": FORMAT,
        "version": 1,
        "feature_names": names(3),
        "samples": 10,
        "requested_components": 2,
    }
    return tensors, header


def test_a_hand_written_valid_file_loads(tmp_path: Path) -> None:
    tensors, header = good_parts()
    model = load_pca(write_raw(tmp_path / "ok.safetensors", tensors, header))
    assert model.n_components == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t, h: h.update(version=2), "version 2"),
        (lambda t, h: h.update(format="kubesage.forecast/v1"), "expected kubesage.pca"),
        (lambda t, h: h.update(feature_names=["a", "a", "b"]), "repeat"),
        (lambda t, h: h.pop("samples"), "malformed"),
        (lambda t, h: t.update(mean=np.zeros(4)), "mean has shape"),
        (lambda t, h: t.update(components=np.eye(3)), "explained_variance has shape"),
        (lambda t, h: t.update(scale=np.array([1.0, np.nan, 1.0])), "non-finite"),
        (lambda t, h: t.update(scale=np.array([1.0, 0.0, 1.0])), "positive"),
        (lambda t, h: t.pop("components"), "malformed"),
    ],
)
def test_mismatched_files_are_model_errors(tmp_path: Path, change: object, message: str) -> None:
    tensors, header = good_parts()
    change(tensors, header)  # type: ignore[operator]
    path = write_raw(tmp_path / "bad.safetensors", tensors, header)
    with pytest.raises(ModelError, match=message):
        load_pca(path)


@pytest.mark.parametrize(
    "content",
    [b"", b"not a safetensors file at all", b"\xff" * 64, (10**12).to_bytes(8, "little")],
)
def test_garbage_files_are_model_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelError, match="not a kubesage PCA file"):
        load_pca(path)


def test_truncated_and_missing_files_are_model_errors(tmp_path: Path) -> None:
    model = fit_pca(low_rank(30, 8, rank=2), names(8), n_components=3)
    path = save_pca(model, tmp_path / "pca.safetensors")
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(ModelError):
        load_pca(path)
    with pytest.raises(ModelError, match="no such"):
        load_pca(tmp_path / "absent.safetensors")
