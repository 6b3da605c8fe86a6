"""The autoscaler on jobs its rule was not written for: missing metrics, saturated
sources, chains that report no output, idle and stalled vertices."""

from __future__ import annotations

from dataclasses import replace

from kubesage.adapters.flink.autoscaler import (
    Autoscaler,
    AutoscalerSettings,
)
from kubesage.adapters.flink.observation import VertexObservation

from .autoscaler_support import (
    SETTINGS,
    SINK,
    SLOW,
    SOURCE,
    observe,
    pipeline,
    proposal,
    reasons_of,
)


def table_job(
    *, capacity: float = 20.0, udf_parallelism: int = 1, demand: float = 60.0
) -> tuple[VertexObservation, ...]:
    """The shape a user's Table/SQL job reported: a datagen source with no busy time and
    no backlog metric → a Python UDF, the bottleneck → a sink (chaining off).

    The source offers ``demand`` rec/s but emits only what the UDF takes: backpressured.
    """
    throughput = min(demand, capacity * udf_parallelism)
    saturated = demand > capacity * udf_parallelism
    return (
        VertexObservation(
            "src",
            "Source: src[1]",
            1,
            128,
            records_out_per_s=throughput,
            busy_ms_per_s=None,  # Flink reports NaN
            backpressured_ms_per_s=950.0 if saturated else 0.0,
        ),
        VertexObservation(
            "udf",
            "PythonCalc[2]",
            udf_parallelism,
            128,
            inputs=("src",),
            records_in_per_s=throughput,
            records_out_per_s=throughput,
            busy_ms_per_s=1000.0 * throughput / (capacity * udf_parallelism),
            backpressured_ms_per_s=0.0,
        ),
        VertexObservation(
            "snk",
            "Sink: snk[3]",
            2,
            128,
            inputs=("udf",),
            records_in_per_s=throughput,
            records_out_per_s=0.0,
            busy_ms_per_s=10.0,
        ),
    )


def test_a_source_without_busy_time_is_held_and_the_rest_still_decides() -> None:
    decision = Autoscaler(AutoscalerSettings(stable_observations=1)).decide(observe(table_job()))
    assert decision.action == "rescale"
    assert proposal(decision, "src") == 1
    assert "busy time (busyTimeMsPerSecond) not reported: source held" in reasons_of(
        decision, "src"
    )
    assert proposal(decision, "udf") == 2  # probing ×2: the source's demand is unreadable
    assert any("metrics missing, held: Source: src[1]" in r for r in decision.reasons)


def test_a_saturated_source_is_probed_step_by_step_until_the_demand_shows() -> None:
    settings = AutoscalerSettings(stable_observations=1, scale_down_delay_s=0.0)
    # demand 60 rec/s, 20 rec/s per UDF subtask: ideal ceil(60 / (20 × 0.8)) = 4
    first = Autoscaler(settings).decide(observe(table_job(udf_parallelism=1)))
    assert first.changes == {"udf": 2}
    assert any(r.startswith("saturated: Source: src[1]") for r in first.reasons)
    assert "lower bound (saturated source): ×2 to 2" in reasons_of(first, "udf")
    assert proposal(first, "snk") == 2  # a lower bound never scales anything down
    assert "no scale-down" in reasons_of(first, "snk")
    second = Autoscaler(settings).decide(observe(table_job(udf_parallelism=2)))
    assert second.changes == {"udf": 4}
    # at 4 the UDF keeps up (75 % busy): the source is no longer backpressured, its
    # output is the demand, and the ordinary rule keeps 4
    third = Autoscaler(settings).decide(observe(table_job(udf_parallelism=4)))
    assert proposal(third, "udf") == 4
    assert not any(r.startswith("saturated") for r in third.reasons)
    assert "no backlog metric: demand taken as its output 60.0 rec/s" in reasons_of(third, "src")


def test_a_busy_source_without_backlog_probes_itself() -> None:
    # datagen chained with the UDF: the source vertex is its own bottleneck
    source = VertexObservation(
        "src", "Source: src -> PythonCalc", 1, 128, records_out_per_s=20.0, busy_ms_per_s=990.0
    )
    sink = VertexObservation(
        "snk", "Sink", 1, 128, inputs=("src",), records_in_per_s=20.0, busy_ms_per_s=5.0
    )
    decision = Autoscaler(AutoscalerSettings(stable_observations=1)).decide(observe((source, sink)))
    assert decision.changes == {"src": 2}
    assert "busy 990 ms/s" in reasons_of(decision, "src")


def test_a_vertex_without_records_in_is_held_and_says_which_metric() -> None:
    vertices = list(pipeline(pending=0.0))
    vertices[2] = replace(vertices[2], records_in_per_s=None)
    decision = Autoscaler(SETTINGS).decide(observe(tuple(vertices)))
    assert decision.changes == {SLOW: 3}
    assert "records in (numRecordsIn) not reported: held" in reasons_of(decision, SINK)


def test_a_chain_reporting_no_output_is_read_through_its_consumer() -> None:
    # "Source: src[1] -> PythonCalc[2]" fully chained: Flink reports 0 records out
    vertices = list(pipeline(rate=40.0, slow_parallelism=1))
    vertices[0] = replace(vertices[0], records_out_per_s=0.0)
    decision = Autoscaler(AutoscalerSettings(stable_observations=1)).decide(
        observe(tuple(vertices))
    )
    assert "records out reads 0 while its consumers receive 20.0 rec/s" in reasons_of(
        decision, SOURCE
    )
    # 20 rec/s at 100 % busy, the source's demand taken as 20: ceil(20 / (20 × 0.8)) = 2
    assert proposal(decision, SLOW) == 2


def test_unknown_demand_leaves_consumers_on_what_they_receive() -> None:
    vertices = list(pipeline(rate=40.0, slow_parallelism=1))
    vertices[0] = replace(vertices[0], records_out_per_s=None, records_in_per_s=None)
    vertices[1] = replace(vertices[1], records_in_per_s=None)
    decision = Autoscaler(AutoscalerSettings(stable_observations=1)).decide(
        observe(tuple(vertices))
    )
    assert "records out not reported: demand unknown" in reasons_of(decision, SOURCE)
    assert "records in (numRecordsIn) not reported: held" in reasons_of(decision, SLOW)
    assert "upstream demand unknown: target is what it receives now" in reasons_of(decision, SINK)
    assert decision.changes == {}


def test_an_idle_job_scales_down_to_the_minimum_after_the_delay() -> None:
    idle = tuple(
        replace(v, records_in_per_s=0.0, records_out_per_s=0.0, busy_ms_per_s=0.0)
        for v in pipeline(slow_parallelism=3, pending=0.0, growth=0.0)
    )
    autoscaler = Autoscaler(replace(SETTINGS, scale_down_delay_s=30.0))
    first = autoscaler.decide(observe(idle, time_s=100.0))
    assert first.action == "hold"
    assert "idle: no records in the window and no demand" in reasons_of(first, SLOW)
    assert "scale-down to 1 deferred" in reasons_of(first, SLOW)
    assert autoscaler.decide(observe(idle, time_s=131.0)).changes == {SLOW: 1}


def test_a_stalled_vertex_with_demand_is_not_called_idle() -> None:
    stalled = list(pipeline(slow_parallelism=2, pending=500.0, growth=40.0))
    stalled[1] = replace(stalled[1], records_in_per_s=0.0, busy_ms_per_s=0.0)
    decision = Autoscaler(SETTINGS).decide(observe(tuple(stalled)))
    assert proposal(decision, SLOW) == 2
    assert "no records processed in the window" in reasons_of(decision, SLOW)


def chained_source_sink(busy_ms: float) -> tuple[VertexObservation, ...]:
    """``Source: gen -> Sink: out`` as one vertex: no network input or output, so Flink
    counts no records in or out however busy it is."""
    return (
        VertexObservation(
            "gen",
            "Source: gen -> Sink: out",
            4,
            128,
            records_in_per_s=0.0,
            records_out_per_s=0.0,
            busy_ms_per_s=busy_ms,
            backpressured_ms_per_s=0.0,
        ),
    )


def test_a_busy_vertex_that_counts_no_records_is_held_not_idle() -> None:
    settings = AutoscalerSettings(stable_observations=1, scale_down_delay_s=0.0)
    for busy_ms in (950.0, 600.0):
        decision = Autoscaler(settings).decide(observe(chained_source_sink(busy_ms)))
        assert decision.changes == {}
        reasons = reasons_of(decision, "gen")
        assert f"busy {busy_ms:.0f} ms/s but no records counted in the window: held" in reasons
        assert "idle" not in reasons


def test_a_vertex_counting_no_records_at_low_busy_time_is_idle() -> None:
    settings = AutoscalerSettings(stable_observations=1, scale_down_delay_s=0.0)
    decision = Autoscaler(settings).decide(observe(chained_source_sink(20.0)))
    assert decision.changes == {"gen": 1}
    assert "idle: no records in the window and no demand (busy 20 ms/s)" in reasons_of(
        decision, "gen"
    )


def test_records_at_zero_busy_time_are_an_unbounded_true_rate() -> None:
    vertices = list(pipeline(rate=10.0, capacity=1000.0, pending=0.0))
    vertices[1] = replace(vertices[1], parallelism=8, busy_ms_per_s=0.0)
    autoscaler = Autoscaler(replace(SETTINGS, scale_down_delay_s=30.0))
    first = autoscaler.decide(observe(tuple(vertices), time_s=100.0))
    reasons = reasons_of(first, SLOW)
    assert "busy 0 ms/s at 10.0 rec/s: true rate unbounded" in reasons
    assert "no records processed" not in reasons
    assert "scale-down to 1 deferred" in reasons
    assert autoscaler.decide(observe(tuple(vertices), time_s=131.0)).changes == {SLOW: 1}


def test_a_lower_bound_demand_never_scales_an_unmeasurable_vertex_down() -> None:
    # a saturated source (no backlog metric, backpressured) in front of a map whose
    # busy time reads 0: its true rate is unbounded, but the demand is only a lower bound
    source = VertexObservation(
        "src",
        "Source",
        1,
        128,
        records_out_per_s=10.0,
        busy_ms_per_s=100.0,
        backpressured_ms_per_s=900.0,
    )
    mapper = VertexObservation(
        "map", "map", 8, 128, inputs=("src",), records_in_per_s=10.0, busy_ms_per_s=0.0
    )
    settings = AutoscalerSettings(stable_observations=1, scale_down_delay_s=0.0)
    decision = Autoscaler(settings).decide(observe((source, mapper)))
    assert proposal(decision, "map") == 8
    assert "demand is a lower bound (saturated source): no scale-down" in reasons_of(
        decision, "map"
    )


def paced_job(*, slow_parallelism: int, backpressured_ms: float) -> tuple[VertexObservation, ...]:
    """A rate-limited source without a backlog metric (it sleeps between records, which
    Flink counts as busy time) → ``slow`` (10 rec/s per subtask) → a sink."""
    rate = min(18.0, 10.0 * slow_parallelism)
    return (
        VertexObservation(
            "src",
            "Source: sequence -> pace",
            1,
            1,
            records_out_per_s=rate,
            busy_ms_per_s=1000.0 - backpressured_ms,
            backpressured_ms_per_s=backpressured_ms,
        ),
        VertexObservation(
            "slow",
            "slow",
            slow_parallelism,
            128,
            inputs=("src",),
            records_in_per_s=rate,
            records_out_per_s=rate,
            busy_ms_per_s=1000.0 * rate / (10.0 * slow_parallelism),
        ),
    )


def test_consumers_of_a_source_busy_on_its_own_scale_down_after_an_overshooting_probe() -> None:
    settings = replace(SETTINGS, scale_down_delay_s=0.0)
    # held back while it catches up: the bottleneck is probed ×2 and not scaled down
    held = Autoscaler(settings).decide(observe(paced_job(slow_parallelism=2, backpressured_ms=997)))
    assert held.changes == {"slow": 4}
    assert any(r.startswith("saturated: Source: sequence -> pace") for r in held.reasons)
    # caught up, its rate limit keeps it busy: its consumers' demand (18 rec/s) is exact,
    # so the probe's overshoot comes back to ceil(18 / (10 × 0.8)) = 3
    own = Autoscaler(settings).decide(observe(paced_job(slow_parallelism=4, backpressured_ms=0)))
    assert own.changes == {"slow": 3}
    assert "lower bound" not in reasons_of(own, "slow")
    assert "its own bottleneck" in reasons_of(own, "src")
    assert any(r.startswith("saturated by its own busy time") for r in own.reasons)
