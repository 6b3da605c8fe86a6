"""Flink autoscaling on a real cluster: kubesage beside the Flink Kubernetes Operator's rule.

A local Flink 2.3 session cluster (``LocalFlinkCluster``, ``make services``) runs the
sample job (``flink_support/sample_job.py``): a source offering ``--rate`` rec/s and an
operator that handles ``--capacity`` rec/s per subtask, starting at parallelism 1. The
kubesage autoscaler observes it every 5 s and rescales in place until the backlog has
drained and nothing is backpressured.

Beside it, the Flink Kubernetes Operator autoscaler's rule with its documented defaults
(stabilization 5 min, metrics window 15 min, target utilisation 0.7 ± 0.3, catch-up
5 min, scale-down interval 1 h) is applied to the same measured metrics — computed, not
slept: its first decision comes after stabilization + one full window, and by then the
backlog has grown at the measured rate for that long.

``--tiny``: half a minute of observation (``--deadline-s 30``).

``--scenario ramp``: scaling ahead of load. Two copies of the sample job run side by
side with the same changing input (``--schedule``: ``daily`` — a day compressed to four
minutes, with a morning ramp from a fifth of ``--rate`` to ``--rate``, an afternoon
dip, an evening peak and the decline —, ``ramp`` or ``T:R,…``; see
``flink_support/rate_schedule.py``) and the same start time; one is scaled reactively,
the other with a forecast of its source's demand (``--forecaster``: ``seasonal``, the
default — the curve one period earlier, re-levelled, with the schedule played
``--periods`` times (default 3) and the last period measured —, ``trend``, a
least-squares line through the last minute, or the core's ridge ``linear``), looking
``--forecast-horizon-s`` ahead. Both use the same settings (scale-down delay 30 s,
oscillation window 60 s, so the evening decline can scale down within the run). JSON
adds ``reactive`` and ``predictive``, each with ``backpressured_s`` (seconds the
source was backpressured), ``max_lag_records`` (its highest ``pendingRecords``),
``rescales`` and ``slot_seconds`` (task slots held × seconds) over the schedule;
``--repeats N`` gives medians over N runs. ``--tiny`` compresses the schedule to a
minute (``--schedule-duration-s 60``).

    python benchmarks/flink_autoscale.py [--rate 40] [--capacity 20] [--tiny] [--format table|json]
    python benchmarks/flink_autoscale.py --scenario ramp [--schedule daily] [--forecaster seasonal]
        [--periods 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any

from _common import format_table, json_line, parse_args, run_main
from flink_support.cluster import LocalFlinkCluster
from flink_support.ramp_scenario import FIGURES as RAMP_FIGURES
from flink_support.ramp_scenario import RampOptions, run_ramp
from flink_support.samples import SAMPLE_JOB

from kubesage.adapters.flink.autoscaler import Autoscaler, AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.observation import Observation
from kubesage.adapters.flink.rescale import rescale_in_place

SOURCE, SLOW = "Source: sequence -> pace", "slow"
TICK_S = 5.0


OPERATOR_DEFAULTS = AutoscalerSettings(
    target_utilisation=0.7,
    utilisation_boundary=0.3,
    settle_s=300.0,
    catch_up_s=300.0,
    scale_down_delay_s=3600.0,
)
"""The Flink Kubernetes Operator autoscaler's defaults (``job.autoscaler.*``), in
kubesage's terms: stabilization.interval 5 min (``settle_s``), target.utilization 0.7
± 0.3, catch-up.duration 5 min, scale-down.interval 1 h."""
OPERATOR_METRICS_WINDOW_S = 900.0
"""``job.autoscaler.metrics.window``: 15 min of metrics before its first decision."""


def operator_decision(
    windows: list[Observation],
    max_parallelism: int,
    defaults: AutoscalerSettings = OPERATOR_DEFAULTS,
    metrics_window_s: float = OPERATOR_METRICS_WINDOW_S,
) -> dict[str, Any]:
    """The operator's parallelism for the slow vertex from the windows before any rescale.

    Its rule (JobVertexScaler): scale factor = target capacity / average true processing
    rate, target capacity = (source target rate + lag / catch-up) / target utilisation,
    new parallelism = ceil(parallelism × scale factor); no change while the utilisation is
    within target ± boundary. The lag is the backlog when it decides: it has grown at the
    measured rate through the stabilization interval and the metrics window.
    """
    slow = [w.vertex(SLOW) for w in windows]
    source = [w.vertex(SOURCE) for w in windows]
    parallelism = slow[0].parallelism
    true_rate = statistics.fmean(
        (v.records_in_per_s or 0.0) / ((v.busy_ms_per_s or 1000.0) / 1000.0) for v in slow
    )
    growth = statistics.fmean(v.pending_growth_per_s or 0.0 for v in source)
    demand = statistics.fmean((v.records_out_per_s or 0.0) for v in source) + growth
    decided_at_s = defaults.settle_s + metrics_window_s
    lag = growth * decided_at_s
    target_capacity = (demand + lag / defaults.catch_up_s) / defaults.target_utilisation
    utilisation = demand / true_rate
    low = defaults.target_utilisation - defaults.utilisation_boundary
    high = defaults.target_utilisation + defaults.utilisation_boundary
    new = parallelism
    if not low <= utilisation <= high:
        new = min(math.ceil(parallelism * target_capacity / true_rate - 1e-9), max_parallelism)
    return {
        "operator_first_decision_s": decided_at_s,
        "operator_parallelism": new,
        "operator_lag_at_decision": round(lag),
        "operator_true_rate": round(true_rate, 2),
    }


def run(rate: float, capacity: float, slots: int, deadline_s: float) -> dict[str, Any]:
    settings = AutoscalerSettings(exclude=frozenset({SOURCE}))
    ideal = math.ceil(rate / (capacity * settings.target_utilisation))
    with LocalFlinkCluster(task_slots=slots) as cluster, FlinkClient(cluster.rest_url) as client:
        job_id = cluster.submit_python(
            SAMPLE_JOB, ["--rate", str(rate), "--capacity", str(capacity)], parallelism=1
        )
        autoscaler = Autoscaler(settings)
        collector = ObservationCollector(client, job_id, window_s=20.0)
        before_rescale: list[Observation] = []
        rescales: list[dict[str, Any]] = []
        started = time.time()
        job_running_s = first_valid_s = first_decision_s = converged_s = None
        calm_windows = 0
        last: Observation | None = None
        while time.time() - started < deadline_s and calm_windows < 2:
            observation = collector.collect()
            last = observation
            if job_running_s is None and observation.job_state == "RUNNING":
                job_running_s = observation.running_since_s
            decision = autoscaler.decide(observation)
            if decision.action != "skip":
                first_valid_s = first_valid_s or observation.time_s
                if not rescales:
                    before_rescale.append(observation)
            if decision.action == "rescale":
                first_decision_s = first_decision_s or observation.time_s
                old = {v.vertex_id: v.current for v in decision.vertices}
                outcome = rescale_in_place(client, job_id, decision.changes, timeout_s=60)
                rescales.append(
                    {"at_s": round(observation.time_s - started, 1), "ok": outcome.succeeded}
                )
                if outcome.succeeded:
                    autoscaler.record_rescale(time.time(), old, decision.changes)
                calm_windows = 0
            elif rescales and observation.drained(SOURCE, max_pending_records=2 * rate):
                calm_windows += 1
                if calm_windows == 2:
                    converged_s = observation.time_s
            time.sleep(TICK_S)
        final = last.vertex(SLOW) if last is not None else None
        source = last.vertex(SOURCE) if last is not None else None
        max_parallelism = final.max_parallelism if final is not None else 128
        client.cancel(job_id)
    assert job_running_s is not None
    result: dict[str, Any] = {
        "rate": rate,
        "capacity": capacity,
        "rescales": sum(1 for r in rescales if r["ok"]),
        "first_decision_s": _since(first_decision_s, job_running_s),
        "first_decision_after_valid_s": _since(first_decision_s, first_valid_s),
        "converged_s": _since(converged_s, job_running_s),
        "final_parallelism": final.parallelism if final is not None else None,
        "ideal_parallelism": ideal,
        "backpressure_after": calm_windows < 2,
        "source_backpressured_ms_per_s_after": _round(
            source.backpressured_ms_per_s if source else None
        ),
        "slow_busy_ms_per_s_after": _round(final.busy_ms_per_s if final else None),
    }
    if before_rescale:
        result |= operator_decision(before_rescale, max_parallelism)
    return result


def _since(moment: float | None, origin: float | None) -> float | None:
    return None if moment is None or origin is None else round(moment - origin, 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def print_ramp_table(result: dict[str, Any]) -> None:
    print(
        f"Schedule {result['schedule']} {result['schedule_points']} (s, rec/s); "
        f"{result['capacity']:g} rec/s per slow subtask (ideal at the peak "
        f"{result['ideal_parallelism_peak']}); forecaster {result['forecaster']} "
        f"{result['forecast_horizon_s']:g} s ahead; medians of {result['repeats']}"
    )
    rows = [
        [figure, result["reactive"][figure], result["predictive"][figure]]
        for figure in (*RAMP_FIGURES, "max_parallelism", "failed_rescales")
    ]
    print(format_table(["figure", "reactive", "predictive"], rows, digits=1))
    print(
        f"predictive / reactive: {result['predictive_over_reactive']}; "
        f"goal (less backpressure and lag, ≤ 10 % more slot-seconds) met: {result['goal_met']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=["default", "ramp"], default="default")
    parser.add_argument("--rate", type=float, default=40.0, help="records/s (ramp: the peak)")
    parser.add_argument("--capacity", type=float, default=20.0)
    parser.add_argument("--slots", type=int, default=6)
    parser.add_argument("--deadline-s", type=float, default=300.0)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    RampOptions.add_arguments(parser)
    # Tiny: observe for half a minute (the job runs and is observed; no decision is
    # needed); the ramp scenario's schedule compressed to a minute.
    args = parse_args(parser, {"deadline_s": 30.0, "schedule_duration_s": 60.0})
    logging.basicConfig(level=logging.WARNING)
    if not SAMPLE_JOB.is_file():
        raise SystemExit(f"error: {Path(SAMPLE_JOB).name} not found")
    if args.scenario == "ramp":
        logging.getLogger("flink_support").setLevel(logging.INFO)
        ramp = run_ramp(RampOptions.from_args(args))
        if args.format == "json":
            print(json_line(ramp))
        else:
            print_ramp_table(ramp)
        return 0
    result = run(args.rate, args.capacity, args.slots, args.deadline_s)
    if args.format == "json":
        print(json_line(result))
        return 0
    print(
        f"Sample job: {args.rate:g} rec/s offered, {args.capacity:g} rec/s per subtask of the "
        f"slow operator, from parallelism 1 (ideal {result['ideal_parallelism']})"
    )
    rows = [
        [
            "kubesage",
            result["first_decision_s"],
            result["final_parallelism"],
            result["rescales"],
            result["backpressure_after"],
        ],
        [
            "Flink operator (defaults, computed)",
            result.get("operator_first_decision_s"),
            result.get("operator_parallelism"),
            1 if result.get("operator_parallelism") else None,
            None,
        ],
    ]
    print(
        format_table(
            ["autoscaler", "first decision (s)", "parallelism", "rescales", "backpressure after"],
            rows,
            digits=1,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
