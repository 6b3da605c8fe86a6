"""Prometheus history → a forecaster's panel over the nodes (``forecast train --prometheus``)."""

from __future__ import annotations

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.forecast.node_panel import node_panel, select_columns
from kubesage.core.telemetry.features import MetricHistory

COLUMNS = ("node_exporter.load1", "dcgm.gpu_util_percent.gpu0", "dcgm.gpu_util_percent.gpu1")


def history(values: np.ndarray, nodes: tuple[str, ...] = ("a", "b", "c")) -> MetricHistory:
    return MetricHistory(15.0 * np.arange(values.shape[0]), nodes, COLUMNS, values)


def test_nodes_without_the_columns_are_left_out_and_named() -> None:
    values = np.full((6, 3, 3), np.nan)
    values[:, 0, 1:] = 40.0  # a: both GPUs
    values[::2, 1, 1] = 70.0  # b: GPU 0, every other step
    values[:, 2, 0] = 1.5  # c: a CPU node, no GPU column
    chosen = node_panel(history(values))
    panel = chosen.panel
    assert panel.entities == ("a", "b") and chosen.silent_nodes == ("c",)
    assert panel.metrics == COLUMNS[1:] and chosen.empty_columns == ()
    assert panel.step_s == 15.0 and panel.start_s == 0.0
    assert panel.mask[:, 1, 0].tolist() == [True, False] * 3  # gaps masked, not zero
    assert not panel.mask[:, 1, 1].any() and panel.alive[:, 1].tolist() == [True, False] * 3
    assert panel.values[0, 1, 0] == 70.0


def test_patterns_that_match_nothing_or_data_that_has_nothing_are_refused() -> None:
    with pytest.raises(InputError, match=r"--metrics dcgm\.sm_\* matches no column .* e\.g\."):
        select_columns(COLUMNS, ["dcgm.sm_*"])
    with pytest.raises(InputError, match="no node reported any of"):
        node_panel(history(np.full((6, 3, 3), np.nan)))
    one_step = np.full((1, 3, 3), 50.0)
    with pytest.raises(InputError, match="1 step"):
        node_panel(history(one_step))
