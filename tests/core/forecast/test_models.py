"""Forecasting models: shapes, causality, determinism, persistence, refusal, cold start."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from kubesage.core.errors import InputError
from kubesage.core.forecast import ABLATION_NAMES, MODEL_NAMES
from kubesage.core.forecast.evaluate import evaluate
from kubesage.core.forecast.forecaster import Forecaster, NeuralForecaster, make_forecaster
from kubesage.core.forecast.graph import correlation_graph
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.persistence import load_forecaster, save_forecaster
from kubesage.core.forecast.stgcn import STGCN, LSTMBaseline, batched_edges
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.forecast.training import TrainConfig, check_device

TINY = TrainConfig(epochs=2, batch_size=32, seed=3)


def test_output_shapes() -> None:
    x, last = torch.randn(3, 12, 5, 8), torch.zeros(3, 5, 4)
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    assert STGCN(8, 4, 6, nodes=5).forward(x, edges, last).shape == (3, 6, 5, 4)
    assert LSTMBaseline(8, 4, 6).forward(x, edges, last).shape == (3, 6, 5, 4)


def test_disjoint_batching_offsets_each_copy() -> None:
    edges = torch.tensor([[0, 1], [1, 2]])
    assert batched_edges(edges, 2, 3).tolist() == [[0, 1, 3, 4], [1, 2, 4, 5]]


@pytest.mark.parametrize("changed_step", [3, 7, 11])
def test_stgcn_is_causal(changed_step: int) -> None:
    torch.manual_seed(0)
    model = STGCN(8, 4, 6, nodes=5).eval()
    edges = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 0]])
    x = torch.randn(2, 12, 5, 8)
    later = x.clone()
    later[:, changed_step:] += torch.randn_like(later[:, changed_step:])
    with torch.no_grad():
        before, after = model.features(x, edges), model.features(later, edges)
    assert torch.equal(before[:, :changed_step], after[:, :changed_step])
    assert not torch.equal(before[:, changed_step:], after[:, changed_step:])


def test_prediction_ignores_data_after_the_forecast_time(panel: MetricPanel) -> None:
    forecaster = make_forecaster("stgcn", config=TINY, horizon=5)
    forecaster.fit(panel, 120)
    history = panel.head(130)
    altered = panel.head(140)
    altered.values = altered.values.copy()
    altered.values[130:] += 1000.0
    a = forecaster.predict(history, 5).values
    b = forecaster.predict(altered.head(130), 5).values
    assert np.array_equal(a, b)


def test_training_is_deterministic_by_seed(panel: MetricPanel) -> None:
    runs = []
    for _ in range(2):
        forecaster = make_forecaster("stgcn", config=TINY, horizon=5)
        forecaster.fit(panel, 120)
        runs.append(forecaster.predict(panel.head(140), 5).values)
    assert np.array_equal(runs[0], runs[1])


def test_every_model_is_a_forecaster_with_finite_output(panel: MetricPanel) -> None:
    for name in MODEL_NAMES:
        forecaster = make_forecaster(name, config=TINY, horizon=5)
        assert isinstance(forecaster, Forecaster)
        forecaster.fit(panel, 120)
        forecast = forecaster.predict(panel.head(140), 3)
        assert forecast.values.shape == (3, 8, 4)
        assert np.isfinite(forecast.values).all(), name
        assert forecast.model == name


def test_save_load_round_trip(panel: MetricPanel, tmp_path: Path) -> None:
    forecaster = make_forecaster("stgcn", config=TINY, horizon=5)
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 120)
    path = save_forecaster(forecaster, tmp_path / "model.safetensors", train_until_s=123.0)
    loaded, header = load_forecaster(path)
    assert header["train_until_s"] == 123.0 and header["kind"] == "stgcn"
    history = panel.head(140)
    assert np.array_equal(forecaster.predict(history, 5).values, loaded.predict(history, 5).values)


def test_a_model_for_other_entities_or_metrics_is_refused(
    panel: MetricPanel, tmp_path: Path
) -> None:
    forecaster = make_forecaster("lstm", config=TINY, horizon=5)
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 120)
    loaded, _ = load_forecaster(
        save_forecaster(forecaster, tmp_path / "m.safetensors", train_until_s=0)
    )
    other = read_panel(write_synthetic_metrics(tmp_path / "other", entities=6, steps=160, seed=9))
    with pytest.raises(InputError, match="other entities"):
        loaded.check_compatible(other)
    fewer = MetricPanel(
        entities=panel.entities,
        metrics=panel.metrics[:3],
        start_s=panel.start_s,
        step_s=panel.step_s,
        values=panel.values[..., :3],
        mask=panel.mask[..., :3],
        alive=panel.alive,
    )
    with pytest.raises(InputError, match="trained on metrics"):
        loaded.check_compatible(fewer)


@pytest.mark.parametrize(
    "content", [b"", b"not a model at all", b"\x08\x00\x00\x00\x00\x00\x00\x00{}"]
)
def test_malformed_model_files_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"bad\.safetensors"):
        load_forecaster(path)


def test_cold_start_falls_back_to_last_value_and_says_so(panel: MetricPanel) -> None:
    forecaster = make_forecaster("stgcn", config=TINY, horizon=5)
    forecaster.fit(panel, 40)  # 40 steps: fewer windows than training needs
    assert "cold start" in forecaster.fallback_reason
    forecast = forecaster.predict(panel.head(60), 5)
    assert "cold start" in forecast.note and forecast.model == "last_value"
    last_value = make_forecaster("last_value", horizon=5)
    last_value.fit(panel, 40)
    assert np.array_equal(forecast.values, last_value.predict(panel.head(60), 5).values)
    short = forecaster.predict(panel.head(10), 5)
    assert short.model == "last_value" and "10 steps of history" in short.note


def test_windows_with_nothing_observed_do_not_count_as_training_windows(
    panel: MetricPanel,
) -> None:
    # One stray sample at step 0, then nothing until step 101: a grid that starts at a
    # stray early row, or a cut-off right after an outage. 82 window origins before
    # step 110, but only 4 hold an observed input and target: too few to learn from.
    quiet = panel.head(110)
    mask = quiet.mask.copy()
    mask[1:101] = False
    quiet = replace(quiet, mask=mask, values=np.where(mask, quiet.values, 0.0))
    for name in ("linear", "linear_lad", "lstm"):
        forecaster = make_forecaster(name, config=TINY, horizon=5)
        forecaster.fit(quiet, 110)
        assert "4 hold an observed input and an observed target, need 21" in (
            forecaster.fallback_reason
        ), name
        assert forecaster.predict(quiet, 5).model == "last_value"
    trained = make_forecaster("linear", horizon=5)
    trained.fit(panel, 110)  # the same steps, observed: trains
    assert not trained.fallback_reason


def test_refitting_rebuilds_the_graph_from_the_new_training_window(panel: MetricPanel) -> None:
    forecaster = make_forecaster("stgcn", config=TrainConfig(epochs=1, seed=0), horizon=5)
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 150)
    forecaster.fit(panel, 100)
    assert forecaster.graph is not None
    assert np.array_equal(forecaster.graph.edge_index, correlation_graph(panel, 100).edge_index)


def test_predict_refuses_other_entities(panel: MetricPanel, tmp_path: Path) -> None:
    forecaster = make_forecaster("lstm", config=TINY, horizon=5)
    forecaster.fit(panel, 120)
    renamed = read_panel(write_synthetic_metrics(tmp_path, entities=8, steps=160, seed=3))
    renamed.entities = tuple(f"x{e}" for e in renamed.entities)
    with pytest.raises(InputError, match="other entities"):
        forecaster.predict(renamed, 5)


def test_evaluate_scores_every_model_at_every_horizon(panel: MetricPanel) -> None:
    result = evaluate(panel, 120, horizons=(1, 3), config=TINY)
    models = result.document["models"]
    assert isinstance(models, dict) and set(models) == set(MODEL_NAMES)
    for per_horizon in models.values():
        assert set(per_horizon) == {"1", "3"}
        for entry in per_horizon.values():
            assert set(entry["per_metric"]) == set(panel.metrics)
            for key in ("wape", "mape_nonzero"):
                assert entry[key] == pytest.approx(
                    np.mean([m[key] for m in entry["per_metric"].values()])
                )
    assert "correlation k-NN" in result.graph


@pytest.mark.parametrize("spatial", ["both", "correlation", "adaptive"])
def test_with_the_gate_at_zero_the_stgcn_is_its_temporal_part(spatial: str) -> None:
    torch.manual_seed(0)
    model = STGCN(8, 4, 6, nodes=5, spatial=spatial).eval()  # type: ignore[arg-type]
    edges = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    x = torch.cat([torch.randn(2, 12, 5, 4), torch.ones(2, 12, 5, 4)], dim=-1)  # values, mask
    last = torch.randn(2, 5, 4)
    with torch.no_grad():
        assert torch.equal(model(x, edges, last), model.temporal(x, edges, last))
        model.residual.gate.fill_(0.5)
        assert not torch.allclose(model(x, edges, last), model.temporal(x, edges, last))


def test_self_adaptive_adjacency_is_row_stochastic() -> None:
    adjacency = STGCN(8, 4, 6, nodes=7).residual.adjacency()
    assert adjacency is not None and adjacency.shape == (7, 7)
    assert torch.allclose(adjacency.sum(dim=1), torch.ones(7))
    assert STGCN(8, 4, 6, nodes=7, spatial="correlation").residual.adjacency() is None


def test_stgcn_never_validates_worse_than_its_temporal_part(panel: MetricPanel) -> None:
    forecaster = make_forecaster("stgcn", config=TINY, horizon=5)
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, 120)
    assert forecaster.report is not None and forecaster.temporal_report is not None
    assert (
        forecaster.report.best_validation_loss
        <= forecaster.temporal_report.best_validation_loss + 1e-9
    )


def test_ablations_are_reported_apart_and_the_temporal_part_is_the_lstm(
    panel: MetricPanel,
) -> None:
    result = evaluate(
        panel,
        120,
        horizons=(1, 3),
        models=("stgcn", "lstm"),
        ablations=ABLATION_NAMES,
        config=TINY,
    )
    document = result.document
    assert set(document["models"]) == {"stgcn", "lstm"}  # type: ignore[arg-type]
    ablations = document["ablations"]
    assert isinstance(ablations, dict) and set(ablations) == set(ABLATION_NAMES)
    models = document["models"]
    assert isinstance(models, dict)
    assert ablations["stgcn_temporal"] == models["lstm"]
    assert "ablations" not in evaluate(panel, 120, horizons=(1,), models=("last_value",)).document


def test_training_on_the_cpu_device_and_refusing_others(panel: MetricPanel) -> None:
    forecaster = make_forecaster("lstm", config=TrainConfig(epochs=1, device="cpu"), horizon=5)
    forecaster.fit(panel, 120)
    assert np.isfinite(forecaster.predict(panel.head(140), 5).values).all()
    assert check_device("cpu") == "cpu"
    with pytest.raises(InputError, match="not a torch device"):
        check_device("abacus")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            check_device("cuda")
