"""``gpu-elastic``: an elastic job through a validation phase, from replayed DCGM utilisation."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from kubesage.adapters.gpu_training.elastic import PhaseDetector
from kubesage.adapters.gpu_training.elastic_reconciler import ElasticReconciler, ElasticSettings
from kubesage.core.annotations import ELASTIC_MAX_ANNOTATION, ELASTIC_MIN_ANNOTATION
from kubesage.core.errors import InputError
from kubesage.core.loop.actions import ObjectRef, Plan, Scale
from kubesage.core.loop.reconciler import Reconciled
from kubesage.core.loop.view import PodInfo
from kubesage.core.perception import Snapshot
from kubesage.core.state import ClusterState
from kubesage.core.telemetry.features import NodeMetrics
from tests.adapters.gpu_training.loop_views import request, run, view
from tests.builders import node

JOB = ObjectRef("kubeflow.org/v1", "PyTorchJob", "default", "train")
BOUNDS = {ELASTIC_MIN_ANNOTATION: "2", ELASTIC_MAX_ANNOTATION: "4"}
TICK_S = 5.0
COLUMNS = tuple(f"dcgm.gpu_util_percent.gpu{g}" for g in range(8))


def reconciler(restart_cost_s: float = 0.0) -> ElasticReconciler:
    # A phase must last two ticks before it counts; no smoothing, so the test can count.
    # Restarts cost nothing unless a test says so: every phase is worth a scale.
    detector = PhaseDetector(step_s=TICK_S, smooth_samples=1, min_segment_s=2 * TICK_S)
    return ElasticReconciler(
        ElasticSettings(detector=detector, settle_s=60.0, restart_cost_s=restart_cost_s)
    )


def job(
    workers: int, annotations: Mapping[str, str] = BOUNDS
) -> tuple[ClusterState, list[PodInfo]]:
    state = ClusterState([node("n0", gpus=8)])
    pods = [
        run(state, request(f"train-worker-{i}"), "n0", [i], owner=JOB, annotations=annotations)
        for i in range(workers)
    ]
    return state, pods


def dcgm(utilisation: float, taken_at: float) -> Mapping[str, Snapshot[Any]]:
    metrics = NodeMetrics(("n0",), COLUMNS, np.full((1, len(COLUMNS)), utilisation), taken_at)
    return {"prometheus": Snapshot(metrics, taken_at=taken_at)}


def replay(
    series: Sequence[float],
    workers: Sequence[int],
    memory: Mapping[str, Any] | None = None,
    every_s: float = TICK_S,
    restart_cost_s: float = 0.0,
) -> list[Reconciled]:
    """One tick per utilisation sample (``every_s`` apart), the job having ``workers[t]``
    pods at tick ``t``."""
    elastic = reconciler(restart_cost_s)
    results = []
    for t, (utilisation, count) in enumerate(zip(series, workers, strict=True)):
        state, pods = job(count)
        now = t * every_s
        result = elastic.reconcile(
            view(
                state, pods, tick=t + 1, now_s=now, snapshots=dcgm(utilisation, now), memory=memory
            )
        )
        memory = result.memory
        results.append(result)
    return results


def scales(results: Sequence[Reconciled]) -> list[tuple[int, int, str]]:
    """``(tick index, replicas, plan id)`` of every Scale asked for."""
    asked = []
    for t, result in enumerate(results):
        for action in result.actions:
            assert isinstance(action, Plan)
            (step,) = action.steps
            assert isinstance(step, Scale) and step.workload == JOB
            asked.append((t, step.replicas, action.id))
    return asked


def test_validation_scales_to_the_minimum_and_training_back_to_the_maximum() -> None:
    series = [90, 90, 90, 30, 30, 30, 30, 90, 30, 30, 90, 90, 90]
    workers = [4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 4]
    asked = scales(replay(series, workers))
    # Validation counts once it lasted two ticks (tick 4); the lone 90 at tick 7 is a
    # blip, not training; training counts once it lasted two ticks (tick 11).
    assert [(t, replicas) for t, replicas, _ in asked] == [(4, 2), (11, 4)]
    assert asked[0][2] != asked[1][2]  # two scale changes, two plans
    assert "validation" in replay(series, workers)[4].actions[0].explanation  # type: ignore[union-attr]


def test_the_ask_is_not_repeated_while_the_controller_settles() -> None:
    series = [90, 90, 30, 30] + [30] * 10
    workers = [4] * len(series)  # the job's controller never removes a pod
    asked = scales(replay(series, workers))
    # Asked at tick 3, again only settle_s (60 s, 12 ticks) later — not in between.
    assert [t for t, _, _ in asked] == [3]


def test_a_scale_that_never_shows_is_asked_again_after_settle_s() -> None:
    series = [90, 90, 30, 30] + [30] * 40  # validation for 200 s
    workers = [4] * len(series)  # the scale failed: the job keeps its 4 pods
    asked = scales(replay(series, workers))
    # Asked at tick 3; its replicas never show, so settle_s (60 s, 12 ticks) on the job's
    # phase is read again (one fresh sample: tick 16) and the same ask repeated (the
    # same plan: no new scale change).
    assert [t for t, _, _ in asked][:2] == [3, 16]
    assert len({plan for _, _, plan in asked}) == 1


def test_a_second_validation_phase_is_a_new_plan() -> None:
    series = [90, 30, 30, 90, 90, 30, 30]
    workers = [4, 4, 4, 2, 2, 4, 4]
    asked = scales(replay(series, workers))
    assert [replicas for _, replicas, _ in asked] == [2, 4, 2]
    assert len({plan for _, _, plan in asked}) == 3


def test_a_phase_shorter_than_two_restarts_is_not_worth_a_shrink() -> None:
    # Restarts cost 20 s: a shrink from 4 to 2 pays off past 2 · 20 · 4 / 2 = 80 s of
    # validation. The first one is judged by how long it has lasted (a shrink once it
    # passes 80 s); its length (100 s) then stands for the next, shrunk as soon as seen.
    series = [90, 90] + [30] * 20 + [90] * 10 + [30] * 4
    workers = [4] * 18 + [2] * 8 + [4] * 10  # the controller follows the asks
    results = replay(series, workers, restart_cost_s=20.0)
    asked = [(t, replicas) for t, replicas, _ in scales(results)]
    # the first at its 16th sample (80 s from tick 2); back to 4 for training; the second
    # validation (from tick 32) at once, the two ticks a phase needs to count
    assert asked == [(17, 2), (23, 4), (33, 2)]
    assert any("less than the 80 s two restarts cost" in n for n in results[5].notes)


def test_a_restarts_idle_gpus_are_not_a_phase() -> None:
    # As above, until the job is scaled back to 4 for training (tick 23): the restart
    # then reads 0 % for 15 s. Past validations lasted 100 s, so an idle phase would be
    # shrunk at once; but those samples, taken while the scale was under way (less than
    # restart_cost_s after the ask), are dropped, and the job stays at 4.
    series = [90, 90] + [30] * 20 + [90] * 2 + [0] * 3 + [90] * 6
    workers = [4] * 18 + [2] * 6 + [4] * 9
    costly = scales(replay(series, workers, restart_cost_s=20.0))
    assert [(t, replicas) for t, replicas, _ in costly] == [(17, 2), (23, 4)]
    # the same samples, with restarts thought free, read as an idle phase and shrink it
    free = scales(replay(series, workers))
    assert [(t, replicas) for t, replicas, _ in free][-2:] == [(23, 4), (25, 2)]


def test_the_phase_annotation_overrides_the_utilisation() -> None:
    state, pods = job(4, {**BOUNDS, "kubesage.io/training-phase": "validation"})
    result = reconciler().reconcile(view(state, pods, snapshots=dcgm(95.0, 0.0)))
    assert [(t, replicas) for t, replicas, _ in scales([result])] == [(0, 2)]


def test_the_same_tick_twice_asks_the_same_and_adds_no_sample() -> None:
    memory = replay([90, 30], [4, 4])[-1].memory
    state, pods = job(4)
    again = view(state, pods, tick=3, now_s=10.0, snapshots=dcgm(30.0, 10.0), memory=memory)
    first, second = reconciler().reconcile(again), reconciler().reconcile(again)
    assert [a.id for a in first.actions] == [a.id for a in second.actions]  # type: ignore[union-attr]
    assert first.memory == second.memory
    assert json.loads(json.dumps(first.memory)) == first.memory  # JSON values only


def test_bad_bounds_are_noted_and_jobs_without_them_ignored() -> None:
    state, pods = job(2, {ELASTIC_MIN_ANNOTATION: "3", ELASTIC_MAX_ANNOTATION: "2"})
    result = reconciler().reconcile(view(state, pods, snapshots=dcgm(30.0, 0.0)))
    assert not result.actions and "1 <= min <= max" in result.notes[0]
    state, pods = job(2, {})
    result = reconciler().reconcile(view(state, pods, snapshots=dcgm(30.0, 0.0)))
    assert (list(result.actions), list(result.notes), result.memory) == ([], [], {"jobs": {}})


def test_no_decision_on_a_first_glimpse() -> None:
    asked = scales(replay([30, 30, 30], [4, 4, 4]))
    assert [(t, replicas) for t, replicas, _ in asked] == [(1, 2)]  # not at the first sample


def test_phases_are_timed_by_the_samples_not_the_configured_tick() -> None:
    # Samples 30 s apart (a slow exporter): one 30 s validation sample already outlasts
    # the 10 s shortest phase. Timed as 5 s steps it looked like a 5 s blip.
    asked = scales(replay([90, 30, 30], [4, 4, 4], every_s=30.0))
    assert [(t, replicas) for t, replicas, _ in asked] == [(1, 2)]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"step_s": 0.0}, "step_s must be > 0, got 0.0"),
        ({"smooth_samples": 0}, "smooth_samples must be >= 1, got 0"),
        ({"min_segment_s": -1.0}, "min_segment_s must be >= 0, got -1.0"),
        ({"idle_pct": 70.0}, "need 0 <= idle_pct < train_pct <= 100"),
    ],
)
def test_phase_detector_fields_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        PhaseDetector(**fields)
