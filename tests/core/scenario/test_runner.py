"""Every variant of the mixed scenario on a small cluster: nothing lost or counted twice,
every figure a number, the loop acting only where it runs, the same run twice alike."""

from __future__ import annotations

import math

import pytest

from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.scenario.accounting import Accounting
from kubesage.core.scenario.cluster import scenario_topology
from kubesage.core.scenario.model import Arrival
from kubesage.core.scenario.profiles import synthetic_profiles
from kubesage.core.scenario.result import FIGURES, VARIANTS, ScenarioSettings, VariantRun
from kubesage.core.scenario.runner import run_variant, start_at_steady_state
from kubesage.core.scenario.sim_cluster import SimCluster
from kubesage.core.scenario.workload import WorkloadSettings, generate_workload

SETTINGS = ScenarioSettings(gpu_nodes=8, hours=1.5, load=0.95, tick_s=60.0)
PROFILES = synthetic_profiles(0)


def arrivals(seed: int) -> list[Arrival]:
    workload = WorkloadSettings(
        hours=SETTINGS.hours, load=SETTINGS.load, capacity_gpus=SETTINGS.gpu_nodes * 8
    )
    return generate_workload(workload, PROFILES, seed)


@pytest.fixture(scope="module")
def runs() -> dict[str, VariantRun]:
    drtg = scenario_topology(SETTINGS.gpu_nodes)
    work = arrivals(7)
    return {
        variant: run_variant(SETTINGS, variant, 7, work, PROFILES, drtg=drtg)
        for variant in VARIANTS
    }


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_pod_is_lost_or_counted_twice(runs: dict[str, VariantRun], variant: str) -> None:
    c = runs[variant].conservation
    assert c["arrived_pods"] + c["regrown"] == (
        c["running"] + c["pending"] + c["finished"] + c["scaled_away"]
    )
    assert c["gpu_milli_held_by_pods"] == c["gpu_milli_allocated"]
    assert c["arrived_pods"] > 0 and c["finished"] > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_figure_is_a_number_in_range(runs: dict[str, VariantRun], variant: str) -> None:
    figures = runs[variant].figures
    assert set(figures) == set(FIGURES)
    for name, value in figures.items():
        assert isinstance(value, float) and math.isfinite(value), name
        if name.endswith("_pct") and name != "training_throughput_gain_pct":
            assert 0.0 <= value <= 100.0, (name, value)
    ticks = int(SETTINGS.hours * 3600 / SETTINGS.tick_s)
    assert all(len(series) == ticks for series in runs[variant].series.values())


def test_only_the_loop_variants_act_and_ablations_drop_their_reconciler(
    runs: dict[str, VariantRun],
) -> None:
    assert runs["k8s-default"].actions == {} and runs["fgd"].actions == {}
    assert runs["kubesage"].actions  # the loop did something on a full cluster
    assert "gpu-defrag" not in runs["kubesage-no-defrag"].actions
    assert "gpu-gang" not in runs["kubesage-no-gang"].actions
    assert "gpu-elastic" not in runs["kubesage-no-elastic"].actions
    assert runs["fgd"].figures["pods_migrated_pct"] == 0.0


def test_the_same_run_twice_gives_the_same_figures() -> None:
    work = arrivals(3)
    first = run_variant(SETTINGS, "kubesage", 3, work, PROFILES)
    second = run_variant(SETTINGS, "kubesage", 3, work, PROFILES)
    assert first.figures == second.figures and first.actions == second.actions


def test_every_variant_starts_from_the_same_cluster_with_the_warm_work_placed() -> None:
    # The work already running at 0 is placed before the first tick, the same way for
    # every variant (training jobs whole): before, each variant's scheduler placed it at
    # the first tick in its own order, which decided small or overloaded runs.
    work = arrivals(7)
    running = [a for a in work if a.running_since_s is not None]
    assert running and all(a.time_s == 0.0 and a.running_since_s < 0 for a in running)
    assert any(a.training is not None for a in running)
    drtg = scenario_topology(SETTINGS.gpu_nodes)
    starts = []
    for variant in ("k8s-default", "fgd", "kubesage"):
        cluster = SimCluster(drtg.node_specs(), PROFILES, SimulatedClock(0.0))
        accounting = Accounting(cluster, drtg, SETTINGS.tick_s)
        typical = tuple(pod for arrival in work for pod in arrival.pods)
        start_at_steady_state(cluster, accounting, running, SETTINGS.policy, 7, typical)
        bound = {name: pod.placement for name, pod in cluster.pods.items() if pod.placement}
        assert all(cluster.pods[name].first_bound_s == 0.0 for name in bound), variant
        for job in cluster.jobs.values():  # a gang is placed whole or not at all
            members = [
                cluster.pods[f"mixed/{job.arrival.id}-{i}"] for i in range(len(job.arrival.pods))
            ]
            assert len({m.placement is None for m in members}) == 1
        starts.append(bound)
    assert starts[0] and starts[0] == starts[1] == starts[2]
