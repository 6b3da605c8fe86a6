"""The discrete-event engine: arrivals, departures, failures and what it records."""

from __future__ import annotations

import pytest

from kubesage.core.errors import InputError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.sim.engine import Simulator
from kubesage.core.sim.runner import RunSpec, run_many, run_one
from kubesage.core.sim.summary import json_document
from kubesage.core.state.fragmentation import FragmentationMeasure, typical_pods
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec, PodRequest
from tests.builders import node, pod


def simulator(
    nodes: list[NodeSpec], workload: list[PodRequest], policy: str = "bestfit"
) -> Simulator:
    typical = typical_pods(workload)
    return Simulator(
        nodes,
        make_policy(policy, PolicyContext(seed=0, workload=workload)),
        lambda state: FragmentationMeasure(typical, state.gpu_models),
    )


def test_arrivals_only_records_each_event_and_counts_failures() -> None:
    pods = [pod("a", gpus=2), pod("b", gpus=2), pod("c", gpus=1), pod("d", milli=500)]
    sim = simulator([node("n", gpus=4)], pods)
    trajectory = sim.run_arrivals(pods)
    assert trajectory.arrived_gpu_milli == [0, 2_000, 4_000, 5_000, 5_500]
    assert trajectory.allocated_gpu_milli == [0, 2_000, 4_000, 4_000, 4_000]
    assert trajectory.failed_pods == [0, 0, 0, 1, 2]
    assert [d.request for d in sim.failed] == ["c", "d"]
    assert sim.state.gpu_allocation_ratio == 1.0


def test_replay_departures_free_resources_before_same_time_arrivals() -> None:
    pods = [
        pod("first", gpus=4, created=0.0, deleted=10.0),
        pod("second", gpus=4, created=10.0, deleted=20.0),
        pod("third", gpus=4, created=15.0, deleted=30.0),
    ]
    sim = simulator([node("n", gpus=4)], pods)
    trajectory = sim.run_replay(pods)
    assert trajectory.time_s == [0.0, 0.0, 10.0, 10.0, 15.0, 20.0, 30.0]
    assert trajectory.allocated_gpu_milli == [0, 4_000, 0, 4_000, 4_000, 0, 0]
    assert [d.request for d in sim.failed] == ["third"]
    assert sim.running == {}


def test_a_pod_that_leaves_as_it_arrives_does_not_stay() -> None:
    pods = [pod("blink", gpus=4, created=5.0, deleted=5.0), pod("later", gpus=4, created=6.0)]
    sim = simulator([node("n", gpus=4)], pods)
    trajectory = sim.run_replay(pods)
    assert trajectory.allocated_gpu_milli == [0, 4_000, 0, 4_000]
    assert sim.failed == [] and set(sim.running) == {"later"}


def test_replay_needs_creation_times() -> None:
    pods = [pod("untimed", gpus=1)]
    with pytest.raises(InputError, match="no creation time"):
        simulator([node("n")], pods).run_replay(pods)


def test_fragmentation_is_tracked_incrementally() -> None:
    nodes = synthetic_cluster(30, seed=2)
    workload = synthetic_workload(400, seed=2)
    sim = simulator(nodes, workload, policy="fgd")
    trajectory = sim.run_arrivals(workload)
    full = float(sim.measure.of_state(sim.state).sum())
    assert trajectory.fragment_milli[-1] == pytest.approx(full, rel=1e-9)
    assert 0.0 <= min(trajectory.fragmentation_ratio) <= max(trajectory.fragmentation_ratio) <= 1.0


def test_runs_are_deterministic_and_parallel_equals_serial() -> None:
    nodes = synthetic_cluster(40, seed=1)
    workload = synthetic_workload(300, seed=1)
    specs = [RunSpec("fgd", 42), RunSpec("random", 42), RunSpec("fgd", 43)]
    serial = run_many(specs, nodes, workload, jobs=1)
    parallel = run_many(specs, nodes, workload, jobs=2)
    for a, b in zip(serial, parallel, strict=True):
        assert a.summary_row() == b.summary_row()
    assert serial[0].summary_row() != serial[2].summary_row()


def test_replay_mode_through_the_runner() -> None:
    nodes = synthetic_cluster(20, seed=3)
    workload = synthetic_workload(500, seed=3, mean_interarrival_s=5.0)
    result = run_one(RunSpec("fgd", 1, mode="replay"), nodes, workload)
    assert result.pods == 500
    assert result.curves["allocation_by_time"][0]
    # a replay's JSON also carries the peak and the time-mean allocation (its table's)
    row = result.summary_row()
    assert 0 < float(row["alloc_time_mean"]) <= float(row["alloc_peak"]) <= 100  # type: ignore[arg-type]
    summary = json_document([result])["summary"]
    assert isinstance(summary, dict) and set(summary["fgd"]) == {
        "alloc_at_100", "alloc_at_130", "alloc_peak", "alloc_time_mean",
    }  # fmt: skip
