"""``train`` never waits on Ray without a bound: too many workers are refused, an
unreachable cluster is a clear error, and a worker that dies or hangs ends training with
a WorkerError that carries the iterations done (core/rl/training.py)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import kubesage.core.rl.training as training
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.rl.rollout import RolloutWorker
from kubesage.core.rl.training import TrainSettings, WorkerError, start_ray, train
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload

NODES = synthetic_cluster(20, seed=1)
PODS = synthetic_workload(200, seed=2)
SMALL = {"iterations": 3, "steps_per_worker": 16, "pca_steps": 16, "seed": 0}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once it is closed


@pytest.mark.timeout(180, method="thread")  # a hang blocks signals in Ray's wait
def test_more_workers_than_cores_is_refused_before_ray_starts() -> None:
    import ray

    running = ray.is_initialized()
    cores = os.cpu_count() or 1
    with pytest.raises(
        InputError, match=f"{cores + 1} workers need {cores + 1} CPUs.* has {cores}"
    ):
        train(NODES, [PODS], TrainSettings(workers=cores + 1, **SMALL))
    assert ray.is_initialized() == running  # refused without starting Ray


@pytest.mark.timeout(60)
def test_an_unreachable_ray_address_is_a_clear_error() -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(DependencyError, match=f"cannot reach the Ray cluster at {address}"):
        start_ray(address)
    assert time.monotonic() - started < 10


def test_deadlines_come_from_the_setting_or_the_first_iteration() -> None:
    automatic = TrainSettings()
    assert training.worker_timeout_s(automatic, None) == training.STARTUP_TIMEOUT_S
    assert training.worker_timeout_s(automatic, 1.0) == training.MIN_ITERATION_TIMEOUT_S
    assert training.worker_timeout_s(automatic, 60.0) == 600.0
    assert training.worker_timeout_s(TrainSettings(worker_timeout_s=5.0), None) == 5.0
    with pytest.raises(InputError, match="worker timeout must be positive"):
        train(NODES, [PODS], TrainSettings(workers=0, worker_timeout_s=0.0, **SMALL))


@pytest.fixture(scope="module")
def one_cpu_ray() -> Iterator[Any]:
    """A local Ray of one CPU, shared by the tests below (starting one takes ~10 s)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.timeout(180, method="thread")  # the module's Ray starts inside it
def test_more_workers_than_the_cluster_cpus_is_refused(one_cpu_ray: Any) -> None:
    with pytest.raises(InputError, match=r"2 workers need 2 CPUs .* local Ray has 1:"):
        train(NODES, [PODS], TrainSettings(workers=2, **SMALL))


@pytest.mark.timeout(180)
def test_a_dead_worker_ends_training_with_the_iterations_done(one_cpu_ray: Any) -> None:
    class DiesInSecondCollect(RolloutWorker):  # defined here: Ray ships it by value
        calls = 0

        def collect(self, weights: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
            DiesInSecondCollect.calls += 1
            if DiesInSecondCollect.calls == 2:
                os._exit(1)
            return super().collect(weights, steps)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "RolloutWorker", DiesInSecondCollect)
        with pytest.raises(WorkerError, match="worker 0 of 1 died during 'collect'") as caught:
            train(NODES, [PODS], TrainSettings(workers=1, **SMALL))
    assert "in iteration 2 of 3" in str(caught.value)
    assert caught.value.network is not None and len(caught.value.history) == 1


@pytest.mark.timeout(180, method="thread")
def test_a_hung_worker_misses_its_deadline_and_frees_its_cpu(one_cpu_ray: Any) -> None:
    class HangsInSecondCollect(RolloutWorker):
        calls = 0

        def collect(self, weights: dict[str, np.ndarray], steps: int) -> dict[str, Any]:
            HangsInSecondCollect.calls += 1
            if HangsInSecondCollect.calls == 2:
                time.sleep(3600)
            return super().collect(weights, steps)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "RolloutWorker", HangsInSecondCollect)
        patch.setattr(training, "MIN_ITERATION_TIMEOUT_S", 3.0)
        started = time.monotonic()
        with pytest.raises(WorkerError, match="worker 0 of 1 did not return 'collect'") as caught:
            train(NODES, [PODS], TrainSettings(workers=1, **SMALL))
    assert time.monotonic() - started < 60
    assert "in iteration 2 of 3" in str(caught.value) and len(caught.value.history) == 1
    # the hung actor was killed: the one CPU is free for the next training
    _, history = train(NODES, [PODS], TrainSettings(workers=1, **{**SMALL, "iterations": 1}))
    assert len(history) == 1


def test_ctrl_c_keeps_the_weights_of_the_last_completed_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C in the middle of iteration 3's update: training ends with the network as
    it was after iteration 2 (not half updated) and the metrics of those two."""
    after: list[dict[str, Any]] = []
    real_update = training.update

    def update(network: Any, *args: Any, **kwargs: Any) -> Any:
        if len(after) == 2:
            with torch.no_grad():
                for parameter in network.parameters():
                    parameter.add_(1.0)  # half an update
            raise KeyboardInterrupt
        stats = real_update(network, *args, **kwargs)
        after.append({k: v.detach().clone() for k, v in network.state_dict().items()})
        return stats

    monkeypatch.setattr(training, "update", update)
    with pytest.raises(training.TrainingInterruptedError, match="after 2 of 3") as caught:
        train(NODES, [PODS], TrainSettings(workers=0, **SMALL))
    assert caught.value.network is not None and len(caught.value.history) == 2
    kept = caught.value.network.state_dict()
    assert all(torch.equal(kept[name], after[-1][name]) for name in kept)
