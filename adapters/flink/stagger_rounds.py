"""``kubesage flink stagger`` over time: plan, drive, and plan again when the jobs change.

A job submitted in driven mode (``kubesage flink submit``) checkpoints only when the
coordinator triggers it. A coordinator drives the jobs of one plan, so without more a
job submitted after ``stagger`` started — or resubmitted by ``state --apply``, which
gives it a new id — would never checkpoint. Unless the user named the jobs
(``--job``), :func:`run_stagger_rounds` therefore lists the running jobs every
:data:`JOB_CHECK_S` while it drives a plan; when the list changes, the round ends (its
in-flight checkpoints awaited), the profiles are read again and a new plan starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubesage.adapters.flink.checkpoint_coordinator import (
    CheckpointCoordinator,
    CheckpointRecord,
    CoordinatorReport,
    Outcome,
)
from kubesage.adapters.flink.client import FlinkClient
from kubesage.adapters.flink.errors import FlinkError
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile, StaggerPlan, plan_stagger
from kubesage.adapters.flink.stagger_jobs import stagger_profiles

JOB_CHECK_S = 10.0
"""How often the running jobs are listed while a plan is driven."""


@dataclass
class StaggerRounds:
    """What the rounds did: every round's plan and the coordinators' records."""

    plans: list[StaggerPlan] = field(default_factory=list)
    reports: list[CoordinatorReport] = field(default_factory=list)
    started_ms: int = 0

    def count(self, outcome: Outcome) -> int:
        return sum(report.count(outcome) for report in self.reports)

    @property
    def flink_errors(self) -> int:
        return sum(report.flink_errors for report in self.reports)

    def peak_concurrent(self) -> int:
        return max((report.peak_concurrent() for report in self.reports), default=0)


def run_stagger_rounds(
    client: FlinkClient,
    registry: JobRegistry,
    *,
    named: Sequence[str],
    running: Callable[[], list[str]],
    stop: threading.Event,
    plan_jobs: Callable[[list[CheckpointProfile]], StaggerPlan] = plan_stagger,
    interval_ms: int | None,
    probe_rounds: int,
    say: Callable[[str], None],
    on_plan: Callable[[StaggerPlan, list[CheckpointProfile]], None],
    on_record: Callable[[CheckpointRecord], None],
    job_check_s: float = JOB_CHECK_S,
    drive: bool = True,
    duration_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> StaggerRounds:
    """Plan and drive until ``stop`` (see the module docstring); ``running`` lists the
    running jobs' ids. A first round with nothing to drive ends it (``StaggerRounds``
    with no plan); later, the rounds wait for a job to drive. ``drive`` False: plan
    once and return (a dry run; nothing recorded). ``duration_s``: stop that long after
    the first plan starts being driven (probing and planning do not count)."""
    rounds = StaggerRounds()
    deadline_ms: int | None = None

    def over() -> bool:
        """``duration_s`` has passed: read on the clock, not told by a timer that can fire
        late on a loaded machine (a coordinator keeps to its window the same way)."""
        return deadline_ms is not None and int(clock() * 1000) >= deadline_ms

    while not (stop.is_set() or over()):
        jobs = list(named) or running()
        profiles = stagger_profiles(
            client,
            registry,
            jobs,
            named=bool(named),
            say=say,
            interval_ms=interval_ms,
            probe_rounds=probe_rounds,
        )
        if not profiles and not rounds.plans:
            return rounds
        if not drive:
            rounds.plans.append(plan_jobs(profiles))
            on_plan(rounds.plans[-1], profiles)
            return rounds
        if over():  # reading the profiles took the rest: no plan to start after the end
            break
        round_over = threading.Event()
        watcher = None
        if not named:
            watcher = threading.Thread(
                target=_watch,
                args=(running, sorted(jobs), stop, round_over, job_check_s, say),
                name="stagger-jobs",
                daemon=True,
            )
            watcher.start()
        if not profiles:  # every driven job has gone: wait for one
            _wait_for(round_over, stop, over)
            round_over.set()  # ends the watcher of a wait that stop or the deadline ended
            if watcher is not None:
                watcher.join()
            continue
        plan = plan_jobs(profiles)
        on_plan(plan, profiles)
        for profile in profiles:
            registry.update(
                profile.job_id,
                phase_ms=plan.phases_ms[profile.job_id],
                checkpoint_duration_ms=profile.duration_ms,
                checkpoint_size_bytes=profile.size_bytes,
            )
        coordinator = CheckpointCoordinator(client, plan, on_record=on_record, clock=clock)
        started_ms = coordinator.now_ms()
        if not rounds.plans:
            rounds.started_ms = started_ms
            if duration_s is not None:
                deadline_ms = started_ms + int(duration_s * 1000)
        rounds.plans.append(plan)
        either = _either(stop, round_over)
        left_s = None if deadline_ms is None else max(0, deadline_ms - started_ms) / 1000
        rounds.reports.append(
            coordinator.run(stop=either, duration_s=left_s, started_ms=started_ms)
        )
        round_over.set()  # ends the watcher of a round that stop ended
        if watcher is not None:
            watcher.join()
    return rounds


def _watch(
    running: Callable[[], list[str]],
    planned: list[str],
    stop: threading.Event,
    round_over: threading.Event,
    every_s: float,
    say: Callable[[str], None],
) -> None:
    """Sets ``round_over`` once the running jobs are no longer ``planned``."""
    while not round_over.wait(every_s):
        if stop.is_set():
            return
        try:
            now = sorted(running())
        except FlinkError as exc:  # the next look may succeed; the plan goes on
            say(f"listing the running jobs failed ({exc}); the plan goes on")
            continue
        if now != planned:
            added = sorted(set(now) - set(planned))
            gone = sorted(set(planned) - set(now))
            say(f"running jobs changed (new: {added or '-'}, ended: {gone or '-'}): planning again")
            round_over.set()
            return


def _either(first: threading.Event, second: threading.Event) -> threading.Event:
    """An event set once either is (polled by a helper thread)."""
    both = threading.Event()

    def relay() -> None:
        while not both.is_set():
            if first.wait(0.1) or second.is_set():
                both.set()

    threading.Thread(target=relay, name="stagger-stop", daemon=True).start()
    return both


def _wait_for(round_over: threading.Event, stop: threading.Event, over: Callable[[], bool]) -> None:
    while not (round_over.is_set() or stop.is_set() or over()):
        round_over.wait(0.1)
