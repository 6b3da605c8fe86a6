"""The autoscaler on jobs of several shapes: submit, autoscale, measure the end state.

Each :class:`ShapeCase` is a job of ``shape_jobs.py`` (beside this file; it runs in the
Flink venv and is passed to ``flink run -py`` by path) with one slow operator, the
*bottleneck*. :func:`run_shape` submits it to a local cluster, runs the real
``kubesage flink autoscale`` loop
(:func:`~kubesage.adapters.flink.autoscale_loop.run_autoscaler`, rescaling in place)
beside a collector of its own, until the job is calm — the decision content with
every vertex for a few ticks in a row and nothing backpressured over the harness's
window — or a deadline passes, and cancels the job. The end state is the harness's
last full window; it carries the *ideal* parallelism, measured from the job's own
throughput as the issue asks:

- the bottleneck's true rate per subtask = records in/s per subtask ÷ its busy
  fraction (``accumulateBusyTimeMs``, max over subtasks), at the parallelism it ends
  at;
- the demand = the records/s it receives once nothing upstream is backpressured (at
  the end state; when something still is, the demand is only a lower bound and the
  end state fails on backpressure anyway);
- ideal = ``ceil(demand / (true rate × target utilisation))``, at least the minimum
  parallelism (an idle job's ideal is the minimum); *fewest* is the same at full
  utilisation: the fewest subtasks that keep up. The decision rests anywhere up to
  target + boundary (0.9) by design, and a subtask's measured true rate moves by ~10 %
  with the Python overhead on two busy cores, so a bound at 0.9 would fail a job that
  keeps up for noise alone.

:func:`run_shapes` runs several cases at once on one cluster, as many as the task
slots allow (each case reserves the slots it may peak at), so that a suite of shapes
fits in minutes on two cores.
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kubesage.adapters.flink.autoscale_loop import run_autoscaler
from kubesage.adapters.flink.autoscaler import AutoscalerSettings, ScalingDecision
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.observation import Observation, VertexObservation
from kubesage.adapters.flink.rescale import RescaleOutcome

from .cluster import LocalFlinkCluster

log = logging.getLogger(__name__)


class _Crashes:
    """TaskManager crashes seen on the shared cluster, and the check that replaces a
    dead TaskManager (one case at a time).

    PyFlink in thread mode can crash the TaskManager's JVM when a Python operator's
    tasks are cancelled (a rescale, a job's end): every job on it stops until a new
    TaskManager registers. That is Flink's failure, not the decision's, so a case whose
    run overlapped a crash is run again once (:func:`run_shapes`).
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def check(self, cluster: LocalFlinkCluster) -> None:
        with self._lock:
            if cluster.ensure_taskmanager():
                self.times.append(time.monotonic())

    def between(self, start: float, end: float) -> bool:
        return any(start <= at <= end for at in self.times)


_CRASHES = _Crashes()

SHAPE_JOB = Path(__file__).with_name("shape_jobs.py")
BACKPRESSURE_OK_MS_PER_S = 100.0
"""Flink's "OK" backpressure level: at most 10 % of the time backpressured."""

SHAPE_SETTINGS = AutoscalerSettings(
    min_window_s=10.0,
    settle_s=8.0,
    scale_down_delay_s=10.0,
    oscillation_window_s=60.0,
)
"""Guard rails shortened to seconds (the issue: "scale-down delays of seconds in tests")."""


@dataclass(frozen=True)
class ShapeCase:
    """One job shape: the ``shape_jobs.py`` arguments and what the test expects of it."""

    name: str
    args: tuple[str, ...]
    bottleneck: str
    """A part of the bottleneck vertex's name (``slow``, ``PythonCalc``)."""
    parallelism: int = 1
    """The job's ``-p``."""
    slots: int = 4
    """Task slots the job may peak at (reserved while it runs next to others)."""
    min_run_s: float = 0.0
    """Autoscale at least this long (a job that changes later, or one that must hold)."""
    deadline_s: float = 240.0
    """Stop autoscaling after this long, calm or not."""


@dataclass
class DecisionRecord:
    time_s: float
    action: str
    text: str
    outcome: str | None = None


@dataclass
class ShapeResult:
    """The end state of one case (and what happened on the way, for diagnostics)."""

    case: ShapeCase
    job_id: str = ""
    parallelism: dict[str, int] = field(default_factory=dict)
    """Vertex name → parallelism at the end."""
    bottleneck_parallelism: int = 0
    rescales: int = 0
    failed_rescales: int = 0
    calm: bool = False
    """The decision was calm when the autoscaler stopped (else the deadline passed)."""
    ideal: int | None = None
    """Subtasks for the demand at the target utilisation (the upper bound's base)."""
    fewest: int | None = None
    """Subtasks for the demand at full utilisation: fewer cannot keep up."""
    demand_per_s: float | None = None
    true_rate_per_subtask: float | None = None
    backpressured_ms_per_s: dict[str, float | None] = field(default_factory=dict)
    """Vertex name → backpressured ms/s over the final window (max over subtasks)."""
    decisions: list[DecisionRecord] = field(default_factory=list)
    final_observation: Observation | None = None
    errors: list[str] = field(default_factory=list)
    disturbed: bool = False
    """A TaskManager crash happened while the case ran."""
    reruns: list[str] = field(default_factory=list)
    """Summaries of earlier runs of this case that a TaskManager crash disturbed."""
    counter_regressions: list[str] = field(default_factory=list)
    """Flink's summed counters going backwards between ticks (for the report)."""
    elapsed_s: float = 0.0

    @property
    def backpressured(self) -> list[str]:
        """Vertices backpressured beyond Flink's OK level (or not measured) at the end."""
        return backpressured(self.final_observation) if self.final_observation else []

    def summary(self) -> str:
        return (
            f"{self.case.name}: bottleneck p={self.bottleneck_parallelism}, ideal {self.ideal} "
            f"(fewest {self.fewest}) "
            f"(demand {_fmt(self.demand_per_s)} rec/s, true rate "
            f"{_fmt(self.true_rate_per_subtask)} rec/s/subtask), rescales {self.rescales} "
            f"(+{self.failed_rescales} failed), calm {self.calm}, backpressured "
            f"{self.backpressured or 'none'}, {self.elapsed_s:.0f} s"
        )

    def explain(self, last: int = 6) -> str:
        """The summary, the rescales and the last decisions: what a failure message needs."""
        lines = [self.summary(), f"job {self.job_id}, parallelism {self.parallelism}"]
        lines += [f"error: {error}" for error in self.errors]
        lines += [f"run again after a TaskManager crash disturbed: {run}" for run in self.reruns]
        lines += [f"counters went back: {words}" for words in self.counter_regressions]
        shown = [d for d in self.decisions if d.action == "rescale"] + self.decisions[-last:]
        seen: set[int] = set()
        for record in shown:
            if id(record) in seen:
                continue
            seen.add(id(record))
            lines.append(f"-- t+{record.time_s:.0f} s {record.outcome or ''}")
            lines.append(record.text)
        if self.final_observation is not None:
            lines.append("-- final window:")
            lines += [_describe_vertex(v) for v in self.final_observation.vertices]
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _describe_vertex(vertex: VertexObservation) -> str:
    return (
        f"  {vertex.name} p={vertex.parallelism} in={_fmt(vertex.records_in_per_s)} "
        f"out={_fmt(vertex.records_out_per_s)} busy={_fmt(vertex.busy_ms_per_s)} "
        f"backpressured={_fmt(vertex.backpressured_ms_per_s)} "
        f"pending={_fmt(vertex.pending_records)}"
    )


class _Watch:
    """Records the decisions and stops the autoscaler once the job is calm: for ``holds``
    decisions in a row every vertex is where the rule wants it (no change proposed,
    none deferred) and a window of the harness's own shows no backpressure."""

    def __init__(
        self,
        cluster: LocalFlinkCluster,
        client: FlinkClient,
        result: ShapeResult,
        stop: threading.Event,
        *,
        holds: int,
        min_run_s: float,
        window_s: float,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.result = result
        self.stop = stop
        self.holds = holds
        self.min_run_s = min_run_s
        self.window_s = window_s
        self.collector = ObservationCollector(client, result.job_id, window_s=window_s)
        self.started_s = time.monotonic()
        self.in_a_row = 0
        self.last: Observation | None = None
        """The harness's latest full window (the end state once the autoscaler stops)."""
        self._records_in: tuple[float, float] | None = None
        """(running since, the bottleneck's numRecordsIn summed over subtasks) last tick."""

    def _counters_went_back(self, observation: Observation) -> bool:
        try:
            vertex = bottleneck_of(observation, self.result.case.bottleneck)
        except FlinkError:
            return False
        metrics = self.client.subtask_metrics(
            self.result.job_id, vertex.vertex_id, ["numRecordsIn"]
        )
        if "numRecordsIn" not in metrics:
            return False
        now = (observation.running_since_s, metrics["numRecordsIn"].sum)
        before, self._records_in = self._records_in, now
        if before is None or before[0] != now[0] or now[1] >= before[1]:
            return False
        self.result.counter_regressions.append(
            f"t+{time.monotonic() - self.started_s:.0f} s: {vertex.name} numRecordsIn "
            f"{before[1]:.0f} → {now[1]:.0f} (same run since {now[0]:.0f})"
        )
        return True

    def __call__(self, decision: ScalingDecision, outcome: RescaleOutcome | None) -> None:
        _CRASHES.check(self.cluster)  # a dead TaskManager is replaced at once, not at the end
        elapsed = time.monotonic() - self.started_s
        text = decision.describe()
        records = self.result.decisions
        if not records or records[-1].text != text or decision.action == "rescale":
            words = None if outcome is None else outcome.message
            records.append(DecisionRecord(elapsed, decision.action, text, words))
        observation = self.collector.collect()
        if self._counters_went_back(observation):
            # Flink's metric store answered with counters lower than a moment ago (old
            # subtasks' values after a rescale): the collector's window would read
            # rates of 0, so it starts again.
            self.collector = ObservationCollector(
                self.client, self.result.job_id, window_s=self.window_s
            )
            observation = self.collector.collect()
        full = observation.window_s >= self.window_s * 0.8
        if full:
            self.last = observation
        content = decision.action == "hold" and all(
            v.ideal is None or v.ideal == v.current for v in decision.vertices
        )
        quiet = full and not backpressured(observation)
        self.in_a_row = self.in_a_row + 1 if content and quiet else 0
        if self.in_a_row >= self.holds and elapsed >= self.min_run_s:
            self.result.calm = True
            self.stop.set()


def backpressured(observation: Observation) -> list[str]:
    """Vertices backpressured beyond Flink's OK level (or not measured) in ``observation``."""
    return [
        v.name
        for v in observation.vertices
        if v.backpressured_ms_per_s is None or v.backpressured_ms_per_s > BACKPRESSURE_OK_MS_PER_S
    ]


def bottleneck_of(observation: Observation, part: str) -> VertexObservation:
    for vertex in observation.vertices:
        if part in vertex.name:
            return vertex
    raise FlinkError(f"job {observation.job_id} has no vertex named like '{part}'")


def end_state(result: ShapeResult, observation: Observation, settings: AutoscalerSettings) -> None:
    """Fills ``result``'s end state from ``observation`` (a window of the harness's own)."""
    result.final_observation = observation
    result.parallelism = {v.name: v.parallelism for v in observation.vertices}
    result.backpressured_ms_per_s = {v.name: v.backpressured_ms_per_s for v in observation.vertices}
    bottleneck = bottleneck_of(observation, result.case.bottleneck)
    result.bottleneck_parallelism = bottleneck.parallelism
    demand = bottleneck.records_in_per_s
    busy = bottleneck.busy_ms_per_s
    result.demand_per_s = demand
    if demand is None or busy is None:
        return
    if demand <= 0.0 or busy <= 0.0:  # idle: nothing to process, the minimum suffices
        result.ideal = result.fewest = settings.min_parallelism
        return
    true_rate = demand / bottleneck.parallelism / (min(busy, 1000.0) / 1000.0)
    result.true_rate_per_subtask = true_rate

    def subtasks(utilisation: float) -> int:
        wanted = math.ceil(demand / (true_rate * utilisation) - 1e-9)
        return max(settings.min_parallelism, wanted)

    result.ideal = subtasks(settings.target_utilisation)
    result.fewest = subtasks(1.0)


def run_shape(
    cluster: LocalFlinkCluster,
    case: ShapeCase,
    *,
    settings: AutoscalerSettings = SHAPE_SETTINGS,
    interval_s: float = 2.0,
    window_s: float = 10.0,
    calm_holds: int = 4,
    final_window_s: float = 12.0,
) -> ShapeResult:
    """Submits ``case``, autoscales it until calm (or its deadline), measures, cancels."""
    started = time.monotonic()
    result = ShapeResult(case)
    with FlinkClient(cluster.rest_url) as client, tempfile.TemporaryDirectory() as scratch:
        try:
            args = [*case.args, "--name", case.name, "--clock-file", f"{scratch}/start"]
            result.job_id = cluster.submit_python(SHAPE_JOB, args, parallelism=case.parallelism)
            _wait_running(client, result.job_id, timeout_s=90.0)
            stop = threading.Event()
            watch = _Watch(
                cluster,
                client,
                result,
                stop,
                holds=calm_holds,
                min_run_s=case.min_run_s,
                window_s=final_window_s,
            )
            timer = threading.Timer(case.deadline_s, stop.set)
            timer.start()
            try:
                stats = run_autoscaler(
                    client,
                    result.job_id,
                    dry_run=False,
                    settings=settings,
                    interval_s=interval_s,
                    window_s=window_s,
                    rescale_timeout_s=60.0,
                    on_decision=watch,
                    stop=stop,
                )
            finally:
                timer.cancel()
            result.rescales = stats.rescales
            result.failed_rescales = stats.failed_rescales
            if stats.errors:
                result.errors.append(f"{stats.errors} ticks failed, last: {stats.last_error}")
            if watch.last is None:
                result.errors.append("no full measurement window before the deadline")
            else:
                end_state(result, watch.last, settings)
        except (FlinkError, AssertionError) as exc:
            result.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            if result.job_id:
                try:
                    client.cancel(result.job_id)
                except FlinkError as exc:
                    log.warning("cancelling %s failed: %s", result.job_id, exc)
            _CRASHES.check(cluster)
            if _CRASHES.between(started, time.monotonic()):
                result.disturbed = True
                result.errors.append(
                    f"the TaskManager died during this case (logs in {cluster.log_dir})"
                )
            result.elapsed_s = time.monotonic() - started
    log.info("%s", result.summary())
    return result


def _wait_running(client: FlinkClient, job_id: str, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.job(job_id)
        if job.state == "RUNNING" and all(v.status == "RUNNING" for v in job.vertices):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not RUNNING within {timeout_s:.0f} s")
        time.sleep(1.0)


class SlotPool:
    """Task slots reserved by the cases running at once (a counting semaphore by size)."""

    def __init__(self, slots: int) -> None:
        self.free = slots
        self._changed = threading.Condition()

    def reserve(self, slots: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.free >= slots)
            self.free -= slots

    def release(self, slots: int) -> None:
        with self._changed:
            self.free += slots
            self._changed.notify_all()


def run_shapes(
    cluster: LocalFlinkCluster,
    cases: Sequence[ShapeCase],
    *,
    slots: int,
    runner: Callable[[LocalFlinkCluster, ShapeCase], ShapeResult] = run_shape,
) -> dict[str, Future[ShapeResult]]:
    """Starts every case on ``cluster``, as many at once as ``slots`` allow, in order.

    Returns at once: case name → the future of its result. The caller shuts the work
    down by waiting on the futures (each case cancels its own job when it ends). A case
    that a TaskManager crash disturbed is run once more; its result says so.
    """
    pool = SlotPool(slots)
    executor = ThreadPoolExecutor(max_workers=max(len(cases), 1), thread_name_prefix="shape")
    lock = threading.Lock()
    turn = threading.Condition(lock)
    order = [case.name for case in cases]

    def run(case: ShapeCase) -> ShapeResult:
        # Cases start in the given order: a large one is not overtaken for ever.
        with turn:
            turn.wait_for(lambda: order[0] == case.name)
        try:
            pool.reserve(min(case.slots, slots))
        finally:
            with turn:
                order.pop(0)
                turn.notify_all()
        try:
            result = runner(cluster, case)
            if result.disturbed:
                log.warning("%s: a TaskManager crash disturbed it; running it again", case.name)
                first = result.summary()
                result = runner(cluster, case)
                result.reruns.append(first)
            return result
        finally:
            pool.release(min(case.slots, slots))

    futures = {case.name: executor.submit(run, case) for case in cases}
    executor.shutdown(wait=False)
    return futures
