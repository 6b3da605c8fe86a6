"""A large cluster's history trains within fixed budgets: thinned windows, capped
batches, a correlation graph ranked in blocks, and an adaptive adjacency computed once
per version of its embeddings."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from kubesage.core.forecast import graph
from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.stgcn import STGCN
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.forecast.windows import thinned_origins

TINY = TrainConfig(epochs=1, batch_size=32, seed=3)


def test_thinned_origins_fit_the_budget_evenly_and_keep_both_ends() -> None:
    origins = np.arange(24, 1000)
    kept = thinned_origins(origins, entities=100, budget=10_000, keep_at_least=20)
    assert kept.size == 100
    assert (kept[0], kept[-1]) == (24, 999)
    gaps = np.diff(kept)
    assert gaps.max() - gaps.min() <= 1


@pytest.mark.parametrize(
    ("entities", "budget", "keep_at_least", "expected"),
    [
        (100, 1_000_000, 20, 976),  # they fit: every origin
        (100, 1_000, 20, 20),  # the floor wins over the budget
        (0, 100, 20, 976),  # no entities: no series to bound
    ],
)
def test_thinned_origins_edges(
    entities: int, budget: int, keep_at_least: int, expected: int
) -> None:
    origins = np.arange(24, 1000)
    assert thinned_origins(origins, entities, budget, keep_at_least).size == expected


def test_a_forecaster_over_its_budget_trains_on_fewer_windows_and_says_so(
    panel: MetricPanel,
) -> None:
    roomy = make_forecaster("lstm", config=TINY, horizon=5)
    roomy.fit(panel, 120)
    origins = 120 - roomy.history - roomy.horizon + 1
    assert (roomy.training_note, roomy.training_windows) == ("", origins)

    tight = make_forecaster("lstm", config=TINY, horizon=5)
    assert isinstance(tight, NeuralForecaster)
    tight.max_window_series = 40 * len(panel.entities)
    tight.fit(panel, 120)
    assert tight.training_windows == 40
    assert re.fullmatch(
        rf"trained on 40 of {origins} windows, evenly spaced, so that windows × 8 entities "
        r"stays within 320",
        tight.training_note,
    )
    assert tight.report is not None and tight.report.epochs_run == 1
    assert np.isfinite(tight.predict(panel.head(140), 5).values).all()


@pytest.fixture
def lstm_batches() -> Iterator[list[int]]:
    """The sequence count of every LSTM call while the test runs."""
    seen: list[int] = []

    def record(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if isinstance(module, nn.LSTM):
            seen.append(int(args[0].shape[0]))

    handle = nn.modules.module.register_module_forward_pre_hook(record)
    yield seen
    handle.remove()


@pytest.mark.parametrize("model", ["lstm", "stgcn"])
def test_a_batch_never_holds_more_series_than_its_cap(
    panel: MetricPanel, lstm_batches: list[int], model: str
) -> None:
    entities = len(panel.entities)
    config = TrainConfig(epochs=1, batch_size=32, seed=3, max_batch_series=5 * entities)
    forecaster = make_forecaster(model, config=config, horizon=5)
    forecaster.fit(panel, 120)
    assert max(lstm_batches) == 5 * entities  # five windows of every entity

    lstm_batches.clear()
    make_forecaster(model, config=TINY, horizon=5).fit(panel, 120)
    assert max(lstm_batches) == 32 * entities


def test_the_correlation_graph_is_the_same_ranked_in_blocks(
    panel: MetricPanel, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = graph.correlation_graph(panel, 120)
    monkeypatch.setattr(graph, "BLOCK_ROWS", 3)  # 8 entities: blocks of 3, 3 and 2 rows
    blocked = graph.correlation_graph(panel, 120)
    assert blocked.edge_index.shape[1] > 0
    assert np.array_equal(whole.edge_index, blocked.edge_index)


def test_the_adjacency_is_computed_once_per_version_of_the_embeddings() -> None:
    torch.manual_seed(0)
    model = STGCN(8, 4, 6, nodes=5).eval()
    torch.manual_seed(1)
    other = STGCN(8, 4, 6, nodes=5)
    residual = model.residual
    with torch.no_grad():
        first = residual.adjacency()
        assert first is not None and residual.adjacency() is first
        model.load_state_dict(other.state_dict())  # new embeddings, written in place
        after = residual.adjacency()
    assert residual.source is not None and residual.target is not None
    fresh = torch.softmax(F.relu(residual.source @ residual.target.T), dim=1)
    assert after is not None and not torch.equal(after, first)
    assert torch.allclose(after, fresh)
    assert torch.allclose(residual.adjacency(), fresh)  # with gradients: always fresh
