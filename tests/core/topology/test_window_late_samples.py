"""The sliding window against late samples: a sample older than the window is dropped
and counted, and never empties a bucket that holds newer samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import Indicator
from kubesage.core.topology.window import SampleWindow

TRAFFIC = Indicator.TRAFFIC_GBPS


def test_a_sample_older_than_the_window_keeps_the_newest_telemetry() -> None:
    graph = DRTG.from_yaml(example_topology("dgx-h100-pod"))
    busy, other = graph.nic_uplink_edges(0)[0], graph.nic_uplink_edges(1)[0]
    graph.observe([busy], TRAFFIC, [40.0], 100.2)  # collector X, now
    graph.observe([other], TRAFFIC, [10.0], 95.1)  # collector Y, 5.1 s behind: same bucket
    assert graph.indicators[busy, TRAFFIC] == 40.0  # the busy uplink does not look idle
    assert graph.indicators[other, TRAFFIC] == 0.0  # the late sample was not used
    assert graph.late_samples == 1
    graph.observe([busy], TRAFFIC, [20.0], 100.5)
    assert graph.indicators[busy, TRAFFIC] == pytest.approx(30.0)
    graph.observe([other], TRAFFIC, [10.0], 96.5)  # 4 s behind: inside the window, used
    assert graph.indicators[other, TRAFFIC] == 10.0
    assert graph.late_samples == 1
    graph.observe([busy], TRAFFIC, [0.0], 101.6)  # time moves on: that bucket leaves first
    assert graph.indicators[other, TRAFFIC] == 0.0
    assert graph.indicators[busy, TRAFFIC] == pytest.approx(20.0)


@pytest.mark.parametrize("timestamp", [math.nan, math.inf])
def test_a_timestamp_that_is_not_a_number_is_refused(timestamp: float) -> None:
    window = SampleWindow(num_edges=1, window_s=5.0)
    with pytest.raises(InputError, match="finite"):
        window.add(np.array([0]), TRAFFIC, np.array([1.0]), timestamp)
