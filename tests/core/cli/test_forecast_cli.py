"""``kubesage forecast`` end to end on generated metric folders (real subprocesses; the
bad-argument tables in process), and ``train --prometheus`` on the real Prometheus and
DCGM replays of tests/core/conftest.py."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubesage.core.cli.forecast import forecast_app
from kubesage.core.cli.loop import embedded_loop
from kubesage.core.cli.loop_options import loop_settings
from kubesage.core.forecast import ABLATION_NAMES, MODEL_NAMES
from kubesage.core.forecast.persistence import load_forecaster, load_panel_forecaster
from kubesage.core.forecast.quantile import QuantileForecaster
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.k8s.embedded import EmbeddedCluster
from tests.core.conftest import GPU_NODES, RATE_WINDOW, PrometheusServer


def kubesage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "forecast", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    ("entities", "steps", "start_s", "seed"),
    [(8, 200, 1_662_858_720.0, 0), (5, 260, 1_700_000_025.0, 4)],  # other hours, other pods
)
def test_eval_json_shape_on_any_hours(
    tmp_path: Path, entities: int, steps: int, start_s: float, seed: int
) -> None:
    data = write_synthetic_metrics(
        tmp_path, entities=entities, steps=steps, start_s=start_s, seed=seed
    )
    done = kubesage(
        "eval",
        "--data",
        str(data),
        "--train-until",
        "+2h",
        "--epochs",
        "2",
        "--horizons",
        "1,5",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"train_until", "entities", "metrics", "models"} <= set(document)
    assert document["entities"] == entities
    assert document["train_until"] == pytest.approx(start_s + 7200, abs=57)
    # Which hours were read and scored, in the data's own timestamps.
    assert document["data_start"] == pytest.approx(start_s, abs=57)
    assert document["test_until"] == pytest.approx(start_s + steps * 57, abs=2 * 57)
    assert document["test_steps"] == pytest.approx(steps - 7200 / 57, abs=2)
    assert set(document["models"]) == set(MODEL_NAMES)
    for per_horizon in document["models"].values():
        assert set(per_horizon) == {"1", "5"}
        for entry in per_horizon.values():
            assert {"wape", "mape_nonzero", "smape", "per_metric", "burst"} <= set(entry)
            for metric in document["metrics"]:
                assert {"wape", "mae", "rmse", "smape"} <= set(entry["per_metric"][metric])
    assert "graph: correlation k-NN" in done.stderr
    assert "ablations" not in document and "blocks" not in document


def test_rolling_eval_on_plain_csv_files_reports_blocks_mean_and_ablations(
    tmp_path: Path,
) -> None:
    compressed = write_synthetic_metrics(tmp_path / "gz", entities=5, steps=240)
    data = tmp_path / "plain"
    data.mkdir()
    for path in compressed.iterdir():
        (data / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    done = kubesage(
        "eval",
        "--data",
        str(data),
        "--train-until",
        "+2h",
        "--rolling",
        "2",
        "--models",
        "stgcn,lstm,last_value",
        "--ablations",
        "all",
        "--epochs",
        "1",
        "--horizons",
        "1,5",
        "--device",
        "cpu",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["rolling"] == 2
    assert set(document["models"]) == {"stgcn", "lstm", "last_value"}
    assert set(document["ablations"]) == set(ABLATION_NAMES)
    blocks = document["blocks"]
    assert len(blocks) == 2
    assert blocks[0]["test_until"] == pytest.approx(blocks[1]["train_until"])
    for block in blocks:
        assert block["train_until"] < block["test_until"]
        assert set(block["models"]) == set(document["models"])
        assert set(block["models"]["stgcn"]["5"]) >= {"wape", "mape_nonzero", "smape", "per_metric"}


def test_eval_scores_upper_quantiles_in_json_and_in_a_table(tmp_path: Path) -> None:
    data = write_synthetic_metrics(tmp_path, entities=5, steps=220)
    args = ["eval", "--data", str(data), "--train-until", "+2h", "--horizons", "1,5"]
    args += ["--models", "last_value,linear", "--quantiles", "0.95,0.8"]
    result = CliRunner().invoke(forecast_app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output.splitlines()[-1])
    for per_horizon in document["models"].values():
        for entry in per_horizon.values():
            assert list(entry["quantiles"]) == ["0.8", "0.95"]
            assert 0.0 <= entry["quantiles"]["0.95"]["coverage"] <= 1.0
    table = CliRunner().invoke(forecast_app, args)
    assert table.exit_code == 0, table.output
    assert "upper quantiles: wQL" in table.output and "q=0.95 h=5" in table.output


def test_train_writes_a_loadable_model(tmp_path: Path) -> None:
    data = write_synthetic_metrics(tmp_path / "data", entities=6, steps=200)
    out = tmp_path / "model.safetensors"
    done = kubesage(
        "train",
        "--data",
        str(data),
        "--train-until",
        "+2h",
        "--out",
        str(out),
        "--epochs",
        "2",
        "--horizon",
        "5",
    )
    assert done.returncode == 0, done.stderr
    forecaster, header = load_forecaster(out)
    assert header["kind"] == "stgcn" and forecaster.horizon == 5
    assert len(forecaster.entities) == 6
    assert forecaster.name == "stgcn" and forecaster.linear_highway is not None


def test_train_with_a_quantile_saves_the_model_and_its_calibration(tmp_path: Path) -> None:
    data = write_synthetic_metrics(tmp_path / "data", entities=6, steps=200)
    out = tmp_path / "upper.safetensors"
    args = f"--model lstm --epochs 2 --horizon 5 --quantile 0.9 --out {out}".split()
    result = CliRunner().invoke(forecast_app, ["train", "--data", str(data), *args])
    assert result.exit_code == 0, result.output
    assert "calibrated q=0.9 on the last 20% of the history" in result.output
    upper, header = load_panel_forecaster(out)
    assert isinstance(upper, QuantileForecaster) and upper.quantile == 0.9
    assert header["quantile"]["q"] == 0.9 and header["quantile"]["scale"] == "series"
    point, _ = load_forecaster(out)  # the point model alone still loads
    assert upper.point.horizon == point.horizon == 5


@pytest.mark.parametrize(
    ("steps", "args", "message"),
    [
        # 60 steps: 22 windows of 24 + 15 steps, where 31 are needed.
        (60, [], "not written: cold start: 60 steps of history give 22 training windows"),
        # 100 steps: the point model trains on 80; the last 20 give 6 origins × 3 pods.
        (100, ["--quantile", "0.9"], "not written: uncalibrated: 6 calibration window(s)"),
    ],
)
def test_train_writes_no_model_that_would_only_repeat_the_last_value(
    tmp_path: Path, steps: int, args: list[str], message: str
) -> None:
    data = write_synthetic_metrics(tmp_path / "data", entities=3, steps=steps)
    out = tmp_path / "m.safetensors"
    result = CliRunner().invoke(
        forecast_app,
        [
            "train",
            "--data",
            str(data),
            *("--model", "lstm", "--epochs", "1", "--out", str(out)),
            *args,
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists() and not list(tmp_path.glob(".m.safetensors*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--train-until", "soon"], "neither a timestamp nor +DURATION"),
        (["--train-until", "nan"], "'nan' is neither a timestamp nor +DURATION"),
        (["--train-until", "-inf"], "'-inf' is neither a timestamp nor +DURATION"),
        # The data's last step is at 3h9m3s: a cut-off after it would test nothing.
        (["--train-until", "+3h9m10s"], "leaves no steps on one side: the data spans 3h9m3s"),
        (["--train-until", "+12y"], "not a duration"),
        (
            ["--train-until", "+100h"],
            "+100h (1700359977) leaves no steps on one side: the data spans 3h9m3s",
        ),
        (["--train-until", "+2h", "--horizons", "0,5"], "positive step counts"),
        (["--train-until", "+2h", "--models", "prophet"], "unknown model(s) ['prophet']"),
        (["--train-until", "+2h", "--ablations", "lstm"], "unknown ablation(s) ['lstm']"),
        (["--train-until", "+2h", "--device", "abacus"], "not a torch device"),
        (["--train-until", "+2h", "--rolling", "500"], "cannot make 500 blocks"),
        (["--train-until", "+2h", "--quantiles", "0.9,1"], "between 0 and 1 (e.g. 0.95), got 1"),
        (["--train-until", "+2h", "--quantiles", "high"], "not a comma-separated list of numbers"),
    ],
)
def test_bad_arguments_are_clear_errors(tmp_path: Path, args: list[str], message: str) -> None:
    # In process (a subprocess costs a torch import each); the real process's exit code
    # and stderr are checked once, below.
    data = write_synthetic_metrics(tmp_path, entities=4, steps=200)
    result = CliRunner().invoke(forecast_app, ["eval", "--data", str(data), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())  # an uncaught exception exits 1


def test_a_bad_argument_exits_2_with_the_message_on_stderr(tmp_path: Path) -> None:
    data = write_synthetic_metrics(tmp_path, entities=4, steps=200)
    done = kubesage("eval", "--data", str(data), "--train-until", "soon")
    assert done.returncode == 2
    assert "neither a timestamp nor +DURATION" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_train_on_columns_prometheus_does_not_have_names_the_metrics_option(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        forecast_app,
        [
            *f"train --prometheus {prometheus.url} --range 30s --step 1s".split(),
            *("--metrics", "ebpf.*", "--out", str(tmp_path / "m.safetensors")),  # not scraped
        ],
    )
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "no series of the metric map's columns --metrics ebpf.* chose" in said


def test_train_on_prometheus_learns_the_loops_series_per_node(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    assert prometheus.samples_since is not None
    time.sleep(max(0.0, prometheus.samples_since + 30 - time.time()))
    out = tmp_path / "gpu.safetensors"
    result = CliRunner().invoke(
        forecast_app,
        [
            *f"train --prometheus {prometheus.url} --range 30s --step 1s".split(),
            *f"--history 4 --horizon 2 --epochs 2 --rate-window {RATE_WINDOW}".split(),
            *("--out", str(out)),
        ],
    )
    assert result.exit_code == 0, result.output
    forecaster, header = load_forecaster(out)
    # Entities are the nodes; metrics the per-GPU slots some node reports, under the
    # metric map's names (the loop's): gpu-node-0 has 4 GPUs, gpu-node-1 has 2.
    assert forecaster.entities == tuple(sorted(GPU_NODES))
    slots = max(GPU_NODES.values())
    assert forecaster.metrics == tuple(f"dcgm.gpu_util_percent.gpu{g}" for g in range(slots))
    assert header["step_s"] == 1.0 and not forecaster.fallback_reason
    output = " ".join(result.output.split())
    unreported = ", ".join(f"dcgm.gpu_util_percent.gpu{g}" for g in range(slots, 8))
    assert f"left out, no node reported them: {unreported}" in output
    assert f"2 node(s), {slots} column(s)" in output
    # The loop reads the same Prometheus at the model's step and asks the model for
    # exactly its series: each node's GPU slots (the other map columns: last value).
    settings = loop_settings(tick_s=1.0, prometheus=prometheus.url, forecast_model=out)
    control = embedded_loop(EmbeddedCluster.synthetic(4), "bestfit", settings)
    try:
        for _ in range(forecaster.history + 1):
            control.tick()
    finally:
        control.close()
    panel = control.world.forecasts
    assert panel.source == "stgcn" and panel.horizon_steps == 2
    assert panel.answered == sum(GPU_NODES.values()) < panel.seen
    for node, gpus in GPU_NODES.items():
        for g in range(gpus):
            value = panel.predict(node, f"dcgm.gpu_util_percent.gpu{g}")
            assert value is not None and math.isfinite(value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give one source to train on: --data DIR or --prometheus URL"),
        (["--data", "DATA", "--prometheus", "http://x"], "give one source"),
        (["--prometheus", "http://x", "--train-until", "+1h"], "--train-until goes with --data"),
        (["--prometheus", "http://x", "--metrics", " , "], "--metrics is empty"),
        (["--prometheus", "prometheus:9090"], "must be an http:// or https:// URL"),
        (["--prometheus", "http://x", "--step", "1m", "--range", "30s"], "longer than --range"),
        (["--data", "DATA", "--model", "gru"], "--model must be stgcn or lstm"),
        (["--data", "DATA", "--quantile", "1.5"], "--quantile must be between 0 and 1"),
        (
            ["--data", "DATA", "--range", "5x", "--step", "nonsense"],
            "--range, --step only apply with --prometheus",
        ),
    ],
)
def test_bad_train_arguments_are_clear_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    data = write_synthetic_metrics(tmp_path, entities=4, steps=200)
    args = [str(data) if a == "DATA" else a for a in args]
    out = tmp_path / "m.safetensors"
    result = CliRunner().invoke(forecast_app, ["train", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()
