"""The control loop's ``flink`` collector: observations of the jobs in the job registry.

Each tick :class:`RegisteredJobsCollector` reads the registry
(:class:`~kubesage.adapters.flink.registry.JobRegistry`: the latest run of each job,
with its JobManager URL), asks every JobManager once which of those jobs run, and
measures each RUNNING one with the job's
:class:`~kubesage.adapters.flink.collector.ObservationCollector` — kept across ticks,
because it turns Flink's cumulative counters into rates over a sliding window. The
snapshot's data, :class:`RegisteredJobs`, lists the jobs observed, the jobs that could
not be read (which, at which JobManager, and why) and the jobs not running.

A JobManager that does not answer hides only its own jobs. When nothing at all can be
read (the registry, or every listed job), the last good snapshot comes back marked
stale with the reason (the :class:`~kubesage.core.perception.Collector` contract);
before a first good one that is a ``DependencyError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesage.adapters.flink.collector import ObservationCollector
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.loop_clients import ClientFor, ClientPool
from kubesage.adapters.flink.observation import Observation
from kubesage.adapters.flink.registry import JobRegistry, RunRecord
from kubesage.core.errors import ConfigError, DependencyError
from kubesage.core.perception import Snapshot

if TYPE_CHECKING:
    from kubesage.core.forecast.forecaster import Forecaster

log = logging.getLogger(__name__)

COLLECTOR_NAME = "flink"
"""The collector's name: its snapshot is ``view.snapshots["flink"]``."""
FINISHED_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})
"""Job states Flink never leaves (globally terminal): the job's window and demand history
are dropped. SUSPENDED is not one: the JobManager lost leadership and an HA failover
resumes the job, so it is kept, reported as not RUNNING, like RESTARTING."""


@dataclass(frozen=True)
class ObservedJob:
    """One registered job, measured this tick."""

    job_key: str
    """Its identity across runs (the registry's ``job_key``)."""
    jobmanager: str
    observation: Observation

    @property
    def job_id(self) -> str:
        return self.observation.job_id


@dataclass(frozen=True)
class JobProblem:
    """A registered job that was not measured this tick, and why."""

    job_key: str
    job_id: str
    jobmanager: str
    reason: str

    def describe(self) -> str:
        return f"job {self.job_key} ({self.job_id}) at {self.jobmanager}: {self.reason}"


@dataclass(frozen=True)
class RegisteredJobs:
    """What the ``flink`` collector saw on one tick."""

    jobs: tuple[ObservedJob, ...] = ()
    """The RUNNING jobs measured, in registry order."""
    failed: tuple[JobProblem, ...] = ()
    """Jobs whose JobManager did not answer, or answered something unusable."""
    not_running: tuple[JobProblem, ...] = ()
    """Jobs their JobManager reports in another state, or no longer knows."""


def latest_runs(registry: JobRegistry) -> list[RunRecord]:
    """The latest run of each job in ``registry``, oldest job first."""
    latest: dict[str, RunRecord] = {}
    for run in registry.runs():
        latest.pop(run.job_key, None)  # a newer run moves the job to the end
        latest[run.job_key] = run
    return list(latest.values())


class RegisteredJobsCollector:
    """The ``flink`` collector (see the module docstring)."""

    def __init__(
        self,
        registry: JobRegistry,
        clients: ClientFor | None = None,
        *,
        window_s: float = 20.0,
        clock: Callable[[], float] = time.time,
        forecaster: Forecaster | None = None,
        name: str = COLLECTOR_NAME,
    ) -> None:
        self.registry = registry
        self.clients: ClientFor = clients if clients is not None else ClientPool()
        self.window_s = window_s
        self.clock = clock
        self.forecaster = forecaster
        self._name = name
        self._failures = 0
        self._measuring: dict[str, ObservationCollector] = {}
        """Job id → its collector, kept while the job may run again."""
        self._last: Snapshot[RegisteredJobs] | None = None

    def close(self) -> None:
        """Close the clients this collector made (the loop calls it on shutdown)."""
        if isinstance(self.clients, ClientPool):
            self.clients.close()

    @property
    def name(self) -> str:
        return self._name

    @property
    def failures(self) -> int:
        """Collections in which some registered job could not be read."""
        return self._failures

    def collect(self) -> Snapshot[RegisteredJobs]:
        try:
            runs = latest_runs(self.registry)
        except ConfigError as exc:
            self._failures += 1
            return self._fallback(f"the Flink job registry cannot be read: {exc}")
        observed: list[ObservedJob] = []
        failed: list[JobProblem] = []
        not_running: list[JobProblem] = []
        keep: set[str] = set()
        for jobmanager, group in _by_jobmanager(runs).items():
            self._read_jobmanager(jobmanager, group, observed, failed, not_running, keep)
        for job_id in set(self._measuring) - keep:
            del self._measuring[job_id]  # finished, replaced by a newer run, or unregistered
        if failed:
            self._failures += 1
            if not observed and not not_running:
                return self._fallback("; ".join(problem.describe() for problem in failed))
        data = RegisteredJobs(tuple(observed), tuple(failed), tuple(not_running))
        self._last = Snapshot(data, self.clock())
        return self._last

    def _read_jobmanager(
        self,
        jobmanager: str,
        runs: list[RunRecord],
        observed: list[ObservedJob],
        failed: list[JobProblem],
        not_running: list[JobProblem],
        keep: set[str],
    ) -> None:
        """Measure ``runs`` (all on ``jobmanager``) into the three lists."""
        try:
            client = self.clients(jobmanager)
            states = {job.job_id: job.state for job in client.jobs()}
        except FlinkError as exc:
            for run in runs:
                keep.add(run.job_id)  # its window survives a JobManager's short outage
                failed.append(_problem(run, f"the JobManager did not answer: {exc}"))
            return
        for run in runs:
            state = states.get(run.job_id)
            if state is None:
                not_running.append(_problem(run, "unknown to its JobManager (expired or lost)"))
                continue
            if state in FINISHED_STATES:
                not_running.append(_problem(run, f"{state}"))
                continue
            keep.add(run.job_id)
            if state != "RUNNING":
                not_running.append(_problem(run, f"{state}, not RUNNING"))
                continue
            measuring = self._measuring.get(run.job_id)
            if measuring is None:
                measuring = self._measuring[run.job_id] = ObservationCollector(
                    client,
                    run.job_id,
                    window_s=self.window_s,
                    clock=self.clock,
                    forecaster=self.forecaster,
                )
            try:
                observation = measuring.collect()
            except FlinkError as exc:
                failed.append(_problem(run, f"could not be measured: {exc}"))
                continue
            observed.append(ObservedJob(run.job_key, jobmanager, observation))

    def _fallback(self, reason: str) -> Snapshot[RegisteredJobs]:
        """The last good snapshot, marked stale; before one exists, a DependencyError."""
        log.warning("flink collector: nothing could be read (%s)", reason)
        if self._last is None:
            raise DependencyError(f"no Flink job could be read: {reason}")
        return Snapshot(self._last.data, self._last.taken_at, stale=True, reason=reason)


def _by_jobmanager(runs: Iterable[RunRecord]) -> dict[str, list[RunRecord]]:
    grouped: dict[str, list[RunRecord]] = {}
    for run in runs:
        grouped.setdefault(run.jobmanager.rstrip("/"), []).append(run)
    return grouped


def _problem(run: RunRecord, reason: str) -> JobProblem:
    return JobProblem(run.job_key, run.job_id, run.jobmanager, reason)
