"""Scaling ahead of load: the same changing input, scaled reactively and from a forecast.

Two copies of the sample job run side by side on one local cluster with the same rate
schedule (``rate_schedule.py``) and the same start time, so they see the same demand
at the same instants and share the machine's noise. Each is scaled by its own
autoscaler loop — the product's collector and step
(:class:`~kubesage.adapters.flink.collector.ObservationCollector`,
:func:`~kubesage.adapters.flink.loop_scaling.scaling_step`,
:func:`~kubesage.adapters.flink.rescale.rescale_in_place`) with the same settings —
the only difference being the collector's forecaster: none (reactive) or one
(predictive). Over the schedule each loop tallies (:class:`PolicyTally`):

- ``backpressured_s``: seconds the source (the bottleneck's upstream) was
  backpressured, from the increments of its ``accumulateBackPressuredTimeMs`` counter;
- ``max_lag_records``: the source's highest ``pendingRecords`` (the records it owes);
- ``slot_seconds``: task slots the job holds (per slot-sharing group, the highest
  parallelism in it) integrated over time;
- ``rescales``: rescales applied (inside the measured span, as the figures above).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubesage.adapters.flink.autoscaler import AutoscalerSettings
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.loop_scaling import JobScaling, scaling_step
from kubesage.adapters.flink.observation import Observation
from kubesage.adapters.flink.rescale import rescale_in_place

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)

BACKPRESSURE_COUNTER = "accumulateBackPressuredTimeMs"


@dataclass(frozen=True)
class Sample:
    """One look at the job: what the tally integrates."""

    time_s: float
    running_since_s: float
    """When the job last entered RUNNING: a restart resets the counters."""
    backpressured_ms: float | None
    """The source's ``accumulateBackPressuredTimeMs`` (None: not readable now)."""
    pending_records: float | None
    slots: int


@dataclass
class PolicyTally:
    """Backpressure, lag and slot-seconds of one job over ``[start_s, end_s]``.

    Samples come in time order. An interval between two samples counts for the part of
    it inside the span; a counter increment is spread evenly over its interval (after
    a restart, over the time since the restart).
    """

    start_s: float
    end_s: float
    backpressured_s: float = 0.0
    max_lag_records: float = 0.0
    slot_seconds: float = 0.0
    _last: Sample | None = field(default=None, repr=False)
    _counter: tuple[float, float, float] | None = field(default=None, repr=False)
    """The last counter reading: (running since, time, value)."""

    def add(self, sample: Sample) -> None:
        last = self._last
        if last is not None:
            self.slot_seconds += last.slots * self._inside(last.time_s, sample.time_s)
        if sample.backpressured_ms is not None:
            counter = self._counter
            if counter is not None and counter[0] == sample.running_since_s:
                self._backpressure(sample.backpressured_ms - counter[2], counter[1], sample.time_s)
            else:  # the job (re)started: the counter counts from then
                self._backpressure(sample.backpressured_ms, sample.running_since_s, sample.time_s)
            self._counter = (sample.running_since_s, sample.time_s, sample.backpressured_ms)
        if sample.pending_records is not None and self.start_s <= sample.time_s <= self.end_s:
            self.max_lag_records = max(self.max_lag_records, sample.pending_records)
        self._last = sample

    def _backpressure(self, increment_ms: float, since_s: float, until_s: float) -> None:
        length = until_s - since_s
        if increment_ms <= 0 or length <= 0:
            return
        self.backpressured_s += increment_ms / 1000.0 * self._inside(since_s, until_s) / length

    def _inside(self, since_s: float, until_s: float) -> float:
        return max(0.0, min(until_s, self.end_s) - max(since_s, self.start_s))


def slots_held(observation: Observation) -> int:
    """Task slots the job holds: per slot-sharing group, its highest parallelism."""
    groups: dict[str, int] = {}
    for vertex in observation.vertices:
        group = vertex.slot_sharing_group
        groups[group] = max(groups.get(group, 0), vertex.parallelism)
    return sum(groups.values())


@dataclass
class PolicyRun:
    """One job scaled by one policy until ``end_s`` (run it in a thread: :meth:`run`)."""

    name: str
    rest_url: str
    job_id: str
    source: str
    bottleneck: str
    settings: AutoscalerSettings
    start_s: float
    end_s: float
    forecaster: Forecaster | None = None
    forecast_horizon: int = 3
    tick_s: float = 5.0
    demand_at: Callable[[float], float] = lambda time_s: 0.0
    """The schedule's true rate at a time (for the progress lines only)."""
    tally: PolicyTally = field(init=False)
    rescales: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    parallelism_max: int = 1
    parallelism_last: int = 1

    def __post_init__(self) -> None:
        self.tally = PolicyTally(self.start_s, self.end_s)

    def run(self, stop: threading.Event) -> None:
        with FlinkClient(self.rest_url) as client:
            collector = ObservationCollector(
                client,
                self.job_id,
                window_s=20.0,
                forecaster=self.forecaster,
                forecast_horizon=self.forecast_horizon,
            )
            scaling = JobScaling()
            while not stop.is_set() and time.time() < self.end_s:
                tick = time.time()
                try:
                    scaling = self._tick(client, collector, scaling)
                except FlinkError as exc:  # a loaded machine: the next tick tries again
                    self.errors.append(str(exc))
                    log.warning("[%s] tick failed: %s", self.name, exc)
                stop.wait(max(0.0, self.tick_s - (time.time() - tick)))

    def _tick(
        self, client: FlinkClient, collector: ObservationCollector, scaling: JobScaling
    ) -> JobScaling:
        observation = collector.collect()
        source = observation.vertex(self.source)
        slow = observation.vertex(self.bottleneck)
        counter = None
        if observation.job_state == "RUNNING" and source.status == "RUNNING":
            metrics = client.subtask_metrics(self.job_id, source.vertex_id, [BACKPRESSURE_COUNTER])
            if BACKPRESSURE_COUNTER in metrics:
                counter = metrics[BACKPRESSURE_COUNTER].max
        self.tally.add(
            Sample(
                observation.time_s,
                observation.running_since_s,
                counter,
                source.pending_records,
                slots_held(observation),
            )
        )
        self.parallelism_last = slow.parallelism
        if self.start_s <= observation.time_s <= self.end_s:
            self.parallelism_max = max(self.parallelism_max, slow.parallelism)
        decision, scaling = scaling_step(observation, scaling, self.settings)
        since = observation.time_s - self.start_s
        log.info(
            "[%s] t=%4.0f s demand %5.1f rec/s measured %s forecast %s p=%d pending %s "
            "bp %s ms/s: %s %s",
            self.name,
            since,
            self.demand_at(since),
            _figure(source.records_out_per_s, source.pending_growth_per_s),
            _figure(source.forecast_records_per_s),
            slow.parallelism,
            _figure(source.pending_records),
            _figure(source.backpressured_ms_per_s),
            decision.action,
            decision.reasons[0] if decision.action == "skip" else "",
        )
        if decision.action == "rescale":
            outcome = rescale_in_place(client, self.job_id, decision.changes, timeout_s=60)
            self.rescales.append(
                {
                    "at_s": round(since, 1),
                    "to": max(decision.changes.values()),
                    "ok": outcome.succeeded,
                    "took_s": round(outcome.elapsed_s, 1),
                    # What the decision saw: was it the forecast that asked for more?
                    "demand": round(self.demand_at(since), 1),
                    "measured": _rounded(source.records_out_per_s, source.pending_growth_per_s),
                    "forecast": _rounded(source.forecast_records_per_s),
                }
            )
            log.info("[%s] rescale %s: %s", self.name, decision.changes, outcome.message)
        return scaling

    def result(self) -> dict[str, Any]:
        """The figures over ``[start_s, end_s]``; the log holds every rescale (those
        before the span at negative times)."""
        inside = [r for r in self.rescales if r["at_s"] >= 0]
        return {
            "backpressured_s": round(self.tally.backpressured_s, 1),
            "max_lag_records": round(self.tally.max_lag_records),
            "rescales": sum(1 for r in inside if r["ok"]),
            "slot_seconds": round(self.tally.slot_seconds, 1),
            "failed_rescales": sum(1 for r in inside if not r["ok"]),
            "max_parallelism": self.parallelism_max,
            "final_parallelism": self.parallelism_last,
            "rescale_log": self.rescales,
            "tick_errors": len(self.errors),
        }


def _rounded(*values: float | None) -> float | None:
    if any(value is None for value in values):
        return None
    return round(sum(v for v in values if v is not None), 1)


def _figure(*values: float | None) -> str:
    if any(value is None for value in values):
        return "-"
    return f"{sum(v for v in values if v is not None):.1f}"


def run_side_by_side(runs: list[PolicyRun]) -> None:
    """Run every policy's loop in its own thread until each reaches its end."""
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,), name=r.name) for r in runs]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
