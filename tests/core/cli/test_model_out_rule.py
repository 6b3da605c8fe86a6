"""One rule for ``--out`` of ``train ppo``, ``forecast train`` and ``telemetry fit-pca``:
checked before any work, written to a temporary file and moved over the target, and
``train ppo`` keeps the iterations done when its workers fail (core/model_files.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
from typer.testing import CliRunner

import kubesage.core.cli.telemetry as telemetry_cli
import kubesage.core.cli.train as train_cli
import kubesage.core.forecast.forecaster as forecaster_module
import kubesage.core.forecast.persistence as forecast_persistence
import kubesage.core.rl.persistence as persistence
import kubesage.core.rl.training as training
from kubesage.core.cli.forecast import forecast_app
from kubesage.core.cli.main import app
from kubesage.core.cli.telemetry import telemetry_app
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.model_files import check_output, write_replacing
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network, save_network
from kubesage.core.rl.training import TrainingInterruptedError, WorkerError
from kubesage.core.telemetry.features import FeatureBuilder, MetricHistory
from kubesage.core.telemetry.metric_map import load_metric_map
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

OLD = b"the model of the run before"


def never(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("the work started although --out cannot be written")


def half_written(model: object, path: Path, *args: Any, **kwargs: Any) -> NoReturn:
    """A save function that fails half-way (the model, then the path, as all three take)."""
    Path(path).write_bytes(b"half a model")
    raise OSError(28, "No space left on device")


def message(output: str) -> str:
    return " ".join(output.split())


def ppo(*args: str) -> Any:
    return CliRunner().invoke(
        app, ["train", "ppo", "--nodes", "n.csv", "--pods", "p.csv", "--workers", "0", *args]
    )


@pytest.fixture
def small_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = synthetic_cluster(20, seed=1), synthetic_workload(200, seed=2)
    monkeypatch.setattr(train_cli, "read_nodes", lambda path: nodes)
    monkeypatch.setattr(train_cli, "read_pods", lambda path, **options: pods)


def test_check_output_refuses_a_directory_and_a_file_as_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        check_output(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is not a directory"):
        check_output(tmp_path / "file" / "deeper" / "model.safetensors")
    check_output(tmp_path / "new" / "folders" / "model.safetensors")  # created on save


def test_write_replacing_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    out = tmp_path / "model.safetensors"
    out.write_bytes(OLD)
    with pytest.raises(DependencyError, match="No space left on device"):
        write_replacing(out, lambda path: half_written(None, path))
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == [out.name]
    write_replacing(out, lambda path: path.write_bytes(b"new"))
    assert out.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_written_model_is_readable_as_any_new_file_or_keeps_the_replaced_files_mode(
    tmp_path: Path,
) -> None:
    # safetensors writes its file 0600; `serve` often runs as another user than `train`.
    out = tmp_path / "model.safetensors"
    network = PlacementNetwork()
    previous = os.umask(0o022)
    try:
        write_replacing(out, lambda path: save_network(network, path))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    out.chmod(0o640)
    write_replacing(out, lambda path: save_network(network, path))
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    load_network(out)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


@pytest.mark.parametrize("where", ["directory", "under a file"])
def test_train_ppo_refuses_an_unwritable_out_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setattr(train_cli, "read_nodes", never)
    monkeypatch.setattr(training, "train", never)
    (tmp_path / "file").write_text("")
    out = tmp_path if where == "directory" else tmp_path / "file" / "ppo.safetensors"
    result = ppo("--out", str(out))
    assert result.exit_code == 2, result.output
    assert "directory" in message(result.output) and str(out) in message(result.output)


def test_forecast_train_refuses_a_directory_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forecaster_module, "make_forecaster", never)
    data = write_synthetic_metrics(tmp_path / "data", entities=3, steps=60)
    result = CliRunner().invoke(forecast_app, ["train", "--data", str(data), "--out", str(data)])
    assert result.exit_code == 2, result.output
    assert f"--out {data} is a directory" in message(result.output)


def test_fit_pca_refuses_a_directory_before_reading_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry_cli, "read_history", never)
    args = ["fit-pca", "--prometheus", "http://127.0.0.1:9", "--range", "1h"]
    result = CliRunner().invoke(telemetry_app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"--out {tmp_path} is a directory" in message(result.output)


def test_train_ppo_replaces_the_model_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:
    out = tmp_path / "ppo.safetensors"
    out.write_bytes(OLD)
    monkeypatch.setattr(training, "train", lambda *args, **kwargs: (PlacementNetwork(), []))
    monkeypatch.setattr(persistence, "save_network", half_written)
    result = ppo("--out", str(out))
    assert result.exit_code == 2, result.output
    assert f"could not write {out}" in message(result.output)
    assert out.read_bytes() == OLD and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_forecast_train_replaces_the_model_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_synthetic_metrics(tmp_path / "data", entities=3, steps=80)
    out = tmp_path / "forecaster.safetensors"
    out.write_bytes(OLD)
    monkeypatch.setattr(forecast_persistence, "save_forecaster", half_written)
    args = ["train", "--data", str(data), "--model", "lstm", "--epochs", "1", "--out", str(out)]
    result = CliRunner().invoke(forecast_app, args)
    assert result.exit_code == 2, result.output
    assert "No space left on device" in message(result.output)
    assert out.read_bytes() == OLD and sorted(p.name for p in tmp_path.iterdir()) == [
        "data",
        out.name,
    ]


def test_fit_pca_replaces_the_model_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = FeatureBuilder(load_metric_map()).columns
    values = np.random.default_rng(0).uniform(0, 100, (30, 3, len(columns)))
    history = MetricHistory(np.arange(30.0) * 15, ("a", "b", "c"), columns, values)
    monkeypatch.setattr(telemetry_cli, "read_history", lambda *args: history)
    monkeypatch.setattr(telemetry_cli, "save_pca", half_written)
    out = tmp_path / "pca.safetensors"
    out.write_bytes(OLD)
    args = ["fit-pca", "--prometheus", "http://127.0.0.1:9", "--range", "1h", "--out", str(out)]
    result = CliRunner().invoke(telemetry_app, args)
    assert result.exit_code == 2, result.output
    assert "No space left on device" in message(result.output)
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_train_ppo_saves_the_iterations_done_when_workers_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:
    network = PlacementNetwork()
    failure = WorkerError(
        "Ray worker 1 of 2 died during 'collect' (...), in iteration 3 of 5",
        network=network,
        history=[{"iteration": 1.0}, {"iteration": 2.0}],
    )

    def failing(*args: Any, **kwargs: Any) -> NoReturn:
        raise failure

    monkeypatch.setattr(training, "train", failing)
    out = tmp_path / "ppo.safetensors"
    result = ppo("--iterations", "5", "--out", str(out))
    assert result.exit_code == 2, result.output
    said = message(result.output)
    assert "worker 1 of 2 died" in said
    assert f"the weights after iteration 2 of 5 are saved to {out}" in said
    _, info = load_network(out)
    assert info["iterations"] == 2 and "died" in info["stopped"]


def test_train_ppo_says_nothing_was_saved_when_workers_fail_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:
    def failing(*args: Any, **kwargs: Any) -> NoReturn:
        raise WorkerError("Ray worker 0 of 1 died, while starting the workers")

    monkeypatch.setattr(training, "train", failing)
    out = tmp_path / "ppo.safetensors"
    result = ppo("--out", str(out))
    assert result.exit_code == 2, result.output
    assert "no iteration completed, nothing was saved" in message(result.output)
    assert not out.exists()


def test_train_ppo_saves_the_iterations_done_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> NoReturn:
        raise TrainingInterruptedError(
            "interrupted after 39 of 200 iterations",
            network=PlacementNetwork(),
            history=[{"iteration": float(i)} for i in range(1, 40)],
        )

    monkeypatch.setattr(training, "train", interrupted)
    out = tmp_path / "ppo.safetensors"
    result = ppo("--iterations", "200", "--out", str(out))
    assert result.exit_code == 130, result.output
    assert f"the weights after iteration 39 of 200 are saved to {out}" in message(result.output)
    _, info = load_network(out)
    assert info["iterations"] == 39 and "interrupted" in info["stopped"]
