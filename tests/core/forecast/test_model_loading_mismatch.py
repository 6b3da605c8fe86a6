"""A forecast model for other entities or metrics than the loop's (one trained on pods,
served to a loop of nodes) answers no series: once the loop has asked it for its
history's worth of ticks, it warns once, naming both sides, and the loop's forecast
source says so, until a series of the model turns up."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from kubesage.core.forecast.forecaster import Forecast
from kubesage.core.forecast.loop_adapter import LoopForecaster
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.loop.forecasts import ForecastPanel

HISTORY = 4
NODES = ("node-0", "node-1")
LOOP_METRIC = "dcgm.gpu_util_percent.gpu0"


class Constant:
    """A panel forecaster that forecasts 42 everywhere."""

    name = "stgcn"

    def predict(self, history: MetricPanel, horizon: int) -> Forecast:
        shape = (horizon, len(history.entities), len(history.metrics))
        return Forecast(values=np.full(shape, 42.0), model=self.name)


def loop_panel(entities: tuple[str, ...], metrics: tuple[str, ...]) -> ForecastPanel:
    panel = ForecastPanel(history=16)
    panel.use(LoopForecaster(Constant(), entities, metrics, history_steps=HISTORY))
    return panel


def tick(panel: ForecastPanel, nodes: tuple[str, ...] = NODES) -> None:
    for node in nodes:
        panel.observe(node, LOOP_METRIC, 50.0)
    panel.refresh()


def test_a_model_of_other_entities_warns_once_naming_both_sides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods = tuple(f"pod-{i}" for i in range(5))
    panel = loop_panel(pods, ("cpu", "memory"))
    matching = loop_panel(NODES, (LOOP_METRIC,))
    with caplog.at_level(logging.WARNING):
        for _ in range(HISTORY - 1):
            tick(panel)
            tick(matching)
        assert caplog.records == [] and panel.source == "stgcn"  # the history fills first
        for _ in range(3 * HISTORY):
            tick(panel)
            tick(matching)
    [warning] = [r.getMessage() for r in caplog.records]  # once, and for this model only
    assert "knows none of the loop's 2 series" in warning
    assert "pod-0, pod-1, pod-2, … (5 in all)" in warning and "cpu, memory" in warning
    assert "node-0, node-1" in warning and LOOP_METRIC in warning
    assert panel.source == "stgcn (matches no series)" and panel.answered == 0
    assert panel.predict("node-0", LOOP_METRIC) == 50.0  # the last value, as before
    assert matching.source == "stgcn" and matching.answered == 2


def test_it_waits_for_telemetry_and_recovers_when_a_series_of_the_model_turns_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    panel = loop_panel(("node-9",), (LOOP_METRIC,))
    with caplog.at_level(logging.WARNING):
        for _ in range(2 * HISTORY):
            panel.refresh()  # no telemetry yet: nothing to match
        assert caplog.records == [] and panel.source == "stgcn"
        tick(panel)
    assert panel.source.endswith("(matches no series)") and len(caplog.records) == 1
    caplog.clear()
    with caplog.at_level(logging.INFO):
        tick(panel, (*NODES, "node-9"))
    assert panel.source == "stgcn" and panel.answered == 1
    assert panel.predict("node-9", LOOP_METRIC) == 42.0
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # no second warning
    assert "now knows" in caplog.records[0].getMessage()
