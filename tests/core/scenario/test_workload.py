"""The scenario's workload: offered load, determinism, and well-formed arrivals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kubesage.core.scenario.model import Arrival, PhaseKind, WorkKind
from kubesage.core.scenario.profiles import synthetic_profiles
from kubesage.core.scenario.steptime import TRAINING_STATE_BYTES_PER_PARAM
from kubesage.core.scenario.workload import (
    GPT3_BATCH_TOKENS,
    GPU_SHARES,
    INFERENCE_DURATION,
    TRAINING_DURATION,
    DurationLaw,
    WorkloadSettings,
    generate_workload,
)
from kubesage.core.types import GPU_MILLI_PER_GPU

PROFILES = synthetic_profiles(0, count=7, steps=10)
ONLY_TRAINING = {WorkKind.TRAINING: 1.0}
LAYOUT = {2: (1, 2), 4: (1, 4), 8: (1, 8), 16: (2, 8), 32: (4, 8), 64: (8, 8)}


def _gpus(arrival: Arrival) -> float:
    return sum(pod.num_gpu * pod.gpu_milli / GPU_MILLI_PER_GPU for pod in arrival.pods)


def _offered(arrivals: list[Arrival], kind: WorkKind | None, hours: float) -> float:
    """Mean GPUs requested over [0, hours] by the arrivals of ``kind`` (None: all)."""
    horizon = hours * 3600
    held = sum(
        _gpus(a) * min(a.duration_s, horizon - a.time_s)
        for a in arrivals
        if kind is None or a.kind is kind
    )
    return held / horizon


def test_offered_gpu_load_meets_the_target_over_a_long_horizon() -> None:
    # Training's few, days-long jobs need many seeds: the next tests check them.
    shares = {kind: GPU_SHARES[kind] for kind in (WorkKind.INFERENCE, WorkKind.LARGE)}
    settings = WorkloadSettings(hours=1000, load=0.8, capacity_gpus=64, shares=shares)
    runs = [generate_workload(settings, PROFILES, seed=seed) for seed in (5, 6, 7)]
    total = np.mean([_offered(arrivals, None, settings.hours) for arrivals in runs])
    assert total == pytest.approx(0.8 * 64, rel=0.03)
    for kind in shares:
        by_kind = np.mean([_offered(arrivals, kind, settings.hours) for arrivals in runs])
        assert by_kind == pytest.approx(settings.target_gpus(kind), rel=0.04), kind


def test_one_seed_offers_nested_work_across_loads() -> None:
    low, high = (
        generate_workload(WorkloadSettings(hours=4, load=load, capacity_gpus=128), PROFILES, 9)
        for load in (0.6, 0.9)
    )
    assert {a.id for a in low} < {a.id for a in high}
    by_id = {a.id: a for a in high}
    assert all(a == by_id[a.id] for a in low)  # the same work, not a fresh draw


def test_the_warm_start_offers_the_load_from_the_first_hour() -> None:
    """Across seeds, the first two hours already see the target (not a ramp from 0)."""
    settings = WorkloadSettings(
        hours=2, load=0.9, capacity_gpus=128, shares={WorkKind.INFERENCE: 0.3, WorkKind.LARGE: 0.7}
    )
    offered = [
        _offered(generate_workload(settings, PROFILES, seed), None, 2.0) for seed in range(30)
    ]
    assert np.mean(offered) == pytest.approx(0.9 * 128, rel=0.06)
    cold = WorkloadSettings(hours=2, load=0.9, capacity_gpus=128, warm_start=False)
    assert all(a.time_s > 0 for a in generate_workload(cold, PROFILES, seed=1))


def test_training_load_meets_its_target_across_seeds() -> None:
    settings = WorkloadSettings(hours=200, load=0.9, capacity_gpus=512, shares=ONLY_TRAINING)
    offered = [
        _offered(generate_workload(settings, PROFILES, seed), WorkKind.TRAINING, 200)
        for seed in range(6)
    ]
    # Training durations are heavy-tailed (a few jobs run for days), so one seed is noisy.
    assert np.mean(offered) == pytest.approx(0.9 * 512, rel=0.1)


@pytest.mark.parametrize("law", [INFERENCE_DURATION, TRAINING_DURATION])
def test_the_capped_mean_duration_is_the_samples_mean(law: DurationLaw) -> None:
    draws = law.draw(np.random.default_rng(0), 2_000_000)
    assert draws.max() <= law.cap_s
    assert law.mean_s() == pytest.approx(draws.mean(), rel=0.03)
    assert np.median(draws) == pytest.approx(law.median_s, rel=0.02)


def test_the_same_seed_gives_the_same_workload() -> None:
    settings = WorkloadSettings(hours=3)
    first = generate_workload(settings, PROFILES, seed=11)
    assert first == generate_workload(settings, PROFILES, seed=11)
    assert first != generate_workload(settings, PROFILES, seed=12)


def test_arrivals_are_sorted_named_and_shaped_within_range() -> None:
    settings = WorkloadSettings(hours=24, capacity_gpus=128)
    arrivals = generate_workload(settings, PROFILES, seed=2)
    assert [a.time_s for a in arrivals] == sorted(a.time_s for a in arrivals)
    assert {a.kind for a in arrivals} == set(WorkKind)
    assert len({a.id for a in arrivals}) == len(arrivals)
    names = [pod.name for a in arrivals for pod in a.pods]
    assert len(set(names)) == len(names)
    for arrival in arrivals:
        assert 0 <= arrival.time_s < 24 * 3600 and arrival.duration_s > 0
        assert [pod.name for pod in arrival.pods] == [
            f"mixed/{arrival.id}-{i}" for i in range(len(arrival.pods))
        ]
        for pod in arrival.pods:
            assert pod.cpu_milli > 0 and pod.memory_mib > 0
            assert pod.creation_time_s == pytest.approx(arrival.time_s, abs=1e-3)
        if arrival.kind is WorkKind.INFERENCE:
            (pod,) = arrival.pods
            assert pod.num_gpu == 1 and 0 < pod.gpu_milli < GPU_MILLI_PER_GPU
            assert arrival.profile is not None and 0 <= arrival.profile < PROFILES.count
            assert arrival.training is None
        elif arrival.kind is WorkKind.LARGE:
            (pod,) = arrival.pods
            assert (pod.num_gpu, pod.gpu_milli) == (1, GPU_MILLI_PER_GPU)
            assert arrival.profile is None and arrival.training is None
        else:
            assert arrival.training is not None and arrival.profile is None


def test_training_jobs_are_consistent_gangs_with_phases_covering_their_run() -> None:
    settings = WorkloadSettings(hours=400, capacity_gpus=256, shares=ONLY_TRAINING)
    jobs = generate_workload(settings, PROFILES, seed=4)
    assert len(jobs) > 30
    sizes = set()
    for job in jobs:
        spec = job.training
        assert spec is not None
        sizes.add(spec.gpus)
        assert (spec.members, spec.gpus_per_member) == LAYOUT[spec.gpus]
        assert spec.min_members == max(1, spec.members // 2)
        assert len(job.pods) == spec.members
        assert sum(pod.num_gpu for pod in job.pods) == spec.gpus
        assert all(pod.gang_id == job.id and pod.gpu_milli == GPU_MILLI_PER_GPU for pod in job.pods)
        # The elastic minimum still holds the training state in half its GPUs' memory.
        room_gb = spec.min_members * spec.gpus_per_member * 80 * 0.5
        assert spec.model_params_b * TRAINING_STATE_BYTES_PER_PARAM <= room_gb + 1e-6
        limit = next(lim for lim, tokens in GPT3_BATCH_TOKENS if spec.model_params_b <= lim)
        assert (limit, spec.global_batch_tokens) in GPT3_BATCH_TOKENS
        phases = spec.phases
        assert phases[0].start_s == 0 and phases[-1].end_s == pytest.approx(job.duration_s)
        for before, after in itertools.pairwise(phases):
            assert after.start_s == pytest.approx(before.end_s)
            assert after.kind is not before.kind
        assert all(p.end_s > p.start_s for p in phases)
        whole = phases[1:-1]
        train = [p.end_s - p.start_s for p in whole if p.kind is PhaseKind.TRAIN]
        validation = [p.end_s - p.start_s for p in whole if p.kind is PhaseKind.VALIDATION]
        if train and validation:
            # Megatron-LM's defaults: 100 forward-only iterations every 1000 steps.
            assert validation[0] / train[0] == pytest.approx(100 / 3 / 1000)
    assert sizes == {2, 4, 8, 16, 32, 64}


def test_settings_refuse_what_cannot_be_drawn() -> None:
    with pytest.raises(ValueError):
        WorkloadSettings(load=0)
    with pytest.raises(ValueError):
        WorkloadSettings(shares={WorkKind.LARGE: 0.0})
    with pytest.raises(ValueError):
        WorkloadSettings(training_gpu_weights=((3, 1.0),))
    assert math.isclose(sum(WorkloadSettings().share(kind) for kind in WorkKind), 1.0)
