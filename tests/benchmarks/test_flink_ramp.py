"""The ramp scenario's pieces that need no cluster: the rate schedule and the tally.

``benchmarks/flink_support/rate_schedule.py`` drives the sample job's source;
``ramp_harness.py`` and ``ramp_scenario.py`` measure reactive against predictive
scaling (``flink_autoscale.py --scenario ramp``; the run itself is in
``test_benchmarks_run.py``).
"""

from __future__ import annotations

import argparse

import pytest

from benchmarks.flink_support.ramp_harness import PolicyTally, Sample, slots_held
from benchmarks.flink_support.ramp_scenario import RampOptions, compare, schedule_args
from benchmarks.flink_support.rate_schedule import SHAPES, parse_schedule
from kubesage.adapters.flink.observation import Observation, VertexObservation
from kubesage.core.forecast.seasonal import SeasonalForecaster
from kubesage.core.forecast.trend import TrendForecaster


def test_points_are_piecewise_linear_then_held() -> None:
    schedule = parse_schedule("0:20, 60:20, 180:60")
    assert [schedule.rate_at(t) for t in (-5, 0, 60, 120, 180, 999)] == [20, 20, 20, 40, 60, 60]
    assert schedule.records_due(60) == pytest.approx(1_200)
    assert schedule.records_due(180) == pytest.approx(1_200 + 120 * 40)
    assert schedule.records_due(200) == pytest.approx(6_000 + 20 * 60)
    assert (schedule.duration_s, schedule.peak_rate) == (180, 60)


@pytest.mark.parametrize("text", ["0:20,60:20,180:60", "0:5,30:0,40:0,50:8", "ramp", "daily"])
def test_time_of_inverts_records_due(text: str) -> None:
    schedule = parse_schedule(text, peak_rate=40.0)
    for records in (0.5, 1, 17, 250, 1_000, 4_321, 20_000):
        assert schedule.records_due(schedule.time_of(records)) == pytest.approx(records)
    times = [schedule.time_of(n) for n in range(0, 3_000, 7)]
    assert times == sorted(times)


@pytest.mark.parametrize(("name", "duration_s"), [("ramp", None), ("daily", 120.0)])
def test_named_shapes_scale_to_the_peak_and_the_length(name: str, duration_s: float | None) -> None:
    schedule = parse_schedule(name, peak_rate=48.0, duration_s=duration_s)
    assert schedule.peak_rate == pytest.approx(48.0)
    assert min(rate for _, rate in schedule.points) > 0
    assert len(schedule.points) == len(SHAPES[name])
    if duration_s is not None:
        assert schedule.duration_s == duration_s


@pytest.mark.parametrize(
    ("text", "peak_rate", "words"),
    [
        ("10:5,20:6", None, "starts at time 0"),
        ("0:5,0:6", None, "must increase"),
        ("0:5,10:-1,20:3", None, "≥ 0"),
        ("0:5,10:0", None, "last rate"),
        ("0:5,soon:6", None, "'soon:6' is not TIME_S:RATE"),
        ("0-5", None, "is not TIME_S:RATE"),
        ("daily", None, "needs a peak rate"),
    ],
)
def test_bad_schedules_say_what_is_wrong(text: str, peak_rate: float | None, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_schedule(text, peak_rate=peak_rate)


def test_tally_integrates_slots_backpressure_and_lag_inside_the_span() -> None:
    tally = PolicyTally(start_s=100.0, end_s=200.0)
    samples = [
        Sample(90.0, 50.0, 1_000.0, 500.0, 1),  # before the span: lag not counted
        Sample(110.0, 50.0, 11_000.0, 40.0, 1),  # 10 s of 20 inside: 5 s backpressured
        Sample(120.0, 50.0, 21_000.0, 80.0, 2),  # 10 s backpressured
        Sample(140.0, 130.0, 4_000.0, 300.0, 3),  # restarted at 130: 4 s since then
        Sample(150.0, 130.0, 4_000.0, None, 3),
        Sample(210.0, 130.0, 64_000.0, 900.0, 1),  # 60 s, 50 inside: 50 s
    ]
    for sample in samples:
        tally.add(sample)
    assert tally.backpressured_s == pytest.approx(5 + 10 + 4 + 50)
    assert tally.max_lag_records == 300.0
    assert tally.slot_seconds == pytest.approx(10 * 1 + 10 * 1 + 20 * 2 + 10 * 3 + 50 * 3)


def test_slots_held_counts_each_slot_sharing_group_once() -> None:
    vertices = (
        VertexObservation("a", "source", 1, 128),
        VertexObservation("b", "slow", 3, 128, inputs=("a",)),
        VertexObservation("c", "sink", 2, 128, inputs=("b",), slot_sharing_group="other"),
    )
    observation = Observation("job", 0.0, "RUNNING", 0.0, 0.0, vertices, 10, 5)
    assert slots_held(observation) == 3 + 2


def test_goal_needs_less_backpressure_and_lag_within_the_slot_allowance() -> None:
    reactive = {"backpressured_s": 40.0, "max_lag_records": 900, "slot_seconds": 1_000.0}
    better = {"backpressured_s": 10.0, "max_lag_records": 300, "slot_seconds": 1_090.0}
    costly = better | {"slot_seconds": 1_200.0}
    assert compare(reactive, better) == {
        "predictive_over_reactive": {
            "backpressured_s": 0.25,
            "max_lag_records": 0.333,
            "slot_seconds": 1.09,
        },
        "goal_met": True,
    }
    assert not compare(reactive, costly)["goal_met"]
    assert not compare(reactive, reactive)["goal_met"]


def ramp_options(*argv: str) -> RampOptions:
    """The options as ``flink_autoscale.py --scenario ramp`` parses them."""
    parser = argparse.ArgumentParser()
    for name, default in (("--rate", 40.0), ("--capacity", 20.0), ("--slots", 6)):
        parser.add_argument(name, type=type(default), default=default)
    RampOptions.add_arguments(parser)
    return RampOptions.from_args(parser.parse_args(argv))


def test_options_give_the_job_its_schedule_and_the_forecaster_its_horizon() -> None:
    options = ramp_options(
        "--schedule",
        "ramp",
        "--schedule-duration-s",
        "60",
        "--forecaster",
        "trend",
        "--periods",
        "1",
    )
    assert options.horizon_steps == 6  # 30 s at a 5 s tick
    forecaster = options.make_forecaster()
    assert isinstance(forecaster, TrendForecaster)
    assert (forecaster.window, forecaster.min_t_stat) == (12, 2.0)  # a minute of 5 s ticks
    arguments = schedule_args(options, 1_000.5, "ramp-reactive-0")
    assert arguments[arguments.index("--start-time") + 1] == "1000.500"
    sent = parse_schedule(arguments[arguments.index("--rate-schedule") + 1])
    assert sent == options.rate_schedule().delayed(options.lead_s)
    assert sent.duration_s == options.lead_s + 60


def test_a_delayed_schedule_holds_its_first_rate_and_reads_back_from_its_spec() -> None:
    schedule = parse_schedule("ramp", peak_rate=40.0, duration_s=100.0)
    delayed = schedule.delayed(30.0)
    assert [delayed.rate_at(t) for t in (0, 30, 50, 130)] == [10.0, 10.0, 10.0, 40.0]
    for time_s in (0.0, 37.0, 95.5, 130.0, 200.0):
        assert delayed.rate_at(time_s + 30.0) == pytest.approx(schedule.rate_at(time_s))
    assert parse_schedule(delayed.spec()) == delayed
    assert schedule.delayed(0.0) is schedule


@pytest.mark.parametrize("text", ["daily", "ramp", "0:5,30:5,60:20"])
def test_a_repeated_schedule_is_each_period_again(text: str) -> None:
    day = parse_schedule(text, peak_rate=40.0, duration_s=None if ":" in text else 120.0)
    week = day.repeated(3)
    assert week.duration_s == pytest.approx(3 * day.duration_s)
    for time_s in (0.01, 10.0, 59.0, day.duration_s * 0.7, day.duration_s - 0.01):
        for period in range(3):
            offset = period * day.duration_s
            assert week.rate_at(offset + time_s) == pytest.approx(day.rate_at(time_s), abs=0.1)
    assert week.records_due(3 * day.duration_s) == pytest.approx(
        3 * day.records_due(day.duration_s), rel=1e-3
    )
    assert parse_schedule(week.spec()) == week
    assert day.repeated(1) == day
    with pytest.raises(ValueError, match="periods must be ≥ 1"):
        day.repeated(0)


def test_by_default_a_seasonal_forecaster_reads_a_period_of_the_schedule() -> None:
    options = ramp_options()  # the daily curve three times, a seasonal forecast
    forecaster = options.make_forecaster()
    assert isinstance(forecaster, SeasonalForecaster)
    assert forecaster.period_s == options.period_schedule().duration_s == 240.0  # daily
    assert forecaster.time_slack_s == options.forecast_horizon_s == 30.0
    assert isinstance(forecaster.fallback, TrendForecaster)
    assert options.rate_schedule().duration_s == 720.0
    assert ramp_options("--periods", "2").rate_schedule().duration_s == 480.0
