"""The world model, the forecast panel, the audit log and budgets, through their own
interfaces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.arrays import FloatArray
from kubesage.core.loop.actions import ActionKind
from kubesage.core.loop.audit import AuditLog, AuditRecord
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.forecasts import ForecastPanel
from kubesage.core.loop.world import ClusterObservation, LinkSample, WorldModel
from kubesage.core.perception import Snapshot
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import Indicator
from tests.core.loop.doubles import small_state


@dataclass(frozen=True)
class NodeTable:
    """The shape of the telemetry layer's NodeMetrics."""

    nodes: tuple[str, ...]
    columns: tuple[str, ...]
    values: FloatArray


@dataclass(frozen=True)
class Links:
    samples: tuple[LinkSample, ...]

    def link_samples(self) -> tuple[LinkSample, ...]:
        return self.samples


def test_the_panel_predicts_the_last_value_in_cold_start() -> None:
    world = WorldModel()
    table = NodeTable(("node-0", "node-1"), ("gpu_util",), np.array([[0.2], [np.nan]]))
    world.update({"prometheus": Snapshot(table, 10.0)})
    world.update(
        {"prometheus": Snapshot(NodeTable(("node-0",), ("gpu_util",), np.array([[0.7]])), 15.0)}
    )
    assert world.forecasts.source == "last-value" and world.forecasts.cold_start
    assert world.forecasts.predict("node-0", "gpu_util") == 0.7
    assert world.forecasts.predict("node-1", "gpu_util") is None  # NaN: no sample


def test_a_plugged_forecaster_answers_and_the_last_value_covers_the_rest() -> None:
    class Doubling:
        name = "doubling"

        def knows(self, series):  # type: ignore[no-untyped-def]
            return True

        def forecast(self, history, horizon_steps, first_tick=0):  # type: ignore[no-untyped-def]
            return {("a", "m"): history[("a", "m")][-1] * 2 * horizon_steps}

    panel = ForecastPanel(horizon_steps=3)
    panel.use(Doubling())
    panel.observe("a", "m", 1.0)
    panel.observe("b", "m", 5.0)
    panel.refresh()
    assert panel.source == "doubling" and not panel.cold_start
    assert panel.predict("a", "m") == 6.0 and panel.predict("b", "m") == 5.0


def test_the_forecaster_sees_every_series_on_the_same_ticks_with_gaps_as_nan() -> None:
    seen: list[dict[tuple[str, str], tuple[float, ...]]] = []

    class Recording:
        name = "recording"

        def knows(self, series):  # type: ignore[no-untyped-def]
            return series[0] != "ignored"

        def forecast(self, history, horizon_steps, first_tick=0):  # type: ignore[no-untyped-def]
            seen.append(dict(history))
            return {}

    panel = ForecastPanel(history=3)
    panel.use(Recording())
    panel.observe("ignored", "m", 3.0)  # a series the forecaster does not know: not handed
    for tick, samples in enumerate([{"a": 1.0}, {"a": 2.0, "b": 7.0}, {"b": 8.0}, {"a": 4.0}]):
        for entity, value in samples.items():
            panel.observe(entity, "m", value)
        if tick == 3:
            panel.observe("a", "m", 5.0)  # a second sample in one tick replaces the first
        panel.refresh()
    first, second, third, fourth = seen
    assert first == {("a", "m"): (1.0,)}
    assert second[("a", "m")] == (1.0, 2.0) and set(second) == {("a", "m"), ("b", "m")}
    assert math.isnan(second[("b", "m")][0]) and second[("b", "m")][1] == 7.0  # b came late
    assert third[("a", "m")][:2] == (1.0, 2.0) and math.isnan(third[("a", "m")][2])
    # The window keeps the last 3 ticks: a's gap at tick 2 stays a gap, not a shorter series.
    a, b = fourth[("a", "m")], fourth[("b", "m")]
    assert a[0] == 2.0 and math.isnan(a[1]) and a[2] == 5.0
    assert b[:2] == (7.0, 8.0) and math.isnan(b[2])
    assert panel.predict("a", "m") == 5.0 and panel.predict("b", "m") == 8.0  # the last value


def test_link_samples_reach_the_drtg_once_per_snapshot() -> None:
    graph = DRTG.from_yaml(example_topology("pcie-nvlink-pairs"))
    world = WorldModel(topology=graph)
    edge = 0
    sample = LinkSample(edges=[edge], indicator=Indicator.CONGESTION, values=[0.9])
    snapshot = Snapshot(Links((sample,)), 100.0)
    world.update({"links": snapshot})
    world.update({"links": Snapshot(snapshot.data, 100.0, stale=True, reason="down")})
    assert world.link_samples == 1  # the stale repeat was not fed again
    assert graph.indicators[edge, Indicator.CONGESTION] == pytest.approx(0.9)


def test_the_state_and_pods_come_from_the_cluster_observation() -> None:
    world = WorldModel()
    assert not world.ready
    state = small_state()
    world.update({"cluster": Snapshot(ClusterObservation(state, {}), 1.0)})
    view = world.view(tick=1, now_s=2.0, snapshots={}, data_age_s=1.0, memory={"k": 1})
    assert world.ready and view.state is not state and view.memory == {"k": 1}


def record(tick: int, key: str, outcome: str, target: str = "default/a") -> AuditRecord:
    return AuditRecord(tick, float(tick), "defrag", "evict", target, key, None, "why", outcome)


def test_the_audit_file_is_read_back_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.append(record(1, "k1", "done"))
    log.append(record(2, "k2", "failed", target="default/b"))
    log.close()
    with path.open("a") as file:
        file.write('{"tick": 3, "time"')  # a crash mid-write
    again = AuditLog(path, remember_s=100.0)
    assert again.done_keys() == frozenset({"k1"})
    assert again.is_done("k1", now_s=50.0) and not again.is_done("k1", now_s=500.0)
    assert not again.is_done("k2")
    assert [r.key for r in again.recent()] == ["k1", "k2"]


def test_budgets_refuse_what_overspends() -> None:
    tick = Budgets({ActionKind.EVICT: 2}).start_tick()
    assert tick.refusal([ActionKind.EVICT, ActionKind.EVICT, ActionKind.BIND]) is None
    tick.spend(ActionKind.EVICT)
    assert "2 per tick and 1 already spent" in str(tick.refusal([ActionKind.EVICT] * 2))
    assert Budgets().limits == {ActionKind.EVICT: 4, ActionKind.LABEL_NODE: 1}
    assert Budgets().with_limit(ActionKind.EVICT, None).limits == {ActionKind.LABEL_NODE: 1}
    with pytest.raises(ValueError):
        Budgets({ActionKind.EVICT: -1})


def test_the_simulated_clock_moves_only_forward() -> None:
    clock = SimulatedClock(5.0)
    assert clock.advance(2.5) == 7.5 and clock.kind == "simulated"
    with pytest.raises(ValueError):
        clock.advance(-1.0)


def test_bad_samples_and_a_broken_forecaster_do_not_stop_the_update() -> None:
    class Broken:
        name = "broken"

        def knows(self, series):  # type: ignore[no-untyped-def]
            return True

        def forecast(self, history, horizon_steps, first_tick=0):  # type: ignore[no-untyped-def]
            raise RuntimeError("model file corrupt")

    graph = DRTG.from_yaml(example_topology("pcie-nvlink-pairs"))
    world = WorldModel(topology=graph)
    world.forecasts.use(Broken())
    bad = LinkSample(edges=[graph.num_edges + 5], indicator=Indicator.CONGESTION, values=[1.0])
    world.update({"links": Snapshot(Links((bad,)), 1.0)})
    table = NodeTable(("node-0",), ("gpu_util",), np.array([[0.4]]))
    world.update({"prometheus": Snapshot(table, 2.0)})
    assert world.forecasts.predict("node-0", "gpu_util") == 0.4


def test_node_exporter_network_columns_become_nic_traffic_on_the_drtg() -> None:
    from kubesage.core.loop.world import NODE_TRAFFIC_COLUMNS
    from kubesage.core.telemetry.features import NodeMetrics

    drtg = DRTG.from_yaml(example_topology("dgx-h100-pod"))
    busy, quiet = drtg.node_names[0], drtg.node_names[1]
    before = drtg.egress_bandwidth(0).copy()
    nics = drtg.nic_uplink_edges(0).size
    assert nics >= 1
    sent = 8e9 * nics  # bytes/s: 8 GB/s through each NIC
    table = NodeMetrics(
        nodes=(busy, quiet, "not-in-the-topology"),
        columns=(*NODE_TRAFFIC_COLUMNS, "node_exporter.load1"),
        values=np.array([[sent, 1e8, 3.0], [np.nan, np.nan, 1.0], [1e9, 1e9, 0.0]]),
        taken_at=100.0,
    )
    world = WorldModel(topology=drtg)
    world.update({"prometheus": Snapshot(table, 100.0)})
    assert world.link_samples == 1  # the busy node only: no sample for the quiet one
    np.testing.assert_allclose(drtg.egress_bandwidth(0), np.maximum(before - 8.0, 0.0))
    assert world.forecasts.predict(busy, "node_exporter.load1") == 3.0
