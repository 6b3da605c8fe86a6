"""``--forecast-model``: a model trained on the nodes' GPU history drives the loop's
forecasts, and through them a placement the last value gets wrong.

Node ``node-0``'s GPUs alternate three ticks idle (10 %), three busy (90 %); ``node-1``'s
stay at 50 %. Three ticks ahead, an idle ``node-0`` is always busy: the last value sends a
GPU-sharing pod there, a model trained on that history sends it to ``node-1``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kubesage.core.cli.loop import build_loop
from kubesage.core.cli.loop_sources import EmbeddedClusterCollector
from kubesage.core.cli.main import app
from kubesage.core.errors import InputError
from kubesage.core.forecast.forecaster import NeuralForecaster, make_forecaster
from kubesage.core.forecast.highway import Made
from kubesage.core.forecast.loop_adapter import LoopForecaster, load_loop_forecaster
from kubesage.core.forecast.node_panel import node_panel
from kubesage.core.forecast.persistence import load_forecaster, save_forecaster
from kubesage.core.forecast.quantile import QuantileForecaster
from kubesage.core.forecast.training import TrainConfig
from kubesage.core.k8s.actuators import embedded_actuators
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC, ForecastPanel, Series
from kubesage.core.loop.placement import ForecastPlacement
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.telemetry.features import MetricHistory
from tests.core.loop.test_placement import GpuUtilCollector, share, two_node_cluster

TICK_S = 5.0
HORIZON = 3
NODES = ("node-0", "node-1")
COLUMNS = tuple(GPU_UTIL_METRIC.format(gpu=g) for g in range(2))


def utilisation(node: str, step: int) -> float:
    if node == "node-1":
        return 50.0
    return 10.0 if step % (2 * HORIZON) < HORIZON else 90.0


def gpu_history(steps: int) -> MetricHistory:
    """The pattern as Prometheus would give it, with node-0's GPU 1 unscraped for a while
    and a column no node reports (as the slots past a node's last GPU)."""
    columns = (*COLUMNS, GPU_UTIL_METRIC.format(gpu=2))
    values = np.full((steps, len(NODES), len(columns)), np.nan)
    for t in range(steps):
        for n, node in enumerate(NODES):
            values[t, n, :2] = utilisation(node, t)
    values[40:45, 0, 1] = np.nan
    return MetricHistory(TICK_S * np.arange(steps, dtype=np.float64), NODES, columns, values)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = node_panel(gpu_history(240))
    assert chosen.empty_columns == (GPU_UTIL_METRIC.format(gpu=2),)
    panel = chosen.panel
    assert panel.entities == NODES and panel.metrics == COLUMNS and panel.step_s == TICK_S
    assert not panel.mask[40:45, 0, 1].any() and panel.mask[40:45, 0, 0].all()
    forecaster = make_forecaster(
        "stgcn", history=8, horizon=HORIZON, config=TrainConfig(epochs=40, seed=0)
    )
    assert isinstance(forecaster, NeuralForecaster)
    forecaster.fit(panel, panel.steps)
    path = tmp_path_factory.mktemp("model") / "gpu.safetensors"
    return save_forecaster(
        forecaster, path, train_until_s=panel.steps * TICK_S, step_s=panel.step_s
    )


def loop_with(model: Path | None, collector: GpuUtilCollector) -> tuple[ControlLoop, object]:
    cluster = two_node_cluster()
    policy = make_policy("bestfit", PolicyContext())
    settings = LoopSettings(tick_s=TICK_S, forecast_weight=1.0, forecast_model=model)
    control = build_loop(
        EmbeddedClusterCollector(cluster),
        embedded_actuators(cluster, policy),
        ReconcilerContext(settings=settings, policy="bestfit"),
        clock=collector.clock,
        reconcilers=[ForecastPlacement(policy, settings.forecast_weight)],
        collectors=[collector],
    )
    return control, cluster


def run_until_idle(model: Path | None) -> tuple[str, ControlLoop]:
    """Tick through two periods, submit a sharing pod when node-0 has just gone idle,
    and return the node the loop bound it to."""
    clock = SimulatedClock()
    collector = GpuUtilCollector(clock, {})
    control, cluster = loop_with(model, collector)
    for step in range(4 * HORIZON * 2 + 1):
        collector.percent = {(n, g): utilisation(n, step) for n in NODES for g in range(2)}
        if step == 4 * HORIZON * 2:
            assert utilisation("node-0", step) == 10.0
            cluster.submit("ml", "infer", share("ml/infer"))  # type: ignore[attr-defined]
        control.tick()
        clock.advance(TICK_S)
    (bound,) = cluster.bound.values()  # type: ignore[attr-defined]
    return bound.node, control


def test_the_trained_model_sends_the_pod_where_the_load_will_be_low(model_file: Path) -> None:
    assert run_until_idle(None)[0] == "node-0"  # the last value: node-0 is idle now
    node, control = run_until_idle(model_file)
    assert node == "node-1"
    panel = control.world.forecasts
    assert panel.source == "stgcn" and panel.horizon_steps == HORIZON
    assert panel.answered == panel.seen == len(NODES) * len(COLUMNS)
    busy = panel.predict("node-0", COLUMNS[0])
    assert busy is not None and busy > 70.0  # three ticks on, node-0 is busy again
    debug = control.debug()
    assert debug["forecaster"] == "stgcn (4 of 4 series)"


def test_live_forecasts_stay_those_of_a_fresh_model_once_the_window_rolls(
    model_file: Path,
) -> None:
    """The model keeps what it made at earlier ticks, by the tick of each: past the
    panel's window, whose length then stays the same, each tick's forecasts still equal
    those of a model that kept nothing."""
    live = load_loop_forecaster(model_file, TICK_S)
    fresh = load_loop_forecaster(model_file, TICK_S)
    model = fresh.forecaster
    assert isinstance(model, NeuralForecaster) and model.linear_highway is not None
    compared = []

    class Checked:
        name = live.name

        def knows(self, series: Series) -> bool:
            return live.knows(series)

        def forecast(
            self, history: Mapping[Series, Sequence[float]], horizon_steps: int, first_tick: int = 0
        ) -> Mapping[Series, float]:
            got = live.forecast(history, horizon_steps, first_tick)
            model.made = Made()
            want = fresh.forecast(history, horizon_steps, first_tick)
            assert got.keys() == want.keys()
            compared.append(max(abs(got[s] - want[s]) for s in got))
            return got

    panel = ForecastPanel(horizon_steps=HORIZON, history=live.history_steps)
    panel.use(Checked())
    for tick in range(3 * live.history_steps):
        for node in NODES:
            for column in COLUMNS:
                panel.observe(node, column, utilisation(node, tick))
        panel.refresh()
    assert len(compared) == 3 * live.history_steps and max(compared) < 1e-6
    # What it kept is by tick: the latest origin is the last tick's, and the memory holds
    # the earlier origins the highway scores, not one forecast recomputed every tick.
    kept = live.forecaster
    assert isinstance(kept, NeuralForecaster) and kept.linear_highway is not None
    assert sorted(kept.made.errors) == list(
        range(3 * live.history_steps - kept.linear_highway.lookback(), 3 * live.history_steps + 1)
    )


def test_a_shorter_series_is_laid_on_the_last_ticks(model_file: Path) -> None:
    """Histories of unequal length (a caller other than the panel): each series ends on
    the last tick, its earlier ticks unobserved."""
    loop = load_loop_forecaster(model_file, TICK_S)
    history = {
        ("node-0", COLUMNS[0]): (1.0, 2.0, 3.0, 4.0),
        ("node-1", COLUMNS[1]): (7.0, math.nan),
    }
    panel = loop.panel_of(history, first_tick=10)
    assert panel.steps == 4 and panel.start_s == 10 * TICK_S
    assert panel.values[:, 0, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert panel.mask[:, 1, 1].tolist() == [False, False, True, False]
    assert panel.values[2, 1, 1] == 7.0 and not panel.mask[:, 0, 1].any()


def test_series_the_model_never_saw_keep_the_last_value(model_file: Path) -> None:
    clock = SimulatedClock()
    collector = GpuUtilCollector(clock, {})
    control, _ = loop_with(model_file, collector)
    for step in range(10):
        collector.percent = {(n, 0): utilisation(n, step) for n in (*NODES, "node-new")}
        collector.percent[("node-new", 0)] = 33.0
        control.tick()
        clock.advance(TICK_S)
    panel = control.world.forecasts
    assert panel.predict("node-new", COLUMNS[0]) == 33.0
    assert panel.answered == 2 and panel.seen == 3


def test_a_model_of_another_step_is_refused_with_both_steps(model_file: Path) -> None:
    clock = SimulatedClock()
    settings = LoopSettings(tick_s=15.0, forecast_model=model_file)
    cluster = two_node_cluster()
    policy = make_policy("bestfit", PolicyContext())
    with pytest.raises(InputError, match="trained on 5 s steps but the loop ticks every 15 s"):
        build_loop(
            EmbeddedClusterCollector(cluster),
            embedded_actuators(cluster, policy),
            ReconcilerContext(settings=settings, policy="bestfit"),
            clock=clock,
            reconcilers=[],
        )


def test_kubesage_loop_reads_the_model_and_names_a_bad_one(
    model_file: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    base = ["loop", "--once", "--embedded", "--nodes", "10", "--format", "json"]
    done = runner.invoke(app, [*base, "--forecast-model", str(model_file)])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["forecaster"] == "stgcn"
    not_a_model = tmp_path / "model.safetensors"
    not_a_model.write_text("weights")
    for args, words in [
        (["--forecast-model", str(tmp_path / "missing")], "missing: no such file"),
        (["--forecast-model", str(not_a_model)], "not a kubesage forecaster file"),
        (["--forecast-model", str(model_file), "--tick-s", "1"], "run with --tick-s 5"),
    ]:
        bad = runner.invoke(app, [*base, *args])
        assert bad.exit_code == 2, bad.output
        assert words in " ".join(bad.output.split())


def test_a_file_without_its_step_is_taken_at_the_tick_with_a_warning(
    model_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    forecaster, _ = load_forecaster(model_file)
    older = save_forecaster(forecaster, tmp_path / "older.safetensors", train_until_s=0.0)
    assert load_forecaster(older)[1]["step_s"] is None
    with caplog.at_level(logging.WARNING):
        loaded = load_loop_forecaster(older, 15.0)
    assert loaded.step_s == 15.0 and loaded.horizon_steps == HORIZON
    assert "records no step" in caplog.text


def test_gaps_are_masked_and_a_series_without_a_recent_sample_is_not_answered(
    model_file: Path,
) -> None:
    model = load_loop_forecaster(model_file, TICK_S)
    steady = [utilisation("node-0", t) for t in range(12)]
    gappy = [*steady[:5], math.nan, *steady[6:]]
    history = {
        ("node-0", COLUMNS[0]): gappy,
        ("node-0", COLUMNS[1]): steady,
        ("node-1", COLUMNS[0]): [math.nan] * 12,
    }
    panel = model.panel_of(history)
    assert panel.mask[:, 0, 0].tolist() == [not math.isnan(v) for v in gappy]
    assert panel.values[5, 0, 0] == 0.0 and panel.mask[:, 0, 1].all()
    assert not panel.mask[:, 1].any()
    assert set(model.forecast(history, HORIZON)) == {("node-0", COLUMNS[0]), ("node-0", COLUMNS[1])}


def test_a_model_trained_with_a_quantile_gives_the_loop_its_upper_quantile(
    tmp_path: Path,
) -> None:
    panel = node_panel(gpu_history(240)).panel
    point = make_forecaster("lstm", history=8, horizon=HORIZON, config=TrainConfig(epochs=5))
    upper = QuantileForecaster(point, quantile=0.9)
    upper.fit(panel, panel.steps)
    path = save_forecaster(upper, tmp_path / "q.safetensors", train_until_s=0.0, step_s=TICK_S)
    loaded = load_loop_forecaster(path, TICK_S)
    assert loaded.name == "lstm@q0.9"
    history = {
        (node, column): [utilisation(node, t) for t in range(200, 240)]
        for node in NODES
        for column in COLUMNS
    }
    got = loaded.forecast(history, HORIZON)
    as_point = LoopForecaster(point, NODES, COLUMNS, step_s=TICK_S, history_steps=8)
    median = as_point.forecast(history, HORIZON)
    assert upper.calibration is not None and point.normaliser is not None
    offsets = upper.calibration.step_offsets[HORIZON - 1]
    assert offsets.min() > 0.5  # the square wave's edges: a margin of σs, not a rounding
    assert set(got) == set(median) == set(history)
    for (node, column), value in got.items():
        n, m = NODES.index(node), COLUMNS.index(column)
        margin = offsets[m] * point.normaliser.std[n, m]
        assert value == pytest.approx(median[(node, column)] + margin)
