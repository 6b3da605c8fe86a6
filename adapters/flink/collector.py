"""Measures :class:`~kubesage.adapters.flink.observation.Observation` s of a Flink job.

The collector reads Flink's REST API (vertices, plan edges, task slots, and per
vertex its subtasks' metrics) and turns cumulative counters into rates over a sliding
window; with a core ``Forecaster`` it also predicts each source's demand. It holds
only what measuring needs (the samples of the window, the names of the backlog
gauges, each source's demand history); the decision
(:func:`~kubesage.adapters.flink.autoscaler.decide`) reads what it returns.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.demand_forecast import DEFAULT_HISTORY_STEPS
from kubesage.adapters.flink.observation import (
    FINISHED,
    SETTLED_STATUSES,
    Observation,
    VertexObservation,
)
from kubesage.adapters.flink.rest_models import JobVertex, PlanInput

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)

PENDING_SUFFIX = "pendingRecords"
ACCOUNTED = "accountedMs"
"""Sample key: the longest running time a subtask of the vertex accounts for (ms)."""
REPORTER_OUT = "backlogReporter.numRecordsOut"
"""Sample key: the records out of the operators that report a backlog, summed."""
COUNTERS = ("numRecordsIn", "numRecordsOut")
"""Summed over subtasks (``…/subtasks/metrics``): a sum's change is the sum of changes."""
BUSY, BACKPRESSURED = "accumulateBusyTimeMs", "accumulateBackPressuredTimeMs"
"""Per subtask (``GET /jobs/<id>/vertices/<vid>``), kept as ``<name>#<subtask>``: the
busiest subtask *now* is the largest of the subtasks' own rates, which the change of
the largest cumulative total is not (that is the rate of whichever subtask has been
busiest since the start)."""
METERS = ("numRecordsInPerSecond", "numRecordsOutPerSecond", "busyTimeMsPerSecond")


@dataclass(frozen=True)
class _Sample:
    time_s: float
    counters: dict[str, dict[str, float]]
    """vertex id → counter → value (records summed over subtasks; busy and backpressured
    time per subtask, as ``<name>#<subtask>``)."""
    store_s: float | None
    """The metric store's own clock: the longest running time a subtask of a non-source
    vertex accounts for (busy + idle + backpressured, ``SubtaskTimes.accounted_ms``), in
    seconds. Every counter of a sample was fetched with it, so rates are taken over it;
    None where no such subtask splits its time (a job of one source chain).
    """
    seen: dict[str, dict[str, float]]
    """vertex id → counter → when its value was first seen (≤ ``time_s``): the value
    Flink's metric store holds changes only when the store refreshes (every
    ``metrics.fetcher.update-interval``, 10 s by default), so it is timed by its first
    appearance, not by every later read of it."""


class ObservationCollector:
    """Measures ``Observation`` s through the REST client, from Flink's counters.

    Rates come from the difference of cumulative counters (``numRecordsIn``/``Out``
    summed over subtasks; ``accumulateBusyTimeMs`` and ``accumulateBackPressuredTimeMs``
    per subtask, the vertex's the largest subtask's rate) between the oldest sample
    inside ``window_s`` that has the counter and now: they follow a rescale
    within seconds, where Flink's own ``…PerSecond`` meters average over 60 s. A
    restart of the job empties the window. Without those counters (an older Flink) the
    meters are used; a value Flink reports as NaN (not measured) is no reading.
    """

    def __init__(
        self,
        client: FlinkClient,
        job_id: str,
        *,
        window_s: float = 20.0,
        clock: Callable[[], float] = time.time,
        forecaster: Forecaster | None = None,
        forecast_horizon: int = 3,
        history_steps: int = DEFAULT_HISTORY_STEPS,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.window_s = window_s
        self.clock = clock
        self.forecaster = forecaster
        self.forecast_horizon = forecast_horizon
        self.history_steps = history_steps
        """Demand samples kept per source for the forecaster (a season, for a seasonal one)."""
        self._samples: list[_Sample] = []
        self._running_since_ms = -1
        self._pending_names: dict[str, list[str]] = {}
        self._reporter_out_names: dict[str, list[str]] = {}
        """Per vertex: ``<operator>.numRecordsOut`` of each operator that reports a
        backlog (``<operator>.pendingRecords``), in the backlog's units."""
        self._demand_history: dict[str, list[tuple[float, float]]] = {}
        self._settled = False

    def collect(self) -> Observation:
        job = self.client.job(self.job_id)
        overview = self.client.overview()
        now = self.clock()
        if job.running_since_ms != self._running_since_ms:
            self._samples.clear()
            self._pending_names.clear()
            self._running_since_ms = job.running_since_ms
        # A FINISHED vertex (a bounded input that has ended) never runs again: the rest of
        # the job is measured without it.
        running = job.state == "RUNNING" and all(v.status in SETTLED_STATUSES for v in job.vertices)
        counters: dict[str, dict[str, float]] = {}
        meters: dict[str, dict[str, float]] = {}
        inputs = job.inputs()
        if running:
            for vertex in job.vertices:
                if vertex.status != FINISHED:
                    counters[vertex.id], meters[vertex.id] = self._read(vertex.id)
            # Flink's metric store fills on the first query after a (re)start, and some
            # vertices never report some counters (a legacy source's busy time): each
            # rate is taken from the oldest sample that has its counter (``_rate``).
            if any(counters.values()):
                # A non-source subtask accounts for all its running time (it waits on
                # its input, idle); a source's may not (its own thread does the work).
                clocks = [
                    values[ACCOUNTED] / 1000.0
                    for vertex_id, values in counters.items()
                    if ACCOUNTED in values and inputs[vertex_id]
                ]
                store_s = max(clocks) if clocks else None
                seen = self._first_seen(counters, now)
                self._samples.append(_Sample(now, counters, store_s, seen))
            horizon = now - self.window_s
            while len(self._samples) > 2 and self._samples[1].time_s <= horizon:
                self._samples.pop(0)
        # How long ago the (re)start was, by the JobManager's own clock (its "now"): a
        # skew between its clock and this host's must not shift the settle rules.
        running_for_s = None
        restarted_s = job.running_since_ms / 1000.0  # on this host's clock, below
        if job.now_ms > 0:
            running_for_s = max(job.now_ms - job.running_since_ms, 0) / 1000.0
            restarted_s = now - running_for_s
        first = self._samples[0] if len(self._samples) > 1 else None
        window = now - first.time_s if first is not None else 0.0
        # Demand joins a forecaster's history only from a window that starts a full
        # window after the (re)start: before that the new subtasks warm up (their Python
        # workers start, a backlog drains) and what is measured is not demand.
        self._settled = first is not None and first.time_s - restarted_s >= self.window_s
        vertices = tuple(
            self._vertex(vertex, inputs[vertex.id], counters, meters, window, now)
            for vertex in job.vertices
        )
        return Observation(
            job_id=self.job_id,
            time_s=now,
            job_state=job.state,
            running_since_s=job.running_since_ms / 1000.0,
            window_s=window,
            vertices=vertices,
            slots_total=overview.slots_total,
            slots_free=overview.slots_available,
            running_for_s=running_for_s,
        )

    def _read(self, vertex_id: str) -> tuple[dict[str, float], dict[str, float]]:
        if not self._pending_names.get(vertex_id):
            # Looked up until found: user gauges appear only after their first report.
            names = self.client.metric_names(self.job_id, vertex_id)
            self._pending_names[vertex_id] = [n for n in names if n.endswith(PENDING_SUFFIX)]
            reporters = [n.removesuffix(PENDING_SUFFIX) for n in self._pending_names[vertex_id]]
            outs = [f"{prefix}numRecordsOut" for prefix in reporters if prefix.endswith(".")]
            complete = len(outs) == len(reporters) and set(outs) <= set(names)
            self._reporter_out_names[vertex_id] = outs if complete else []
        pending = self._pending_names.get(vertex_id, [])
        reporter_outs = self._reporter_out_names.get(vertex_id, [])
        metrics = self.client.subtask_metrics(
            self.job_id, vertex_id, [*COUNTERS, *METERS, *pending, *reporter_outs]
        )
        values: dict[str, float] = {}
        for name in COUNTERS:
            if name in metrics:
                values[name] = metrics[name].sum
        accounted = []
        for subtask in self.client.vertex(self.job_id, vertex_id).subtasks:
            values[f"{BUSY}#{subtask.subtask}"] = subtask.metrics.busy_ms
            values[f"{BACKPRESSURED}#{subtask.subtask}"] = subtask.metrics.backpressured_ms
            if math.isfinite(subtask.metrics.accounted_ms):
                accounted.append(subtask.metrics.accounted_ms)
        if accounted:
            values[ACCOUNTED] = max(accounted)
        if pending and all(name in metrics for name in pending):
            values[PENDING_SUFFIX] = sum(metrics[name].sum for name in pending)
        if reporter_outs and all(name in metrics for name in reporter_outs):
            values[REPORTER_OUT] = sum(metrics[name].sum for name in reporter_outs)
        # NaN is Flink's "not measured" (a legacy source's busy time): not a reading.
        values = {name: value for name, value in values.items() if math.isfinite(value)}
        meter_values = {
            "numRecordsInPerSecond": metrics["numRecordsInPerSecond"].sum
            if "numRecordsInPerSecond" in metrics
            else math.nan,
            "numRecordsOutPerSecond": metrics["numRecordsOutPerSecond"].sum
            if "numRecordsOutPerSecond" in metrics
            else math.nan,
            "busyTimeMsPerSecond": metrics["busyTimeMsPerSecond"].max
            if "busyTimeMsPerSecond" in metrics
            else math.nan,
        }
        return values, meter_values

    def _vertex(
        self,
        vertex: JobVertex,
        edges: tuple[PlanInput, ...],
        counters: Mapping[str, Mapping[str, float]],
        meters: Mapping[str, Mapping[str, float]],
        window: float,
        now: float,
    ) -> VertexObservation:
        vertex_id = vertex.id
        base = VertexObservation(
            vertex_id=vertex_id,
            name=vertex.name,
            parallelism=vertex.parallelism,
            max_parallelism=vertex.max_parallelism,
            inputs=tuple(edge.id for edge in edges),
            hash_input=any(edge.ship_strategy.upper() == "HASH" for edge in edges),
            status=vertex.status,
            slot_sharing_group=vertex.slot_sharing_group,
        )
        now_values = counters.get(vertex_id, {})
        if window <= 0 or base.finished:
            return base

        def rate(name: str) -> float | None:
            return self._rate(vertex_id, name, now_values.get(name), now)

        def busiest(name: str) -> float | None:
            """The largest of the subtasks' own rates of ``name`` (None: none measured)."""
            rates = [
                value
                for key in now_values
                if key.startswith(f"{name}#") and (value := rate(key)) is not None
            ]
            return max(rates, default=None)

        def meter(name: str) -> float | None:
            value = meters.get(vertex_id, {}).get(name, math.nan)
            return None if math.isnan(value) else value

        busy = busiest(BUSY)
        records_in = rate("numRecordsIn")
        records_out = rate("numRecordsOut")
        pending = now_values.get(PENDING_SUFFIX)
        growth = None
        if pending is not None:
            growth = self._rate(vertex_id, PENDING_SUFFIX, pending, now, counter=False)
        read = rate(REPORTER_OUT)
        # Records out per backlog record: the chain after the reporting operator may
        # filter or split (unknown while that operator emits nothing: taken as 1).
        per_pending = records_out / read if records_out is not None and read else None
        forecast = None
        if not edges or pending is not None:
            scale = per_pending if per_pending is not None else 1.0
            demand = (records_out or 0.0) + (growth or 0.0) * scale
            forecast = self._forecast(vertex_id, demand, now if self._settled else None)
        return replace(
            base,
            records_in_per_s=records_in
            if records_in is not None
            else meter("numRecordsInPerSecond"),
            records_out_per_s=records_out
            if records_out is not None
            else meter("numRecordsOutPerSecond"),
            busy_ms_per_s=min(busy, 1000.0) if busy is not None else meter("busyTimeMsPerSecond"),
            backpressured_ms_per_s=busiest(BACKPRESSURED),
            pending_records=pending,
            pending_growth_per_s=growth,
            output_per_pending=per_pending,
            forecast_records_per_s=forecast,
        )

    def _first_seen(
        self, counters: Mapping[str, Mapping[str, float]], now: float
    ) -> dict[str, dict[str, float]]:
        """When each of ``counters`` was first seen: as in the last sample where that
        sample read the same value, else now."""
        last = self._samples[-1] if self._samples else None
        seen: dict[str, dict[str, float]] = {}
        for vertex_id, values in counters.items():
            before = last.counters.get(vertex_id, {}) if last else {}
            before_seen = last.seen.get(vertex_id, {}) if last else {}
            seen[vertex_id] = {
                name: before_seen[name]
                if before.get(name) == value and name in before_seen
                else now
                for name, value in values.items()
            }
        return seen

    def _rate(
        self,
        vertex_id: str,
        name: str,
        now_value: float | None,
        now_s: float,
        *,
        counter: bool = True,
    ) -> float | None:
        """Per-second change of ``name`` since the oldest sample in the window that has
        it (None: not reported now, by no earlier sample, or all of them from one store
        refresh), over the metric store's clock (:attr:`_Sample.store_s`), else over the
        time between the two values' first appearances (:attr:`_Sample.seen`). A counter
        never goes back (a reset reads as 0); a gauge such as a backlog may."""
        if now_value is None:
            return None
        latest = self._samples[-1] if self._samples else None
        now_seen = (latest.seen.get(vertex_id, {}) if latest else {}).get(name, now_s)
        for sample in self._samples:
            before = sample.counters.get(vertex_id, {}).get(name)
            if before is None or now_s <= sample.time_s:
                continue
            change = now_value - before
            if counter:
                change = max(change, 0.0)
            if latest is not None and latest.store_s is not None and sample.store_s is not None:
                # Over the store's own clock: exact, however the polls fall.
                spent = latest.store_s - sample.store_s
                return change / spent if spent > 0 else None  # one refresh: no rate yet
            if change == 0.0:
                return 0.0  # unchanged over the whole window
            spent = now_seen - sample.seen.get(vertex_id, {}).get(name, sample.time_s)
            return change / (spent if spent > 0 else now_s - sample.time_s)
        return None

    def _forecast(self, vertex_id: str, demand: float, time_s: float | None = -1.0) -> float | None:
        """The forecaster's highest predicted demand over the horizon (None without one).

        ``demand`` joins the history at ``time_s`` (-1: one step after the last); None
        keeps it out — a rate measured soon after a (re)start is the backlog's drain and
        the new subtasks' warm-up, not demand. The history lies on a grid of
        the collection interval with the gaps (a rescale's pause) masked, so the pause
        does not read as a jump.
        """
        history = self._demand_history.setdefault(vertex_id, [])
        if time_s is not None:
            if time_s < 0:
                time_s = history[-1][0] + 1.0 if history else 0.0
            history.append((time_s, demand))
            del history[: -self.history_steps]
        if self.forecaster is None or len(history) < 2:
            return None
        from kubesage.core.forecast.panel import MetricPanel

        times = np.asarray([t for t, _ in history], dtype=np.float64)
        step_s = max(float(np.median(np.diff(times))), 1e-3)
        steps = np.round((times - times[0]) / step_s).astype(np.int64)
        values = np.zeros((int(steps[-1]) + 1, 1, 1))
        mask = np.zeros_like(values, dtype=bool)
        values[steps, 0, 0] = [d for _, d in history]
        mask[steps, 0, 0] = True
        panel = MetricPanel(
            entities=(vertex_id,),
            metrics=("records_per_s",),
            start_s=float(times[0]),
            step_s=step_s,
            values=values,
            mask=mask,
            alive=np.ones(values.shape[:2], dtype=bool),
        )
        try:
            self.forecaster.fit(panel, panel.steps)
            forecast = self.forecaster.predict(panel, self.forecast_horizon)
        except Exception as exc:  # a forecaster is optional: fall back to observed rates
            log.warning("forecaster %s failed (%s); using observed rates", type(exc).__name__, exc)
            return None
        return float(np.max(forecast.values[:, 0, 0]))
