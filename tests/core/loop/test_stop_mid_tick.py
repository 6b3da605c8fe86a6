"""Fixes for a loop that loses the Lease mid-tick, and for dry run: the stop event is
seen before every action and plan step, a plan stopped mid-way releases what it holds
and is audited ``stopped`` (not failed), the stopper returns only once the tick in
flight has ended, a replica that starts leading reads what the other wrote to the
shared audit file, and a dry-run loop claims no pods from the secondary scheduler."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubesage.core.loop import control
from kubesage.core.loop.actions import Action
from kubesage.core.loop.audit import AuditLog
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.reconciler import Result
from kubesage.core.loop.view import PodInfo
from kubesage.core.observability import metrics
from tests.core.loop.doubles import RecordingActuator, Scripted, evict, free_arrays, same_free
from tests.core.loop.test_control import make_loop, migration, outcomes


def stop_after(actuator: RecordingActuator, executed: int) -> threading.Event:
    """An event set (leadership lost) while the actuator executes its ``executed``-th action."""
    stop = threading.Event()

    def hook(action: Action) -> None:
        if len(actuator.executed) == executed:
            stop.set()

    actuator.during.append(hook)
    return stop


def test_no_action_starts_once_the_loop_is_told_to_stop() -> None:
    five = Scripted("defrag", lambda view: [evict(f"p{i}") for i in range(5)])
    later = Scripted("elastic", lambda view: [evict("q", reconciler="elastic")])
    actuator = RecordingActuator()
    loop, _, _ = make_loop([five, later], actuator)
    stopped = metrics.LOOP_ACTIONS.labels("defrag", "evict", "stopped")._value.get()
    report = loop.tick(stop_after(actuator, 2))
    assert [o for _, _, o in outcomes(report.records)] == ["done"] * 2 + ["stopped"] * 3
    assert [a.target for a in actuator.executed] == ["default/p0", "default/p1"]
    assert "the loop is stopping" in report.records[-1].detail
    assert later.views == []  # not asked: nothing it answered could be executed
    assert report.stopped and report.to_json()["stopped"] is True
    assert metrics.LOOP_ACTIONS.labels("defrag", "evict", "stopped")._value.get() == stopped + 3


def test_a_plan_stopped_mid_way_releases_its_reservations_and_is_audited_stopped() -> None:
    actuator = RecordingActuator()
    loop, _, collector = make_loop([Scripted("defrag", lambda view: [migration()])], actuator)
    before = free_arrays(collector.state)
    report = loop.tick(stop_after(actuator, 1))
    assert outcomes(report.records) == [
        ("evict", "default/a", "done"),
        ("plan", "migrate-waiting", "stopped"),
    ]
    detail = report.records[-1].detail
    assert "stopped before step 2/3 (evict default/b)" in detail
    assert "done before it: evict default/a" in detail and "reservations released" in detail
    assert loop.world.state is not None and same_free(free_arrays(loop.world.state), before)

    # The next leader (or this one, leading again) finishes it without repeating step 1.
    report = loop.tick()
    assert [o for _, _, o in outcomes(report.records)] == ["already-done", "done", "done", "done"]


class Blocking(RecordingActuator):
    """Each action waits until ``release`` is set (an API call under a brown-out)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def execute(self, action: Action) -> Result:
        self.entered.set()
        assert self.release.wait(30.0)
        return super().execute(action)


def test_the_stopper_returns_only_once_the_tick_in_flight_has_ended(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(control, "_STOP_WAIT_S", 0.05, raising=False)
    actuator = Blocking()
    many = Scripted("defrag", lambda view: [evict(f"p{i}") for i in range(8)])
    loop, _, _ = make_loop([many], actuator)
    stopper = loop.start()
    assert actuator.entered.wait(30.0)
    stopping = threading.Thread(target=stopper)
    stopping.start()
    stopping.join(0.5)
    assert stopping.is_alive()  # the action in flight is waited for
    actuator.release.set()
    stopping.join(30.0)
    assert not stopping.is_alive()
    assert [a.target for a in actuator.executed] == ["default/p0"]  # and nothing after it
    last = loop.audit.recent()
    assert [r.outcome for r in last if r.action == "evict"] == ["done"] + ["stopped"] * 7
    assert "still waiting for the action in flight" in caplog.text  # said while it waited


def test_a_replica_that_starts_leading_reads_what_the_leader_before_it_wrote(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    clock = SimulatedClock(1000.0)
    wants = Scripted("defrag", lambda view: [evict("a")])
    # Both replicas start (and open the shared audit file) before either leads.
    first, _, _ = make_loop([wants], clock=clock, audit=AuditLog(path))
    standby_actuator = RecordingActuator()
    ticked = threading.Event()

    def once_leading(view: object) -> list[Action]:
        ticked.set()
        return [evict("a")]

    seen = Scripted("defrag", once_leading)
    standby, _, _ = make_loop([seen], standby_actuator, clock=clock, audit=AuditLog(path))

    assert outcomes(first.tick().records) == [("evict", "default/a", "done")]
    first.close()  # the first leader goes away; the standby takes the Lease
    stopper = standby.start()
    assert ticked.wait(30.0)
    stopper()
    assert standby_actuator.executed == []
    assert {r.outcome for r in standby.audit.recent() if r.reconciler == "defrag"} >= {
        "already-done"
    }


@dataclass
class Claiming(Scripted):
    """A reconciler that places every pending pod itself (a gang placer)."""

    def claims(self, pods: Sequence[PodInfo]) -> bool:
        return True


def test_a_dry_run_loop_claims_no_pods_from_the_secondary_scheduler() -> None:
    live, _, _ = make_loop([Claiming("gpu-gang", lambda view: [])])
    assert live.claims([]) is True
    dry, _, _ = make_loop([Claiming("gpu-gang", lambda view: [])], dry_run=True)
    assert dry.claims([]) is False
