"""``kubesage flink stagger`` plans again when the running jobs change: a job submitted
in driven mode after the coordinator started (or resubmitted under a new id) would
otherwise never checkpoint. Flink is stood in for by the profiles and a coordinator
that records what it was asked to drive; the real one is tested against recorded
replies (test_cli.py) and the local cluster (test_stagger_integration.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubesage.adapters.flink import stagger_rounds
from kubesage.adapters.flink.checkpoint_coordinator import CoordinatorReport
from kubesage.adapters.flink.registry import JobRegistry
from kubesage.adapters.flink.stagger import CheckpointProfile, StaggerPlan, plan_stagger

A, B = "a" * 32, "b" * 32


class DrivingCoordinator:
    """Records each plan it drives; runs until told to stop."""

    driven: ClassVar[list[list[str]]] = []

    def __init__(self, client: Any, plan: StaggerPlan, **options: Any) -> None:
        self.plan = plan

    def now_ms(self) -> int:
        return 0

    def run(self, *, stop: threading.Event, **window: Any) -> CoordinatorReport:
        DrivingCoordinator.driven.append(sorted(self.plan.phases_ms))
        stop.wait(5.0)
        return CoordinatorReport()


def test_a_job_that_starts_running_is_planned_in_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def profiles(client: Any, registry: Any, jobs: list[str], **options: Any) -> list[Any]:
        return [CheckpointProfile(job, 10_000, 500) for job in jobs]

    monkeypatch.setattr(stagger_rounds, "stagger_profiles", profiles)
    monkeypatch.setattr(stagger_rounds, "CheckpointCoordinator", DrivingCoordinator)
    DrivingCoordinator.driven = []
    listed = [[A], [A], [A, B]]  # B is submitted while A is driven
    stop = threading.Event()
    said: list[str] = []

    def running() -> list[str]:
        jobs = listed.pop(0) if len(listed) > 1 else listed[0]
        if len(DrivingCoordinator.driven) == 2:
            stop.set()  # the second plan is being driven: enough
        return jobs

    rounds = stagger_rounds.run_stagger_rounds(
        object(),  # type: ignore[arg-type]
        JobRegistry(tmp_path / "jobs.yaml"),
        named=[],
        running=running,
        stop=stop,
        plan_jobs=plan_stagger,
        interval_ms=None,
        probe_rounds=0,
        say=said.append,
        on_plan=lambda plan, profiles: None,
        on_record=lambda record: None,
        job_check_s=0.02,
    )

    assert DrivingCoordinator.driven[:2] == [[A], [A, B]]
    assert [sorted(plan.phases_ms) for plan in rounds.plans][:2] == [[A], [A, B]]
    assert any(f"new: ['{B}']" in note and "planning again" in note for note in said), said


def test_named_jobs_are_planned_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        stagger_rounds,
        "stagger_profiles",
        lambda client, registry, jobs, **options: [CheckpointProfile(A, 10_000, 500)],
    )
    monkeypatch.setattr(stagger_rounds, "CheckpointCoordinator", DrivingCoordinator)
    DrivingCoordinator.driven = []
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()

    def never_listed() -> list[str]:
        raise AssertionError("named jobs are not looked up again")

    rounds = stagger_rounds.run_stagger_rounds(
        object(),  # type: ignore[arg-type]
        JobRegistry(tmp_path / "jobs.yaml"),
        named=[A],
        running=never_listed,
        stop=stop,
        interval_ms=None,
        probe_rounds=0,
        say=lambda note: None,
        on_plan=lambda plan, profiles: None,
        on_record=lambda record: None,
        job_check_s=0.02,
    )
    assert len(rounds.plans) == 1 and DrivingCoordinator.driven == [[A]]


def test_no_plan_starts_after_the_duration_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs change near the end of --duration-s and reading their profiles (probe
    checkpoints, for a job without history) takes past it: nothing is planned,
    recorded or driven after the end."""
    now = [0.0]
    calls: list[list[str]] = []

    def profiles(client: Any, registry: Any, jobs: list[str], **options: Any) -> list[Any]:
        calls.append(jobs)
        if len(calls) == 2:
            now[0] = 20.0  # the probes of the new job took 20 s of a 10 s duration
        return [CheckpointProfile(job, 10_000, 500) for job in jobs]

    monkeypatch.setattr(stagger_rounds, "stagger_profiles", profiles)
    monkeypatch.setattr(stagger_rounds, "CheckpointCoordinator", DrivingCoordinator)
    DrivingCoordinator.driven = []
    listed = [[A], [A, B]]
    planned: list[list[str]] = []
    rounds = stagger_rounds.run_stagger_rounds(
        object(),  # type: ignore[arg-type]
        JobRegistry(tmp_path / "jobs.yaml"),
        named=[],
        running=lambda: listed.pop(0) if len(listed) > 1 else listed[0],
        stop=threading.Event(),
        interval_ms=None,
        probe_rounds=0,
        say=lambda note: None,
        on_plan=lambda plan, profiles: planned.append(sorted(plan.phases_ms)),
        on_record=lambda record: None,
        job_check_s=0.02,
        duration_s=10.0,
        clock=lambda: now[0],
    )
    assert calls == [[A], [A, B]]
    assert planned == [[A]] and DrivingCoordinator.driven == [[A]] and len(rounds.plans) == 1
