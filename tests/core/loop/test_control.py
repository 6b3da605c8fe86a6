"""The control loop on a simulated clock, with test doubles of its own protocols:
budgets, dry run, stale data, plans rolled back, failing reconcilers and collectors,
a new leader reading the audit log, and the metrics."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesage.core.cli.loop import tick_failures
from kubesage.core.loop.actions import Action, ActionKind, Bind, Plan, PodRef, Reservation
from kubesage.core.loop.audit import AuditLog, AuditRecord
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.reconciler import Actuator, Outcome, Reconciler, Result
from kubesage.core.loop.world import ClusterObservation, WorldModel
from kubesage.core.observability import metrics
from kubesage.core.perception import Snapshot
from tests.core.loop.doubles import (
    ClusterCollector,
    Raising,
    RecordingActuator,
    RehearsingActuator,
    Scripted,
    evict,
    free_arrays,
    same_free,
    scale,
    small_state,
    whole_gpu_pod,
)


def make_loop(
    reconcilers: Sequence[Reconciler],
    actuator: Actuator | None = None,
    *,
    clock: SimulatedClock | None = None,
    collector: ClusterCollector | None = None,
    **options: object,
) -> tuple[ControlLoop, SimulatedClock, ClusterCollector]:
    clock = clock or SimulatedClock(1000.0)
    collector = collector or ClusterCollector(clock, small_state())
    loop = ControlLoop(
        clock,
        {collector.name: collector},
        WorldModel(),
        reconcilers,
        [actuator or RecordingActuator()],
        **options,  # type: ignore[arg-type]
    )
    return loop, clock, collector


def outcomes(report_records: Sequence[object]) -> list[tuple[str, str, str]]:
    return [
        (r.action, r.target, r.outcome)  # type: ignore[attr-defined]
        for r in report_records
        if r.action != "note"  # type: ignore[attr-defined]
    ]


def test_evictions_are_bounded_per_tick_and_a_zero_budget_says_why() -> None:
    six = Scripted("defrag", lambda view: [evict(f"p{i}") for i in range(6)])
    actuator = RecordingActuator()
    loop, _, _ = make_loop([six], actuator, budgets=Budgets({ActionKind.EVICT: 4}))
    report = loop.tick()
    assert [o for _, _, o in outcomes(report.records)] == ["done"] * 4 + ["over-budget"] * 2
    assert len(actuator.executed) == 4

    actuator = RecordingActuator()
    loop, _, _ = make_loop([six], actuator, budgets=Budgets({ActionKind.EVICT: 0}))
    report = loop.tick()
    assert {o for _, _, o in outcomes(report.records)} == {"over-budget"}
    assert actuator.executed == []
    assert "budget for evict is 0 per tick" in report.records[-1].detail


def test_a_stale_fallback_stamped_now_still_ages_from_when_its_source_was_current() -> None:
    """A collector serving its last content while its source fails may stamp the copy
    with the time it made it (ClusterSync while its watch is broken): the loop reads
    that data as taken when the source was last current, so it stops acting on it."""
    one = Scripted("elastic", lambda view: [scale(2)])
    actuator = RecordingActuator()
    loop, clock, collector = make_loop([one], actuator, max_data_age_s=30.0)
    assert outcomes(loop.tick().records)[0][2] == "done"
    went_down = clock.now()
    fresh_copy = collector.collect

    def stale_but_stamped_now() -> Snapshot[ClusterObservation]:
        return Snapshot(fresh_copy().data, clock.now(), stale=True, reason="watch broken")

    collector.collect = stale_but_stamped_now  # type: ignore[method-assign]
    one.answer = lambda view: [scale(3)]
    clock.advance(10.0)
    assert outcomes(loop.tick().records)[0][2] == "done"  # 10 s since current: usable
    clock.advance(30.0)
    one.answer = lambda view: [scale(4)]
    report = loop.tick()
    assert report.stale and report.data_age_s == clock.now() - went_down == 40.0
    assert outcomes(report.records)[0][2] == "stale"
    collector.collect = fresh_copy  # type: ignore[method-assign]
    one.answer = lambda view: [scale(5)]
    assert outcomes(loop.tick().records)[0][2] == "done"  # current again


def test_dry_run_executes_nothing_and_still_applies_budgets() -> None:
    three = Scripted("defrag", lambda view: [evict(f"p{i}") for i in range(3)])
    actuator = RecordingActuator()
    loop, _, _ = make_loop([three], actuator, budgets=Budgets({ActionKind.EVICT: 2}), dry_run=True)
    report = loop.tick()
    assert [o for _, _, o in outcomes(report.records)] == ["dry-run", "dry-run", "over-budget"]
    assert actuator.executed == []
    assert loop.debug()["actions"][-1]["outcome"] == "over-budget"


def test_no_action_on_stale_data_and_it_is_counted() -> None:
    one = Scripted("elastic", lambda view: [scale(2)])
    actuator = RecordingActuator()
    loop, clock, collector = make_loop([one], actuator, max_data_age_s=30.0)
    assert outcomes(loop.tick().records) == [("scale", str(scale(2).target), "done")]
    stale_ticks = metrics.LOOP_STALE_TICKS._value.get()
    stale_actions = metrics.LOOP_ACTIONS.labels("elastic", "scale", "stale")._value.get()

    collector.frozen_at = clock.now()  # the source goes down; its last snapshot ages
    one.answer = lambda view: [scale(3)]
    clock.advance(10.0)
    assert outcomes(loop.tick().records)[0][2] == "done"  # 10 s old: still usable
    clock.advance(30.0)
    one.answer = lambda view: [scale(4)]
    report = loop.tick()
    assert report.stale and report.data_age_s == 40.0
    assert outcomes(report.records)[0][2] == "stale"
    assert len(actuator.executed) == 2
    assert metrics.LOOP_STALE_TICKS._value.get() == stale_ticks + 1
    assert metrics.LOOP_ACTIONS.labels("elastic", "scale", "stale")._value.get() == (
        stale_actions + 1
    )
    assert report.collectors[0].stale and report.collectors[0].detail == "source down"


@dataclass
class ReadsCluster(Scripted):
    """A reconciler that decides from the cluster's snapshot alone."""

    @property
    def reads(self) -> frozenset[str]:
        return frozenset()


@dataclass
class MetricsSource:
    """A metrics collector (no cluster state): fresh, or down since ``down_at``."""

    clock: SimulatedClock
    down_at: float | None = None
    name: str = "metrics"
    failures: int = 0

    def collect(self) -> Snapshot[dict[str, float]]:
        if self.down_at is not None:
            return Snapshot({}, self.down_at, stale=True, reason="down")
        return Snapshot({}, self.clock.now())


def test_the_data_age_gate_looks_only_at_what_a_reconciler_reads() -> None:
    clock = SimulatedClock(1000.0)
    cluster = ClusterCollector(clock, small_state())
    metrics_source = MetricsSource(clock)
    everything = Scripted("elastic", lambda view: [scale(2)])
    cluster_only = ReadsCluster("defrag", lambda view: [evict("a")])
    loop = ControlLoop(
        clock,
        {cluster.name: cluster, metrics_source.name: metrics_source},
        WorldModel(),
        [everything, cluster_only],
        [RecordingActuator()],
        max_data_age_s=30.0,
    )
    loop.tick()
    metrics_source.down_at = clock.now()
    clock.advance(60.0)
    everything.answer = lambda view: [scale(3)]
    cluster_only.answer = lambda view: [evict("b")]
    report = loop.tick()
    by_reconciler = {r.reconciler: r for r in report.records if r.action != "note"}
    assert by_reconciler["elastic"].outcome == "stale"
    assert "(metrics)" in by_reconciler["elastic"].detail
    assert by_reconciler["defrag"].outcome == "done"
    assert report.stale  # the tick as a whole had data over the age


def migration(state_node: int = 2) -> Plan:
    """Evict two pods, then bind the waiting one on node-2 (reserved first)."""
    waiting = whole_gpu_pod("waiting", gpus=4)
    state = small_state()
    placement = state.placement(state_node, [0, 1, 2, 3], waiting)
    return Plan(
        id="migrate-waiting",
        reconciler="defrag",
        explanation="make room for default/waiting",
        steps=(
            evict("a", plan="migrate-waiting"),
            evict("b", plan="migrate-waiting"),
            Bind(
                reconciler="defrag",
                explanation="bind the waiting pod",
                plan="migrate-waiting",
                pod=PodRef("default", "waiting"),
                request=waiting,
                placement=placement,
            ),
        ),
        reservations=(Reservation(request=waiting, placement=placement),),
    )


def test_a_plan_whose_second_step_fails_is_rolled_back_and_its_reservation_released() -> None:
    planner = Scripted("defrag", lambda view: [migration()])
    actuator = RecordingActuator({"default/b": Result(Outcome.FAILED, "API server said 500")})
    held: list[int] = []
    loop, _, collector = make_loop([planner], actuator)
    actuator.during.append(
        lambda action: held.append(int(loop.world.state.gpu_whole_free_count[2]))  # type: ignore[union-attr]
    )
    before = free_arrays(collector.state)
    report = loop.tick()
    assert outcomes(report.records) == [
        ("evict", "default/a", "done"),
        ("evict", "default/b", "failed"),
        ("plan", "migrate-waiting", "rolled-back"),
    ]
    assert held == [0, 0]  # node-2's four GPUs were reserved while the steps ran
    plan_record = report.records[-1]
    assert "step 2/3 (evict default/b) failed: API server said 500" in plan_record.detail
    assert "done before it: evict default/a" in plan_record.detail
    assert loop.world.state is not None and same_free(free_arrays(loop.world.state), before)
    assert [a.target for a in actuator.executed] == ["default/a", "default/b"]

    # Next tick the reconciler still wants it: the done eviction is not repeated.
    actuator.outcomes.clear()
    report = loop.tick()
    assert outcomes(report.records) == [
        ("evict", "default/a", "already-done"),
        ("evict", "default/b", "done"),
        ("bind", "default/waiting", "done"),
        ("plan", "migrate-waiting", "done"),
    ]
    # Nothing is held any more; the bind that happened is accounted where it went.
    bound = collector.state.copy()
    waiting = migration().steps[-1]
    assert isinstance(waiting, Bind)
    bound.allocate(waiting.request, waiting.placement)
    assert same_free(free_arrays(loop.world.state), free_arrays(bound))


def test_a_plan_whose_later_step_would_be_refused_evicts_nothing() -> None:
    """b's eviction would be refused (its rehearsal, a dry run, says so): the plan does
    not start, so a is not evicted in vain, and the refusal is audited on b's eviction,
    where the reconcilers' view of recent refusals finds it."""
    planner = Scripted("defrag", lambda view: [migration()])
    actuator = RehearsingActuator({"default/b": "eviction of pod default/b refused: PDB"})
    loop, _, collector = make_loop([planner], actuator)
    before = free_arrays(collector.state)
    report = loop.tick()
    assert outcomes(report.records) == [
        ("evict", "default/b", "refused"),
        ("plan", "migrate-waiting", "refused"),
    ]
    refused = [r for r in report.records if r.action == "evict"]
    assert [r.detail for r in refused] == ["dry run: eviction of pod default/b refused: PDB"]
    assert "step 2/3 (evict default/b) would be refused; the plan was not started" in (
        report.records[-1].detail
    )
    assert actuator.executed == []
    # the first step is not rehearsed: doing it when it would be refused is no worse
    assert [a.target for a in actuator.rehearsed] == ["default/b"]
    assert loop.world.state is not None and same_free(free_arrays(loop.world.state), before)
    assert set(loop.audit.refused(loop.clock.now())) == {"evict:default/b"}


def test_a_plan_whose_rehearsal_outlasts_its_data_is_not_started() -> None:
    """The rehearsal's API calls take time: data fresh when the plan was reached can be
    too old once they are done, and then nothing of the plan runs."""
    planner = Scripted("defrag", lambda view: [migration()])
    actuator = RehearsingActuator({})
    loop, clock, _ = make_loop([planner], actuator, max_data_age_s=30.0)
    rehearse = actuator.rehearse

    def slow(action: Action, before: Sequence[Action] = ()) -> Result | None:
        clock.advance(31.0)
        return rehearse(action, before)

    actuator.rehearse = slow  # type: ignore[method-assign]
    report = loop.tick()
    assert outcomes(report.records)[-1] == ("plan", "migrate-waiting", "stale")
    assert actuator.executed == []


def test_a_plan_whose_rehearsal_passes_runs_as_before() -> None:
    planner = Scripted("defrag", lambda view: [migration()])
    actuator = RehearsingActuator({})
    loop, _, _ = make_loop([planner], actuator)
    report = loop.tick()
    assert outcomes(report.records)[-1] == ("plan", "migrate-waiting", "done")
    assert [a.target for a in actuator.rehearsed] == ["default/b"]
    assert actuator.before == [["default/a"]]  # rehearsed as it will run: after a's eviction
    assert [a.target for a in actuator.executed] == ["default/a", "default/b", "default/waiting"]


def test_a_plan_whose_target_cannot_be_reserved_is_not_started() -> None:
    collector_state = small_state()
    collector_state.allocate(
        whole_gpu_pod("squatter"), collector_state.placement(2, [0], whole_gpu_pod("squatter"))
    )
    clock = SimulatedClock(0.0)
    collector = ClusterCollector(clock, collector_state)
    actuator = RecordingActuator()
    loop, _, _ = make_loop(
        [Scripted("defrag", lambda view: [migration()])],
        actuator,
        clock=clock,
        collector=collector,
    )
    report = loop.tick()
    assert outcomes(report.records) == [("plan", "migrate-waiting", "refused")]
    assert "the plan was not started" in report.records[-1].detail
    assert actuator.executed == []


def test_a_reconciler_that_raises_does_not_stop_the_loop() -> None:
    healthy = Scripted("elastic", lambda view: [scale(2)])
    errors = metrics.LOOP_RECONCILER_ERRORS.labels("broken")._value.get()
    loop, clock, _ = make_loop([Raising(), healthy])
    first = loop.tick()
    assert first.reconciler_errors == {"broken": "ZeroDivisionError: a bug"}
    assert outcomes(first.records) == [("scale", str(scale(2).target), "done")]
    clock.advance(5.0)
    second = loop.tick()
    assert second.tick == 2 and len(healthy.views) == 2
    assert healthy.views[1].memory == {"seen": 1}  # its memory came back
    assert metrics.LOOP_RECONCILER_ERRORS.labels("broken")._value.get() == errors + 2
    notes = [r for r in loop.audit.recent() if r.reconciler == "broken"]
    assert len(notes) == 1 and notes[0].outcome == "failed"  # audited once, not per tick


def test_the_data_age_gate_looks_at_the_clock_when_an_action_would_start() -> None:
    # Each of ten Scale calls hangs for its 10 s timeout: by the time the next
    # reconciler's eviction would run, the snapshot (taken at the tick's start) is 100 s
    # old, over the 60 s allowed. Ages were taken at the tick's start before.
    clock = SimulatedClock(1000.0)

    @dataclass
    class Hanging:
        kinds = frozenset(ActionKind)

        def execute(self, action: object) -> Result:
            clock.advance(10.0)
            return Result(Outcome.FAILED, "timed out")

    elastic = Scripted("elastic", lambda view: [scale(n) for n in range(2, 12)])
    defrag = Scripted("defrag", lambda view: [evict("victim")])
    loop, _, _ = make_loop([elastic, defrag], Hanging(), clock=clock, max_data_age_s=60.0)
    report = loop.tick()
    outcome = {(a, o) for a, _, o in outcomes(report.records)}
    assert ("scale", "failed") in outcome and ("scale", "stale") in outcome
    assert ("evict", "stale") in outcome and ("evict", "failed") not in outcome


def test_a_clock_stepped_back_during_a_tick_does_not_stretch_the_wait() -> None:
    # The wall clock steps back an hour while a tick runs (NTP, a resumed VM): the loop
    # waits one tick_s for the next tick, not an hour and tick_s.
    class SteppedBack(SimulatedClock):
        def __init__(self) -> None:
            super().__init__(10_000.0)
            self.step_s = 0.0
            self.waits: list[float] = []

        def now(self) -> float:
            return super().now() + self.step_s

        def sleep(self, seconds: float, stop: threading.Event) -> bool:
            self.waits.append(seconds)
            stop.set()
            return True

    clock = SteppedBack()

    def step_back(view: object) -> list[Action]:
        clock.step_s = -3600.0
        return []

    stepping = Scripted("elastic", step_back)
    loop, _, _ = make_loop([stepping], clock=clock, tick_s=5.0)
    loop.run(threading.Event())
    assert clock.waits == [5.0]


def test_notes_are_audited_when_they_change_and_again_when_they_come_back() -> None:
    placer = Scripted("placer", lambda view: [], notes=("pod x fits nowhere",))
    loop, clock, _ = make_loop([placer])
    said = []
    for notes in (("pod x fits nowhere",), ("pod x fits nowhere",), (), ("pod x fits nowhere",)):
        placer.notes = notes
        said.append([r.explanation for r in loop.tick().records if r.reconciler == "placer"])
        clock.advance(5.0)
    # Once, not again while it holds; a tick without it, then the same words again.
    assert said == [["pod x fits nowhere"], [], [], ["pod x fits nowhere"]]


def test_a_collector_failing_before_its_first_snapshot_is_counted_and_skipped() -> None:
    wants = Scripted("elastic", lambda view: [scale(2)])
    clock = SimulatedClock(0.0)
    collector = ClusterCollector(clock, small_state())
    collector.fail_first = 1
    loop, _, _ = make_loop([wants], clock=clock, collector=collector)
    failed = metrics.LOOP_COLLECTOR_ERRORS.labels("cluster")._value.get()
    report = loop.tick()
    assert not report.collectors[0].ok and "source not reachable yet" in report.collectors[0].detail
    assert wants.views == [] and outcomes(report.records) == []
    assert metrics.LOOP_COLLECTOR_ERRORS.labels("cluster")._value.get() == failed + 1
    assert outcomes(loop.tick().records)[0][2] == "done"


def test_a_new_leader_does_not_repeat_what_the_audit_log_says_is_done(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    wants = Scripted("defrag", lambda view: [evict("a"), scale(2, reconciler="defrag")])
    first_actuator = RecordingActuator()
    first, clock, _ = make_loop([wants], first_actuator, audit=AuditLog(path))
    first.tick()
    first.audit.close()
    assert len(first_actuator.executed) == 2

    # The leader changes; the new one asks for the same actions (and one more).
    wants.answer = lambda view: [evict("a"), evict("b"), scale(2, reconciler="defrag")]
    second_actuator = RecordingActuator()
    second, _, _ = make_loop([wants], second_actuator, clock=clock, audit=AuditLog(path))
    report = second.tick()
    assert [o for _, _, o in outcomes(report.records)] == ["already-done", "done", "already-done"]
    assert [a.target for a in second_actuator.executed] == ["default/b"]
    # Scaling back and forth is not "already done": only the last scale of a target counts.
    wants.answer = lambda view: [scale(4, reconciler="defrag"), scale(2, reconciler="defrag")]
    assert [o for _, _, o in outcomes(second.tick().records)] == ["done", "done"]
    lines = path.read_text().splitlines()
    assert len(lines) >= 7


def test_metrics_count_ticks_durations_and_actions() -> None:
    ticks = metrics.LOOP_TICKS._value.get()
    done = metrics.LOOP_ACTIONS.labels("counted", "evict", "done")._value.get()
    loop, clock, _ = make_loop([Scripted("counted", lambda view: [evict("x", "counted")])])
    loop.tick()
    clock.advance(5.0)
    loop.tick()  # the same eviction again: already done
    assert metrics.LOOP_TICKS._value.get() == ticks + 2
    assert metrics.LOOP_ACTIONS.labels("counted", "evict", "done")._value.get() == done + 1
    assert metrics.LOOP_ACTIONS.labels("counted", "evict", "already-done")._value.get() >= 1
    text = metrics.render()[0].decode()
    assert "kubesage_loop_tick_seconds_count" in text
    assert 'kubesage_loop_actions_total{action="evict",outcome="done",reconciler="counted"}' in text


def test_run_ticks_on_the_simulated_clock_until_stopped() -> None:
    stop = threading.Event()

    def answer(view: object) -> list[object]:
        if len(counting.views) == 3:
            stop.set()
        return []

    counting = Scripted("counting", answer)  # type: ignore[arg-type]
    loop, clock, _ = make_loop([counting], tick_s=5.0)
    start = clock.now()
    loop.run(stop)
    assert loop.ticks == 3
    assert [view.now_s - start for view in counting.views] == [0.0, 5.0, 10.0]
    debug = loop.debug()
    assert debug["ticks"] == 3 and debug["clock"] == "simulated"
    assert debug["reconcilers"] == ["counting"]
    assert debug["forecaster"] == "last-value (cold start)"


def test_close_closes_the_audit_log_and_every_part_that_can_be_closed(tmp_path: Path) -> None:
    closed: list[str] = []

    class Closing(RecordingActuator):
        def close(self) -> None:
            closed.append("actuator")

    class ClosingSource(MetricsSource):
        def close(self) -> None:
            closed.append("collector")
            raise OSError("already gone")  # one failing close does not stop the rest

    clock = SimulatedClock(1000.0)
    cluster = ClusterCollector(clock, small_state())
    source = ClosingSource(clock)
    audit = AuditLog(tmp_path / "audit.jsonl")
    loop = ControlLoop(
        clock, {cluster.name: cluster, source.name: source}, WorldModel(), [], [Closing()],
        audit=audit,
    )  # fmt: skip
    loop.close()
    assert sorted(closed) == ["actuator", "collector"]
    # The file is closed: a record appended now stays in memory only.
    audit.append(AuditRecord(1, 0.0, "test", "note", "", "", None, "after close", "noted"))
    assert audit.recent()[-1].explanation == "after close"
    assert (tmp_path / "audit.jsonl").read_text() == ""


def test_what_loop_once_reports_as_failed_counts_a_raising_reconciler_once() -> None:
    """``kubesage loop --once`` exits 1 on these; a raising reconciler's audit note (its
    outcome is "failed" too) is not also counted as a failed action."""
    loop, _, _ = make_loop([Raising()])
    assert tick_failures(loop.tick()) == ["reconciler broken raised"]
    failing = RecordingActuator({"default/a": Result(Outcome.FAILED, "API server said 500")})
    loop, _, _ = make_loop([Scripted("defrag", lambda view: [evict("a")])], failing)
    assert tick_failures(loop.tick()) == ["1 action failed"]
