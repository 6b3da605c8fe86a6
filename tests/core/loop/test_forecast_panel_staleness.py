"""Stale telemetry expires in the forecast panel: a series without a recent sample
forecasts nothing, and one silent for much longer is dropped (node churn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from kubesage.core.loop import forecasts
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC, ForecastPanel, Series
from kubesage.core.loop.placement import GpuLoadTable
from kubesage.core.state import ClusterState
from tests.builders import node

UTIL = GPU_UTIL_METRIC.format(gpu=0)


def ticks(panel: ForecastPanel, count: int) -> None:
    for _ in range(count):
        panel.refresh()


def test_a_series_without_a_recent_sample_forecasts_nothing() -> None:
    panel = ForecastPanel()
    panel.observe("gpu-node-7", UTIL, 0.0)  # then its exporter dies
    panel.refresh()
    assert panel.predict("gpu-node-7", UTIL) == 0.0
    ticks(panel, 720)  # an hour of 5 s ticks
    assert panel.predict("gpu-node-7", UTIL) is None  # not an idle GPU: no forecast
    panel.observe("gpu-node-7", UTIL, 40.0)  # the exporter is back
    panel.refresh()
    assert panel.predict("gpu-node-7", UTIL) == 40.0


def test_a_sample_is_forecast_from_for_stale_steps_ticks() -> None:
    assert forecasts.DEFAULT_STALE_STEPS * 5.0 == 60.0  # a minute at the default tick
    panel = ForecastPanel(stale_steps=3)
    panel.observe("n0", UTIL, 7.0)
    ticks(panel, 3)  # the tick of the sample and two more
    assert panel.predict("n0", UTIL) == 7.0
    panel.refresh()
    assert panel.predict("n0", UTIL) is None


def test_a_forecaster_answer_for_a_stale_series_is_not_a_forecast() -> None:
    class Constant:
        name = "constant"

        def knows(self, series: Series) -> bool:
            return True

        def forecast(
            self,
            history: Mapping[Series, Sequence[float]],
            horizon_steps: int,
            first_tick: int = 0,
        ) -> Mapping[Series, float]:
            return {series: 55.0 for series in history}

    panel = ForecastPanel(stale_steps=3)
    panel.use(Constant())
    panel.observe("n0", UTIL, 10.0)
    panel.refresh()
    assert panel.predict("n0", UTIL) == 55.0
    ticks(panel, 3)
    assert panel.predict("n0", UTIL) is None


def test_series_silent_for_long_are_dropped() -> None:
    panel = ForecastPanel()
    for i in range(5_000):  # node churn: each spot node reports once, then is gone
        panel.observe(f"spot-{i}", UTIL, 50.0)
        panel.refresh()
    # Those with a sample in their rolling history (64 ticks) stay, give or take a pass.
    assert panel.seen < 100
    assert ("spot-0", UTIL) not in panel.series()
    assert ("spot-4999", UTIL) in panel.series()


def test_a_series_sampled_every_tick_is_kept_and_forecast() -> None:
    panel = ForecastPanel(stale_steps=2, forget_steps=4)
    for value in range(50):
        panel.observe("n0", UTIL, float(value))
        panel.refresh()
    assert panel.predict("n0", UTIL) == 49.0 and panel.seen == 1


def test_placement_reads_a_stale_node_as_no_forecast() -> None:
    state = ClusterState([node("n0", gpus=1), node("n1", gpus=1)])
    panel = ForecastPanel(stale_steps=2)
    panel.observe("n0", UTIL, 0.0)
    panel.observe("n1", UTIL, 90.0)
    panel.refresh()
    table = GpuLoadTable(lambda: panel)
    fresh = table(state)
    assert fresh is not None and fresh[:, 0].tolist() == [0.0, 0.9]
    for _ in range(2):  # n1 keeps reporting; n0 stops
        panel.observe("n1", UTIL, 90.0)
        panel.refresh()
    stale = table(state)
    assert stale is not None and stale[1, 0] == 0.9
    assert stale[0, 0] != stale[0, 0]  # NaN: no forecast for n0, not its idle 0 %


@pytest.mark.parametrize("options", [{"stale_steps": 0}, {"stale_steps": 10, "forget_steps": 5}])
def test_bounds_that_make_no_sense_are_refused(options: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="steps"):
        ForecastPanel(**options)
