"""The autoscaler's decision rule and guard rails on constructed observations (jobs the
rule was not written for: test_autoscaler_unseen_jobs.py; the collector and the loop
over recorded replies: test_autoscaler_replies.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubesage.adapters.flink.autoscaler import (
    Autoscaler,
    AutoscalerSettings,
    GuardRailMemory,
    decide,
)
from kubesage.adapters.flink.observation import Observation, VertexObservation
from kubesage.adapters.flink.slot_sharing import GroupNeed, share_slots
from kubesage.core.errors import ConfigError

from .autoscaler_support import (
    SETTINGS,
    SINK,
    SLOW,
    SOURCE,
    observe,
    pipeline,
    reasons_of,
    slow_of,
)


@pytest.mark.parametrize(
    ("rate", "capacity", "current", "expected"),
    [
        # ceil(rate / capacity / 0.8), from an unloaded or a backpressured start
        (40.0, 20.0, 4, 3),  # scale-down is delayed, see below; here: utilisation 0.5 → 3
        (100.0, 10.0, 4, 13),
        (10.0, 20.0, 1, 1),
        (64.0, 20.0, 8, 4),
    ],
)
def test_parallelism_is_target_over_true_rate_and_utilisation(
    rate: float, capacity: float, current: int, expected: int
) -> None:
    settings = replace(SETTINGS, scale_down_delay_s=0.0)
    decision = Autoscaler(settings).decide(
        observe(pipeline(rate=rate, capacity=capacity, slow_parallelism=current, pending=0.0))
    )
    slow = next(v for v in decision.vertices if v.vertex_id == SLOW)
    assert slow.ideal == expected
    assert slow.true_rate_per_subtask == pytest.approx(capacity)


def test_backpressured_source_demand_comes_from_backlog_growth() -> None:
    # at parallelism 1 the slow vertex passes 20 rec/s; the backlog grows by 20 rec/s
    decision = Autoscaler(SETTINGS).decide(observe(pipeline(pending=0.0)))
    assert decision.action == "rescale"
    assert decision.changes == {SLOW: 3}
    slow = next(v for v in decision.vertices if v.vertex_id == SLOW)
    assert slow.target_records_per_s == pytest.approx(40.0)
    assert any("scale up to 3" in reason for reason in slow.reasons)


def test_backlog_adds_catch_up_rate() -> None:
    settings = replace(SETTINGS, catch_up_s=100.0)
    vertices = pipeline(rate=40.0, slow_parallelism=3, pending=2000.0, growth=0.0)
    decision = Autoscaler(settings).decide(observe(vertices))
    slow = next(v for v in decision.vertices if v.vertex_id == SLOW)
    assert slow.target_records_per_s == pytest.approx(40.0 + 2000.0 / 100.0)


def test_hash_input_aligns_to_a_divisor_of_max_parallelism() -> None:
    vertices = pipeline(
        rate=100.0, capacity=20.0, hash_input=True, max_parallelism=120, pending=0.0
    )
    decision = Autoscaler(SETTINGS).decide(observe(vertices))
    # ceil(100 / 20 / 0.8) = 7 → 8, the next divisor of 120
    assert slow_of(decision) == 8
    slow = next(v for v in decision.vertices if v.vertex_id == SLOW)
    assert any("divisor of max parallelism 120" in r for r in slow.reasons)


def test_clamped_to_max_parallelism() -> None:
    settings = replace(SETTINGS, max_parallelism=4)
    decision = Autoscaler(settings).decide(
        observe(pipeline(rate=400.0, capacity=20.0, pending=0.0))
    )
    assert slow_of(decision) == 4


def test_a_sources_backlog_counts_in_the_records_its_chain_emits() -> None:
    # Kafka source chained into a filter that keeps 10 %: the source reads 1000 rec/s
    # and the task emits 100; the backlog (Kafka records) grows by 1000 rec/s. Demand in
    # the task's output is 100 + 1000 × 0.1: each vertex needs 2 subtasks at busy 500,
    # not 7 for a demand of 1100 counted in two units at once.
    source = VertexObservation(
        SOURCE, "Source: kafka -> filter", 1, 128,
        records_in_per_s=0.0, records_out_per_s=100.0, busy_ms_per_s=500.0,
        pending_records=10_000.0, pending_growth_per_s=1000.0, output_per_pending=0.1,
    )  # fmt: skip
    sink = VertexObservation(
        SINK, "sink", 1, 128, inputs=(SOURCE,),
        records_in_per_s=100.0, records_out_per_s=0.0, busy_ms_per_s=500.0,
    )  # fmt: skip
    decision = Autoscaler(SETTINGS).decide(observe((source, sink)))
    assert decision.changes == {SOURCE: 2, SINK: 2}
    assert source.backlog_as_output == (1_000.0, 100.0)


def test_consumers_of_a_split_stream_each_get_their_share_of_the_target() -> None:
    # The source emits 100 rec/s split 50/50 between A and B (side outputs), each at
    # busy 500 ms/s with one subtask: each needs its 50, not the whole 100.
    source = VertexObservation(
        SOURCE, "Source", 1, 128, records_in_per_s=0.0, records_out_per_s=100.0,
        busy_ms_per_s=200.0, pending_records=0.0, pending_growth_per_s=0.0,
    )  # fmt: skip
    split = tuple(
        VertexObservation(
            name,
            name,
            1,
            128,
            inputs=(SOURCE,),
            records_in_per_s=50.0,
            records_out_per_s=50.0,
            busy_ms_per_s=500.0,
        )
        for name in ("A", "B")
    )
    decision = Autoscaler(SETTINGS).decide(observe((source, *split)))
    assert decision.changes == {}
    targets = {v.vertex_id: v.target_records_per_s for v in decision.vertices}
    assert targets["A"] == pytest.approx(50.0) and targets["B"] == pytest.approx(50.0)


def test_settling_is_timed_by_the_jobmanagers_clock() -> None:
    # This host's clock runs 10 minutes ahead of the JobManager's: by it the restart
    # was long ago, by the JobManager's own "now" it was 5 s ago.
    skewed = replace(observe(pipeline(pending=0.0), time_s=700.0), running_for_s=5.0)
    decision = Autoscaler(SETTINGS).decide(skewed)
    assert decision.action == "skip"
    assert decision.reasons == ("job (re)started 5 s ago; metrics count after 20 s",)


def test_key_group_alignment_stays_within_the_clamp() -> None:
    # ceil(1000 / 20 / 0.8) = 63, clamped to 10; the next divisor of 32 from 10 is 16,
    # over the bound: the clamped value stands (uneven key groups, not too many subtasks).
    settings = replace(SETTINGS, max_parallelism=10)
    vertices = pipeline(
        rate=1000.0, capacity=20.0, hash_input=True, max_parallelism=32, pending=0.0
    )
    decision = Autoscaler(settings).decide(observe(vertices))
    assert slow_of(decision) == 10


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (observe(pipeline(), state="RESTARTING"), "job is RESTARTING"),
        (observe(pipeline(), time_s=10.0, running_since_s=0.0), "metrics count after 20 s"),
        (observe(pipeline(), window_s=0.0), "no measurement window"),
        (
            observe(pipeline(), time_s=35.0, running_since_s=0.0, window_s=20.0),
            "window starts 15 s after the (re)start",
        ),
        (
            observe(tuple(replace(v, busy_ms_per_s=None) for v in pipeline())),
            "no vertex reports busy time",
        ),
        (
            observe(tuple(replace(v, busy_ms_per_s=float("nan")) for v in pipeline())),
            "no vertex reports busy time",
        ),
        (
            observe(tuple(replace(v, status="INITIALIZING") for v in pipeline())),
            "not RUNNING yet",
        ),
    ],
)
def test_skips_say_why(observation: Observation, reason: str) -> None:
    decision = Autoscaler(SETTINGS).decide(observation)
    assert decision.action == "skip"
    assert reason in decision.reasons[0]
    assert decision.changes == {}


def test_waits_for_stable_proposals() -> None:
    autoscaler = Autoscaler(replace(SETTINGS, stable_observations=2))
    first = autoscaler.decide(observe(pipeline(pending=0.0)))
    assert first.action == "hold"
    assert any("waiting for stable metrics" in r for v in first.vertices for r in v.reasons)
    second = autoscaler.decide(observe(pipeline(pending=0.0), time_s=105.0))
    assert second.changes == {SLOW: 3}


def test_decide_is_pure_and_hands_back_its_memory() -> None:
    settings = replace(SETTINGS, stable_observations=2)
    observation = observe(pipeline(pending=0.0))
    empty = GuardRailMemory()
    first, memory = decide(observation, empty, settings)
    assert first.action == "hold" and empty == GuardRailMemory()  # the input is not touched
    assert memory.of(SLOW).ideals == (3,)
    again, same = decide(observation, empty, settings)  # same inputs, same answer
    assert again == first and same == memory
    second, memory = decide(replace(observation, time_s=105.0), memory, settings)
    assert second.changes == {SLOW: 3}
    after = memory.after_rescale(110.0, {SLOW: 1}, second.changes)
    assert after.of(SLOW).ideals == () and after.of(SLOW).last_direction == 1
    assert after.of(SLOW).last_rescale_s == 110.0


def test_proposals_on_opposite_sides_do_not_rescale() -> None:
    autoscaler = Autoscaler(replace(SETTINGS, stable_observations=2, scale_down_delay_s=0.0))
    autoscaler.decide(observe(pipeline(rate=20.0, slow_parallelism=3, pending=0.0)))  # → 2
    flip = autoscaler.decide(
        observe(pipeline(rate=80.0, slow_parallelism=3, pending=0.0), time_s=105.0)
    )  # → 5
    assert flip.action == "hold"
    assert "need 2 on the same side of 3" in reasons_of(flip, SLOW)


def test_proposals_agreeing_on_direction_make_the_smallest_change() -> None:
    autoscaler = Autoscaler(replace(SETTINGS, stable_observations=2))
    autoscaler.decide(observe(pipeline(rate=40.0, pending=0.0)))  # → 3
    second = autoscaler.decide(observe(pipeline(rate=80.0, pending=0.0), time_s=105.0))  # → 5
    assert second.changes == {SLOW: 3}
    assert "last proposals [3, 5]: the smallest change, 3" in reasons_of(second, SLOW)


def test_utilisation_within_boundary_keeps_parallelism() -> None:
    # 3 subtasks of 20 rec/s at 45 rec/s: utilisation 0.75, inside 0.7–0.9
    decision = Autoscaler(SETTINGS).decide(
        observe(pipeline(rate=45.0, slow_parallelism=3, pending=0.0))
    )
    assert decision.action == "hold"
    slow = next(v for v in decision.vertices if v.vertex_id == SLOW)
    assert any("within 0.70–0.90" in r for r in slow.reasons)


def test_scale_down_is_delayed() -> None:
    autoscaler = Autoscaler(replace(SETTINGS, scale_down_delay_s=300.0))
    quiet = pipeline(rate=10.0, slow_parallelism=4, pending=0.0)
    first = autoscaler.decide(observe(quiet, time_s=100.0))
    assert first.action == "hold"
    assert any("scale-down to 1 deferred" in r for v in first.vertices for r in v.reasons)
    assert autoscaler.decide(observe(quiet, time_s=399.0)).action == "hold"
    assert autoscaler.decide(observe(quiet, time_s=401.0)).changes == {SLOW: 1}


def test_a_gap_in_measurements_restarts_the_scale_down_delay() -> None:
    # Proposed at 100 s, then the slow vertex's busy time is missing for minutes: one
    # fresh observation after the gap is a new proposal, not 400 s of one.
    autoscaler = Autoscaler(replace(SETTINGS, scale_down_delay_s=300.0))
    quiet = pipeline(rate=10.0, slow_parallelism=4, pending=0.0)
    unmeasured = tuple(replace(v, busy_ms_per_s=None) if v.vertex_id == SLOW else v for v in quiet)
    autoscaler.decide(observe(quiet, time_s=100.0))
    for time_s in (110.0, 300.0, 495.0):
        held = autoscaler.decide(observe(unmeasured, time_s=time_s))
        assert held.changes == {}
    after = autoscaler.decide(observe(quiet, time_s=505.0))
    assert after.changes == {}
    assert any("proposed for 0 s" in r for v in after.vertices for r in v.reasons)
    assert autoscaler.decide(observe(quiet, time_s=806.0)).changes == {SLOW: 1}


def test_no_oscillation_after_a_rescale() -> None:
    settings = replace(SETTINGS, scale_down_delay_s=0.0, oscillation_window_s=600.0)
    autoscaler = Autoscaler(settings)
    autoscaler.record_rescale(100.0, {SLOW: 1}, {SLOW: 4})
    decision = autoscaler.decide(
        observe(pipeline(rate=10.0, slow_parallelism=4, pending=0.0), time_s=200.0)
    )
    assert decision.action == "hold"
    assert any("would reverse the rescale" in r for v in decision.vertices for r in v.reasons)
    later = autoscaler.decide(
        observe(pipeline(rate=10.0, slow_parallelism=4, pending=0.0), time_s=800.0)
    )
    assert later.changes == {SLOW: 1}


def test_never_asks_for_more_slots_than_exist() -> None:
    decision = Autoscaler(SETTINGS).decide(
        observe(pipeline(rate=400.0, capacity=20.0, pending=0.0), slots_total=6, slots_free=5)
    )
    assert slow_of(decision) == 6
    assert any("cluster has 6" in r for r in decision.reasons)


def test_spare_slots_go_to_the_slot_sharing_group_that_wants_them() -> None:
    # the source's group needs its 1 slot; the bottleneck's group wants 12 of the 10
    vertices = tuple(
        replace(v, slot_sharing_group="sources" if v.vertex_id == SOURCE else "work")
        for v in pipeline(rate=90.0, capacity=9.0, pending=0.0)[:2]
    )
    settings = replace(SETTINGS, target_utilisation=0.9, utilisation_boundary=0.05)
    decision = Autoscaler(settings).decide(observe(vertices, slots_total=10, slots_free=8))
    assert decision.changes == {SLOW: 9}  # not 5: an even split would strand 4 slots
    assert "capped at 9: only 10 task slots for this job" in reasons_of(decision, SLOW)
    assert any("but the cluster has 10 for this job" in r for r in decision.reasons)


def test_slots_are_water_filled_between_growing_groups() -> None:
    wanted = {"a": GroupNeed(held=1, wanted=3), "b": GroupNeed(held=2, wanted=20)}
    wanted["c"] = GroupNeed(held=4, wanted=2)  # scales down: its 2 slots go to the others
    assert share_slots(wanted, 12) == {"a": 3, "b": 7, "c": 2}
    assert share_slots({"a": GroupNeed(5, 9), "b": GroupNeed(1, 9)}, 4) == {"a": 5, "b": 1}


def test_forecast_scales_ahead_of_observed_rate() -> None:
    vertices = pipeline(rate=40.0, slow_parallelism=3, pending=0.0, forecast=80.0)
    decision = Autoscaler(SETTINGS).decide(observe(vertices))
    assert decision.changes == {SLOW: 5}  # ceil(80 / 20 / 0.8)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target_utilisation", 0.0),
        ("stable_observations", 0),
        ("min_parallelism", 0),
        ("saturated_step", 1.0),
        ("max_parallelism", 0),
    ],
)
def test_bad_settings_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        AutoscalerSettings(**{field: value})  # type: ignore[arg-type]
