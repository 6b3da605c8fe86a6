"""Running the scenario's tasks: in-process, in spawned processes and on Ray, the same
figures; the throughput gain against a ``k8s-default`` run the caller need not ask for.

Every run here is a real one on a tiny cluster (4 nodes, a quarter of an hour, one
loop tick a minute)."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.scenario.result import FIGURES, SERIES, ScenarioSettings, VariantRun
from kubesage.core.scenario.sweep import ScenarioTask, run_scenario, run_tasks, sweep
from tests.services import missing

TINY = ScenarioSettings(gpu_nodes=4, hours=0.25, load=0.95, tick_s=60.0)


def _outcome(run: VariantRun) -> dict[str, object]:
    """Everything a run yields (its figures, actions, series, accounting)."""
    return asdict(run)


def test_processes_give_the_figures_of_one_process() -> None:
    tasks = [ScenarioTask(TINY, "fgd", 5), ScenarioTask(TINY, "kubesage", 5)]
    seen: list[str] = []
    serial = run_tasks(tasks, jobs=1)
    parallel = run_tasks(tasks, jobs=2, on_result=lambda run: seen.append(run.variant))
    assert [run.variant for run in parallel] == ["fgd", "kubesage"]  # in task order
    assert sorted(seen) == ["fgd", "kubesage"]
    assert [_outcome(run) for run in parallel] == [_outcome(run) for run in serial]
    for run in serial:
        assert set(FIGURES) <= set(run.figures)
        assert all(math.isfinite(value) for value in run.figures.values())
        assert set(SERIES) <= set(run.series) and len(run.series["time_s"]) == 15


def test_gain_needs_k8s_default_but_the_result_keeps_the_asked_variants() -> None:
    asked = run_scenario(TINY, [11], ["fgd"])
    assert list(asked) == ["fgd"]
    with_base = run_scenario(TINY, [11], ["fgd", "k8s-default"])
    assert list(with_base) == ["fgd", "k8s-default"]
    assert with_base["k8s-default"][0].figures["training_throughput_gain_pct"] == 0.0
    assert asked["fgd"][0].figures == with_base["fgd"][0].figures


def test_sweep_runs_every_load_and_seed() -> None:
    result = sweep(TINY, [0.5, 0.9], [1, 2], ["k8s-default"])
    assert list(result) == [0.5, 0.9]
    assert [[run.seed for run in result[load]["k8s-default"]] for load in result] == [
        [1, 2],
        [1, 2],
    ]
    # a higher offered load places more work: its arrivals differ, so do its figures
    low, high = (result[load]["k8s-default"][0] for load in (0.5, 0.9))
    assert low.conservation["arrived_pods"] < high.conservation["arrived_pods"]


@pytest.mark.parametrize(
    ("variants", "seeds", "loads", "message"),
    [
        (["kubesage-plus"], [1], [0.8], "unknown variant 'kubesage-plus'"),
        (["fgd"], [], [0.8], "no seeds"),
        ([], [1], [0.8], "no variants"),
        (["fgd"], [1], [], "no loads"),
    ],
)
def test_bad_requests_fail_before_any_run(
    variants: list[str], seeds: list[int], loads: list[float], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        sweep(TINY, loads, seeds, variants)


def test_jobs_must_be_positive() -> None:
    with pytest.raises(InputError, match="jobs must be at least 1"):
        run_tasks([ScenarioTask(TINY, "fgd", 1)], jobs=0)


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        missing(f"Ray is not installed: {exc}")


@pytest.mark.slow
def test_local_ray_gives_the_figures_of_one_process() -> None:
    _require_ray()
    tasks = [ScenarioTask(TINY, "k8s-default", 3), ScenarioTask(TINY, "kubesage", 3)]
    on_ray = run_tasks(tasks, jobs=2, ray_address="local")
    assert [_outcome(run) for run in on_ray] == [_outcome(run) for run in run_tasks(tasks)]
    import ray

    assert not ray.is_initialized()  # the Ray it started is shut down again


def test_unreachable_ray_is_a_dependency_error() -> None:
    _require_ray()
    with pytest.raises(DependencyError, match="cannot connect to Ray"):
        run_tasks([ScenarioTask(TINY, "fgd", 1)], ray_address="127.0.0.1:9")
