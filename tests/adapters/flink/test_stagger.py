"""Checkpoint staggering: optimum count, lower bounds, determinism, bytes, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesage.adapters.flink.errors import StaggerInputError
from kubesage.adapters.flink.stagger import (
    CheckpointProfile,
    aligned_plan,
    best_phase,
    lower_bound_concurrent,
    optimum_equal_intervals,
    peak_concurrent,
    plan_stagger,
    profiles_from_mapping,
)
from kubesage.adapters.flink.stagger_search import circular_window_max


def simulated_peak(plan_phases: dict[str, int], profiles: list[CheckpointProfile]) -> int:
    """Peak count of the plan's windows over one hyperperiod, by an independent sweep."""
    horizon = math.lcm(*(p.interval_ms for p in profiles))
    windows = []
    for p in profiles:
        phase = plan_phases[p.job_id]
        # Start one lap early so windows that wrap into [0, horizon) are counted.
        for start in range(phase - p.interval_ms, horizon, p.interval_ms):
            windows.append((start, start + p.duration_ms))
    return peak_concurrent(windows)


def brute_force_optimum(profiles: list[CheckpointProfile]) -> int:
    phases = [range(p.interval_ms) for p in profiles[1:]]
    return min(
        simulated_peak(
            {profiles[0].job_id: 0}
            | {p.job_id: phi for p, phi in zip(profiles[1:], rest, strict=True)},
            profiles,
        )
        for rest in itertools.product(*phases)
    )


equal_jobs = st.integers(min_value=2, max_value=20).flatmap(
    lambda interval: st.lists(
        st.tuples(st.integers(1, interval), st.integers(0, 10**9)), min_size=1, max_size=8
    ).map(
        lambda rows: [
            CheckpointProfile(f"job-{i}", interval, duration, size)
            for i, (duration, size) in enumerate(rows)
        ]
    )
)


@settings(max_examples=60, deadline=None)
@given(equal_jobs)
def test_equal_intervals_reach_the_closed_form_optimum(profiles: list[CheckpointProfile]) -> None:
    plan = plan_stagger(profiles, resolution_ms=1)
    interval = profiles[0].interval_ms
    expected = max(1, math.ceil(sum(p.duration_ms for p in profiles) / interval))
    assert plan.optimum_concurrent == expected
    assert plan.peak_concurrent == expected
    assert simulated_peak(plan.phases_ms, profiles) == expected
    assert plan.peak_concurrent >= plan.lower_bound_concurrent
    assert plan.peak_bytes >= plan.lower_bound_bytes
    assert all(0 <= plan.phases_ms[p.job_id] < interval for p in profiles)


unequal_jobs = st.lists(
    st.integers(2, 6).flatmap(lambda t: st.tuples(st.just(t), st.integers(1, t))),
    min_size=2,
    max_size=4,
).map(lambda rows: [CheckpointProfile(f"j{i}", t, d, 1) for i, (t, d) in enumerate(rows)])


@settings(max_examples=40, deadline=None)
@given(unequal_jobs)
def test_unequal_intervals_exact_search_matches_brute_force(
    profiles: list[CheckpointProfile],
) -> None:
    plan = plan_stagger(profiles, resolution_ms=1)
    assert plan.peak_concurrent >= plan.lower_bound_concurrent
    assert simulated_peak(plan.phases_ms, profiles) == plan.peak_concurrent
    if plan.method in ("branch-and-bound", "wrap-around"):
        assert plan.optimum_concurrent == brute_force_optimum(profiles) == plan.peak_concurrent


@settings(max_examples=30, deadline=None)
@given(equal_jobs)
def test_plans_are_deterministic_and_order_free(profiles: list[CheckpointProfile]) -> None:
    first = plan_stagger(profiles, resolution_ms=1)
    assert plan_stagger(list(reversed(profiles)), resolution_ms=1) == first


def test_three_equal_jobs_half_an_interval_each() -> None:
    profiles = [CheckpointProfile(f"j{i}", 10_000, 5_000, 1 << 20) for i in range(3)]
    plan = plan_stagger(profiles)
    assert plan.optimum_concurrent == plan.peak_concurrent == 2
    assert aligned_plan(profiles).peak_concurrent == 3
    assert plan.method == "wrap-around"


def test_slack_is_shared_out_between_short_checkpoints() -> None:
    profiles = [CheckpointProfile(f"j{i}", 12_000, 1_000) for i in range(3)]
    plan = plan_stagger(profiles)
    assert plan.peak_concurrent == 1
    assert sorted(plan.phases_ms.values()) == [0, 4_000, 8_000]


def test_bytes_step_keeps_big_jobs_apart() -> None:
    # Count optimum 2 either way; the two big jobs must not be the overlapping pair.
    profiles = [
        CheckpointProfile("big-a", 10, 5, 100),
        CheckpointProfile("big-b", 10, 5, 100),
        CheckpointProfile("small", 10, 5, 1),
    ]
    plan = plan_stagger(profiles, resolution_ms=1)
    assert plan.peak_concurrent == 2
    assert plan.peak_bytes == 101


def test_unequal_intervals_meet_the_lower_bound_when_they_fit() -> None:
    profiles = [CheckpointProfile("a", 4_000, 1_000), CheckpointProfile("b", 8_000, 2_000)]
    plan = plan_stagger(profiles, resolution_ms=1_000)
    assert plan.peak_concurrent == plan.lower_bound_concurrent == plan.optimum_concurrent == 1
    assert plan.method == "branch-and-bound"


def _overlap_ms(profiles: list[CheckpointProfile], phases_ms: list[int], step_ms: int = 100) -> int:
    """Time two or more jobs are in flight together over the hyperperiod (a sweep)."""
    horizon = math.lcm(*(p.interval_ms for p in profiles))
    time = np.arange(0, horizon, step_ms)
    flying = sum(
        ((time - phase) % p.interval_ms < p.duration_ms).astype(int)
        for p, phase in zip(profiles, phases_ms, strict=True)
    )
    return int((flying >= 2).sum()) * step_ms


def test_where_jobs_must_meet_they_meet_for_as_short_a_time_as_the_peaks_allow() -> None:
    """60 s and 90 s jobs with 20 s checkpoints must overlap (20 + 20 > their common 30 s),
    so every phase ties on the peak count: they are still set apart, not both at 0."""
    profiles = [CheckpointProfile("a", 60_000, 20_000), CheckpointProfile("b", 90_000, 20_000)]
    plan = plan_stagger(profiles)
    assert plan.peak_concurrent == 2
    planned = [plan.phases_ms["a"], plan.phases_ms["b"]]
    assert _overlap_ms(profiles, planned) == 10_000  # per 180 s
    assert _overlap_ms(profiles, [0, 0]) == 20_000  # what the smallest phases gave
    # One job added beside a running one is set apart the same way.
    phase, peak, _ = best_phase([(profiles[0], 0)], profiles[1])
    assert peak == 2
    assert _overlap_ms(profiles, [0, phase]) == 10_000


def test_no_optimum_is_claimed_over_a_truncated_horizon() -> None:
    """30 min and 30 min + 100 ms: the hyperperiod is far past the horizon evaluated, and
    the two jobs drift 100 ms a lap, so they meet on some later lap — a plan whose first
    slots show one checkpoint at a time is not shown optimal."""
    plan = plan_stagger(
        [CheckpointProfile("a", 1_800_000, 1_000), CheckpointProfile("b", 1_800_100, 1_000)]
    )
    assert not plan.exact_horizon
    assert plan.peak_concurrent == 1  # over the slots evaluated
    assert plan.optimum_concurrent is None


def test_durations_round_up_to_the_grid_and_cap_at_the_interval() -> None:
    plan = plan_stagger(
        [CheckpointProfile("a", 1_000, 1), CheckpointProfile("b", 1_000, 5_000)],
        resolution_ms=100,
    )
    assert plan.durations_ms == {"a": 100, "b": 1_000}
    assert any("always checkpointing" in note for note in plan.notes)
    assert plan.peak_concurrent == 2


def test_first_trigger_after() -> None:
    plan = plan_stagger([CheckpointProfile("a", 1_000, 100), CheckpointProfile("b", 1_000, 100)])
    phase_b = plan.phases_ms["b"]
    assert plan.first_trigger_ms("b", 0) == phase_b
    assert plan.first_trigger_ms("b", phase_b + 1) == phase_b + 1_000


def test_empty_plan() -> None:
    plan = plan_stagger([])
    assert plan.phases_ms == {} and plan.peak_concurrent == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_id": "", "interval_ms": 1, "duration_ms": 0}, "job_id"),
        ({"job_id": "x", "interval_ms": 0, "duration_ms": 0}, "job x: interval_ms"),
        ({"job_id": "x", "interval_ms": 5, "duration_ms": -1}, "job x: duration_ms"),
        ({"job_id": "x", "interval_ms": 5, "duration_ms": 1, "size_bytes": -3}, "size_bytes"),
    ],
)
def test_bad_profiles_name_the_job_and_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(StaggerInputError, match=message):
        CheckpointProfile(**kwargs)  # type: ignore[arg-type]


def test_duplicate_jobs_and_missing_durations_are_errors() -> None:
    with pytest.raises(StaggerInputError, match="duplicate"):
        plan_stagger([CheckpointProfile("a", 5, 1), CheckpointProfile("a", 5, 1)])
    with pytest.raises(StaggerInputError, match=r"job\(s\) b"):
        profiles_from_mapping({"a": 5, "b": 5}, {"a": 1})


def test_peak_concurrent_sweep() -> None:
    assert peak_concurrent([(0, 2), (2, 4)]) == 1  # touching windows do not overlap
    assert peak_concurrent([(0, 3), (1, 4), (2, 5), (4, 6)]) == 3
    assert peak_concurrent([(1, 1)]) == 0
    with pytest.raises(StaggerInputError):
        peak_concurrent([(2, 1)])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(-50, 50), min_size=1, max_size=40).flatmap(
        lambda values: st.tuples(st.just(values), st.integers(1, len(values)))
    )
)
def test_circular_window_max_matches_a_loop(case: tuple[list[int], int]) -> None:
    values, width = case
    n = len(values)
    expected = [max(values[(s + j) % n] for j in range(width)) for s in range(n)]
    got = circular_window_max(np.array(values, dtype=np.float64), width)
    assert got.tolist() == expected


def test_closed_forms() -> None:
    assert optimum_equal_intervals(10, [5, 5, 5]) == 2
    assert optimum_equal_intervals(10, [0, 0]) == 1
    assert optimum_equal_intervals(10, []) == 0
    assert lower_bound_concurrent([4, 8], [3, 7]) == 2
    with pytest.raises(StaggerInputError):
        optimum_equal_intervals(10, [11])
