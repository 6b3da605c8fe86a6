"""``kubesage train ppo`` with several ``--seed``: one model per seed, the best kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch
from typer.testing import CliRunner

import kubesage.core.cli.train as train_cli
import kubesage.core.rl.training as training
from kubesage.core.cli.main import app
from kubesage.core.rl.network import PlacementNetwork
from kubesage.core.rl.persistence import load_network
from kubesage.core.rl.training import TrainingInterruptedError, TrainSettings
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec, PodRequest
from tests.core.cli.test_qualify_cli import trace  # noqa: F401  (a fixture)
from tests.core.cli.test_simulate_cli import kubesage

TRAIN = ["train", "ppo", "--nodes", "n.csv", "--pods", "p.csv"]
SEEDS_0_1 = ["--seed", "0", "--seed", "1"]


def test_each_seed_is_kept_beside_the_chosen_one(
    tmp_path: Path,
    trace: tuple[Path, Path],  # noqa: F811
) -> None:
    nodes, pods = trace
    out = tmp_path / "models" / "ppo.safetensors"
    done = kubesage(
        "train", "ppo", "--nodes", str(nodes), "--pods", str(pods), "--pods", str(pods),
        "--workers", "0",
        "--iterations", "1", "--steps", "64", "--seed", "3", "--seed", "7",
        "--select-runs", "2", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seed_files = {seed: out.with_name(f"ppo.seed{seed}.safetensors") for seed in (3, 7)}
    chosen, info = load_network(out)
    selection = info["selection"]
    assert set(selection["candidates"]) == {"seed 3", "seed 7"}
    assert selection["chosen"] == f"seed {info['seed']}" and info["seed"] in (3, 7)
    assert selection["workloads"] == ["pods", "pods (2)"]  # one record per workload
    assert "(chosen)" in done.stderr and f"model written to {out}" in done.stderr
    for seed, path in seed_files.items():
        network, seed_info = load_network(path)
        assert seed_info["seed"] == seed and "selection" not in seed_info
        theirs, ours = network.state_dict(), chosen.state_dict()
        same = all(torch.equal(theirs[name], ours[name]) for name in ours)
        assert same is (seed == info["seed"])
    chosen_metrics = seed_files[info["seed"]].with_suffix(".metrics.jsonl")
    assert out.with_suffix(".metrics.jsonl").read_text() == chosen_metrics.read_text()


def test_a_repeated_seed_is_refused_before_training(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [*TRAIN, "--seed", "1", "--seed", "1", "--out", str(tmp_path / "m.safetensors")],
    )
    assert result.exit_code == 2, result.output
    assert "--seed repeats 1" in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def small_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any --nodes and --pods read as a small synthetic cluster and workload."""
    nodes, pods = synthetic_cluster(20, seed=1), synthetic_workload(200, seed=2)
    monkeypatch.setattr(train_cli, "read_nodes", lambda path: nodes)
    monkeypatch.setattr(train_cli, "read_pods", lambda path, **options: pods)


def test_ctrl_c_in_a_later_seed_keeps_the_seeds_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:

    def first_then_interrupted(
        nodes: list[NodeSpec], workloads: list[list[PodRequest]], settings: TrainSettings,
        **options: Any,
    ) -> tuple[PlacementNetwork, list[dict[str, float]]]:  # fmt: skip
        if settings.seed == 0:
            return PlacementNetwork(), [{"iteration": 1.0}]
        raise_interrupted()

    def raise_interrupted() -> NoReturn:
        raise TrainingInterruptedError(
            "interrupted after 2 of 4 iterations",
            network=PlacementNetwork(),
            history=[{"iteration": 1.0}, {"iteration": 2.0}],
        )

    monkeypatch.setattr(training, "train", first_then_interrupted)
    out = tmp_path / "ppo.safetensors"
    result = CliRunner().invoke(
        app,
        [*TRAIN, "--workers", "0", "--iterations", "4", *SEEDS_0_1, "--out", str(out)],
    )
    assert result.exit_code == 130, result.output
    second = tmp_path / "ppo.seed1.safetensors"
    said = " ".join(result.output.split())
    assert f"the weights after iteration 2 of 4 are saved to {second}" in said
    assert load_network(tmp_path / "ppo.seed0.safetensors")[1]["seed"] == 0
    assert load_network(second)[1]["iterations"] == 2
    assert not out.exists()  # nothing was chosen


def test_ctrl_c_while_choosing_keeps_every_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_traces: None
) -> None:
    monkeypatch.setattr(
        training, "train", lambda *args, **options: (PlacementNetwork(), [{"iteration": 1.0}])
    )

    def interrupted(*args: Any, **options: Any) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli, "select_model", interrupted)
    out = tmp_path / "ppo.safetensors"
    result = CliRunner().invoke(app, [*TRAIN, "--workers", "0", *SEEDS_0_1, "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted while choosing; the trained models are kept" in result.output
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == [
        "ppo.seed0.safetensors",
        "ppo.seed1.safetensors",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--select-runs", "4", "--out", "m.safetensors"], "--select-runs only applies with"),
        ([*SEEDS_0_1, "--out", "model"], "--out model: name it with a suffix"),
    ],
)
def test_options_that_cannot_work_are_refused_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, [*TRAIN, *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []
