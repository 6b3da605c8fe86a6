"""A streaming job whose bounded input has FINISHED keeps running: the collector measures
the rest, the decision scales the rest, and a rescale of the rest completes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from kubesage.adapters.flink.autoscaler import Autoscaler, AutoscalerSettings, decide
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.observation import VertexObservation
from kubesage.adapters.flink.rescale import rescale_in_place

from .autoscaler_support import observe, proposal, reasons_of
from .conftest import recorded, vertex_times

SETTINGS = AutoscalerSettings(stable_observations=1)


def side_input_job(*, side_status: str = "FINISHED") -> tuple[VertexObservation, ...]:
    """A bounded side input and an unbounded source feed a join, the bottleneck."""
    return (
        VertexObservation("side", "Source: side", 1, 128, status=side_status),
        VertexObservation(
            "main",
            "Source: main",
            1,
            128,
            records_out_per_s=40.0,
            busy_ms_per_s=100.0,
            pending_records=0.0,
            pending_growth_per_s=20.0,
        ),
        VertexObservation(
            "join",
            "join",
            1,
            128,
            inputs=("side", "main"),
            records_in_per_s=40.0,
            records_out_per_s=40.0,
            busy_ms_per_s=1000.0,
        ),
    )


def test_a_finished_input_is_left_out_and_the_bottleneck_is_scaled() -> None:
    decision = Autoscaler(SETTINGS).decide(observe(side_input_job()))
    assert decision.action == "rescale"
    # demand 40 + 20 growth = 60 rec/s at 40 rec/s per subtask: ceil(60 / (40 × 0.8)) = 2
    assert decision.changes == {"join": 2}
    assert proposal(decision, "side") == 1
    assert "FINISHED: its input has ended" in reasons_of(decision, "side")
    assert any(r.startswith("FINISHED (input ended)") for r in decision.reasons)
    assert not any("metrics missing" in r for r in decision.reasons)


def test_a_vertex_still_starting_is_still_a_skip() -> None:
    decision = Autoscaler(SETTINGS).decide(observe(side_input_job(side_status="DEPLOYING")))
    assert decision.action == "skip"
    assert decision.reasons == ("vertices not RUNNING yet: Source: side",)


def test_a_vertex_whose_inputs_all_finished_drains_on_what_it_receives() -> None:
    side, _, join = side_input_job()
    decision = Autoscaler(SETTINGS).decide(observe((side, replace(join, inputs=("side",)))))
    assert "its inputs are FINISHED (draining): target is what it receives now" in reasons_of(
        decision, "join"
    )
    assert decision.changes == {"join": 2}  # 40 rec/s at 40 per subtask, utilisation 1.0


def _with_finished_source(body: dict[str, Any]) -> dict[str, Any]:
    entry = copy.deepcopy(recorded("job_running"))
    entry["body"] = copy.deepcopy(body)
    entry["body"]["vertices"][0]["status"] = "FINISHED"
    return entry


def test_the_collector_measures_the_running_vertices_beside_a_finished_one(
    replay_client: Callable[..., FlinkClient],
) -> None:
    job = recorded("job_running")["body"]
    jid = job["jid"]
    source, slow, sink = (v["id"] for v in job["vertices"])
    base = f"/jobs/{jid}/vertices"
    clock = iter([1000.0, 1010.0])

    def twice(name: str) -> list[dict[str, Any]]:
        later = copy.deepcopy(recorded(name))
        for metric in later["body"]:
            for key in ("min", "max", "avg", "sum"):
                metric[key] = metric[key] * 1.5
        return [recorded("metric_names_source"), recorded(name), later]

    client = replay_client(
        "overview",
        **{
            f"GET /jobs/{jid}": _with_finished_source(job),
            f"GET {base}/{slow}/subtasks/metrics": twice("metrics_slow"),
            f"GET {base}/{sink}/subtasks/metrics": twice("metrics_sink"),
            f"GET {base}/{slow}": [vertex_times("vertex_slow"), vertex_times("vertex_slow", 10.0)],
            f"GET {base}/{sink}": [vertex_times("vertex_sink"), vertex_times("vertex_sink", 10.0)],
        },
    )
    collector = ObservationCollector(client, jid, clock=lambda: next(clock))
    collector.collect()
    second = collector.collect()
    assert second.window_s == pytest.approx(10.0)
    finished = second.vertex(source)
    assert finished.finished and finished.records_out_per_s is None
    slow_values = {m["id"]: m for m in recorded("metrics_slow")["body"]}
    assert second.vertex(slow).records_in_per_s == pytest.approx(
        slow_values["numRecordsIn"]["sum"] * 0.5 / 10
    )
    decision, _ = decide(
        replace(second, running_since_s=0.0), settings=AutoscalerSettings(settle_s=0.0)
    )
    assert decision.action != "skip"


def test_a_rescale_completes_while_a_vertex_stays_finished(
    replay_client: Callable[..., FlinkClient],
) -> None:
    job = recorded("job_running")["body"]
    jid = job["jid"]
    slow = job["vertices"][1]["id"]
    rescaled = _with_finished_source(job)
    rescaled["body"]["vertices"][1]["parallelism"] = 2
    client = replay_client(
        "resource_requirements",
        "set_resource_requirements",
        **{f"GET /jobs/{jid}": [_with_finished_source(job), rescaled]},
    )
    outcome = rescale_in_place(client, jid, {slow: 2}, timeout_s=5.0, sleep=lambda _: None)
    assert outcome.succeeded, outcome.message
    assert outcome.parallelism[slow] == 2
