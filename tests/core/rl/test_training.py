"""End to end: a tiny PPO run on real Ray, the trained policy in the simulator and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.rl.persistence import load_network, save_network
from kubesage.core.rl.training import TrainSettings, train
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.protocol import fgd_arrivals
from kubesage.core.state import ClusterState
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from tests.builders import shared_data_dir

NODES = synthetic_cluster(40, seed=1)
PODS = synthetic_workload(400, seed=2)


def final_allocation(policy_name: str, model: Path | None, seed: int) -> float:
    policy = make_policy(policy_name, PolicyContext(seed=seed, workload=PODS, model=model))
    typical = typical_pods(PODS)
    simulator = Simulator(NODES, policy, lambda s: FragmentationMeasure(typical, s.gpu_models))
    capacity = ClusterState(NODES).gpu_capacity_milli_total
    simulator.run_arrivals(fgd_arrivals(PODS, gpu_capacity_milli=capacity, seed=seed))
    return 100.0 * simulator.state.gpu_allocation_ratio


@pytest.mark.slow
def test_a_tiny_training_run_on_ray_beats_random(tmp_path: Path) -> None:
    settings = TrainSettings(iterations=3, steps_per_worker=128, workers=1, pca_steps=64, seed=1)
    metrics = tmp_path / "metrics.jsonl"
    network, history = train(NODES, [PODS], settings, metrics_path=metrics)
    assert len(history) == 3 and len(metrics.read_text().splitlines()) == 3
    for key in ("losses/approx_kl", "losses/value_loss", "losses/entropy", "charts/steps_per_s"):
        assert key in history[-1]
    path = tmp_path / "model.safetensors"
    save_network(network, path)
    load_network(path)
    trained = [final_allocation("ppo", path, seed) for seed in (101, 102)]
    chance = [final_allocation("random", None, seed) for seed in (101, 102)]
    assert min(trained) > max(chance) + 1.0, (trained, chance)


@pytest.mark.slow
def test_train_and_simulate_commands(tmp_path: Path) -> None:
    data = shared_data_dir()
    if data is None:
        pytest.skip("the shared openb traces are not beside the repository")
    openb = data / "openb"
    nodes = openb / "openb_node_list_gpu_node.csv"
    pods = openb / "openb_pod_list_gpuspec20.csv"
    out = tmp_path / "ppo.safetensors"
    done = subprocess.run(
        [
            sys.executable, "-m", "kubesage.core.cli", "train", "ppo",
            "--nodes", str(nodes), "--pods", str(pods),
            "--workers", "0", "--iterations", "1", "--steps", "64", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.exists() and out.with_suffix(".metrics.jsonl").exists()
    simulated = subprocess.run(
        [
            sys.executable, "-m", "kubesage.core.cli", "simulate",
            "--nodes", str(nodes), "--pods", str(pods), "--policy", "ppo",
            "--seeds", "42", "--tune", "0.5", "--model", str(out), "--no-report",
            "--format", "json",
        ],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    runs = json.loads(simulated.stdout)["runs"]
    assert [r["policy"] for r in runs] == ["ppo"] and runs[0]["failed_pods"] >= 0
    assert "falls back to FGD" not in simulated.stderr  # the trained model was used


@pytest.fixture(autouse=True)
def _no_ray_leftovers() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
