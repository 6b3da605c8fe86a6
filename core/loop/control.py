"""The control loop: perceive → update the world model → reconcile → act, every tick.

:meth:`ControlLoop.tick` runs one round:

1. **Perceive**: every collector's snapshot. A collector that raises with no earlier
   snapshot is counted and skipped; one that raises after a good snapshot (against
   the protocol) has that snapshot reused, marked stale.
2. **Update** the :class:`~kubesage.core.loop.world.WorldModel` (state, pods, DRTG,
   forecasts).
3. **Reconcile**: each reconciler gets its own :class:`~kubesage.core.loop.view.WorldView`
   (with its memory from the previous tick) and answers actions and plans. One that
   raises is logged, counted and skipped; the loop goes on.
4. **Act**, action by action, in the reconcilers' order, through these gates:
   stopping (the loop was told to stop: leadership lost) → already done (the audit
   log) → stale data (a snapshot the reconciler decides from older than
   ``max_data_age_s``: nothing of it is executed, counted) → the tick's budgets → dry
   run → the actuator for its kind.
   A :class:`~kubesage.core.loop.actions.Plan` is first played on a scratch copy (it
   does not start if it could not fit even after its own evictions), and its steps
   after the first are rehearsed where their actuator can, after the steps before them
   (an eviction's ``dryRun`` and budget: it does not start if one would be refused),
   then holds its reservations in the loop's ClusterState as they become free
   (:class:`~kubesage.core.loop.ledger.PlanLedger`), runs its steps in order, stops at
   the first that fails or is refused, and always releases what it still holds; a
   stopped plan is audited as rolled back (``stopped`` when the loop was told to
   stop) and retried on a later tick if its reconciler still asks for it (steps
   already done are not repeated). A plan is already done while every step is still
   the last action done on its target, and it was recorded done.

Every action considered gets an audit record and a count in
``kubesage_loop_actions_total{reconciler,action,outcome}``. The loop imports neither
the Kubernetes layer nor the telemetry sources: collectors and actuators are injected.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kubesage.core.loop.actions import Action, ActionKind, Plan
from kubesage.core.loop.audit import AuditLog
from kubesage.core.loop.budgets import Budgets
from kubesage.core.loop.clock import Clock
from kubesage.core.loop.data_age import CurrentSince
from kubesage.core.loop.ledger import PlanLedger
from kubesage.core.loop.reconciler import (
    Actuator,
    ClaimsPods,
    Outcome,
    ReadsSources,
    Reconciled,
    Reconciler,
    Rehearses,
    Result,
)
from kubesage.core.loop.report import CollectorStatus, TickReport
from kubesage.core.loop.settings import DEFAULT_MAX_DATA_AGE_S, DEFAULT_TICK_S
from kubesage.core.loop.tick_context import TickContext
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import WorldModel
from kubesage.core.observability import metrics
from kubesage.core.observability.logging import log_event
from kubesage.core.perception import Collector, Snapshot

log = logging.getLogger(__name__)

LOOP = "loop"
"""The reconciler name on the loop's own audit notes (the forecaster in use)."""
_STOPS_A_PLAN = frozenset({Outcome.FAILED, Outcome.REFUSED})
_STOPPING = "not executed: the loop is stopping (leadership lost, or shutting down)"
_STOP_WAIT_S = 10.0
"""How often a stopper waiting for the tick in flight says it still waits."""


class ControlLoop:
    """One perceive → decide → act loop over injected collectors, reconcilers, actuators."""

    def __init__(
        self,
        clock: Clock,
        collectors: Mapping[str, Collector[Any]],
        world: WorldModel,
        reconcilers: Sequence[Reconciler],
        actuators: Sequence[Actuator] = (),
        budgets: Budgets | None = None,
        dry_run: bool = False,
        audit: AuditLog | None = None,
        max_data_age_s: float | None = DEFAULT_MAX_DATA_AGE_S,
        tick_s: float = DEFAULT_TICK_S,
    ) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be positive, got {tick_s}")
        names = [reconciler.name for reconciler in reconcilers]
        if len(set(names)) != len(names):
            raise ValueError(f"reconciler names must be unique, got {names}")
        self.clock = clock
        self.collectors = dict(collectors)
        self.world = world
        self.reconcilers = tuple(reconcilers)
        self.budgets = budgets if budgets is not None else Budgets()
        self.dry_run = dry_run
        self.audit = audit if audit is not None else AuditLog()
        self.max_data_age_s = max_data_age_s
        self.tick_s = tick_s
        self.ticks = 0
        self._actuators: dict[ActionKind, Actuator] = {}
        for actuator in actuators:
            for kind in actuator.kinds:
                if kind in self._actuators:
                    raise ValueError(f"two actuators execute '{kind}' actions")
                self._actuators[kind] = actuator
        self._memory: dict[str, Mapping[str, Any]] = {}
        self._last: dict[str, Snapshot[Any]] = {}
        self._current = CurrentSince()
        self._last_notes: dict[str, tuple[str, ...]] = {}
        self._tick_lock = threading.Lock()

    @property
    def reconciler_names(self) -> list[str]:
        return [reconciler.name for reconciler in self.reconcilers]

    def claims(self, pods: Sequence[PodInfo]) -> bool:
        """Whether one of the reconcilers places these pending pods itself
        (:class:`~kubesage.core.loop.reconciler.ClaimsPods`); one that raises claims nothing.
        Never in dry run: a loop that executes nothing leaves every pod to the secondary
        scheduler, so a dry run does not change who schedules."""
        if self.dry_run:
            return False
        for reconciler in self.reconcilers:
            if not isinstance(reconciler, ClaimsPods):
                continue
            try:
                if reconciler.claims(pods):
                    return True
            except Exception:  # a broken claim leaves the pods to the other scheduler
                log.exception("reconciler %s failed to answer a claim", reconciler.name)
        return False

    # -- one tick ---------------------------------------------------------------------

    def tick(self, stop: threading.Event | None = None) -> TickReport:
        """Perceive, update, reconcile and act once; never raises for a failing part.
        Once ``stop`` is set (by another thread: leadership lost) no action or plan step
        starts: what is left is audited ``stopped`` and the tick ends."""
        with self._tick_lock:
            started = time.perf_counter()
            self.ticks += 1
            now = self.clock.now()
            snapshots, statuses = self._perceive(now)
            self.world.update(snapshots)
            age, stale_reason = self._age(snapshots, now)
            if stale_reason is not None:
                metrics.LOOP_STALE_TICKS.inc()
            context = TickContext(
                self.ticks,
                now,
                stale_reason,
                self.budgets.start_tick(),
                self.audit,
                self._last_notes,
                stop,
            )
            context.note(LOOP, (f"forecaster: {self.forecaster_words()}",))
            errors: dict[str, str] = {}
            notes: dict[str, tuple[str, ...]] = {}
            if not self.world.ready:
                notes[LOOP] = ("no cluster state yet: reconcilers wait for the first snapshot",)
            else:
                for reconciler, answer in self._reconcile(context, snapshots, errors):
                    notes[reconciler.name] = tuple(answer.notes)
                    context.note(reconciler.name, answer.notes)
                    for item in answer.actions:
                        if isinstance(item, Plan):
                            self._plan(item, context)
                        else:
                            self._lone(item, context)
            duration = time.perf_counter() - started
            metrics.LOOP_TICKS.inc()
            metrics.LOOP_TICK_SECONDS.observe(duration)
            return TickReport(
                tick=self.ticks,
                time=now,
                duration_s=duration,
                data_age_s=age,
                stale=stale_reason is not None,
                forecaster=self.world.forecasts.source,
                collectors=tuple(statuses),
                reconcilers=tuple(self.reconciler_names),
                reconciler_errors=errors,
                records=tuple(context.records),
                notes=notes,
                dry_run=self.dry_run,
                stopped=context.stopping,
            )

    def _perceive(self, now: float) -> tuple[dict[str, Snapshot[Any]], list[CollectorStatus]]:
        snapshots: dict[str, Snapshot[Any]] = {}
        statuses = []
        for name, collector in self.collectors.items():
            try:
                snapshot = collector.collect()
            except Exception as exc:  # a failing source must not stop the loop
                metrics.LOOP_COLLECTOR_ERRORS.labels(name).inc()
                detail = f"{type(exc).__name__}: {exc}"
                last = self._last.get(name)
                if last is None:
                    log_event(
                        log, logging.WARNING, "loop_collector_failed", collector=name, error=detail
                    )
                    statuses.append(CollectorStatus(name, ok=False, detail=detail))
                    continue
                snapshot = Snapshot(last.data, last.taken_at, stale=True, reason=detail)
            snapshot = self._current.honest(name, snapshot)  # stale: as old as it is
            self._last[name] = snapshot
            snapshots[name] = snapshot
            statuses.append(CollectorStatus.of(name, snapshot, now))
        return snapshots, statuses

    def _age(self, snapshots: Mapping[str, Snapshot[Any]], now: float) -> tuple[float, str | None]:
        """Age of the oldest of ``snapshots``, and why it is too old to act on (None: it
        is not)."""
        oldest = min((s.taken_at for s in snapshots.values()), default=None)
        age = math.inf if oldest is None else max(0.0, now - oldest)
        if self.max_data_age_s is None or age <= self.max_data_age_s:
            return age, None
        if not snapshots:
            return age, "no collector has a snapshot"
        stalest = min(snapshots, key=lambda name: snapshots[name].taken_at)
        return age, (
            f"data is {age:.1f} s old ({stalest}), over the {self.max_data_age_s:g} s allowed"
        )

    def _read_by(
        self, reconciler: Reconciler, snapshots: Mapping[str, Snapshot[Any]]
    ) -> Mapping[str, Snapshot[Any]]:
        """The snapshots ``reconciler`` decides from: the cluster's and those it names
        (:class:`~kubesage.core.loop.reconciler.ReadsSources`), else all of them."""
        if not isinstance(reconciler, ReadsSources):
            return snapshots
        wanted = {*reconciler.reads, self.world.state_source}
        return {name: snapshot for name, snapshot in snapshots.items() if name in wanted}

    def _reconcile(
        self,
        context: TickContext,
        snapshots: Mapping[str, Snapshot[Any]],
        errors: dict[str, str],
    ) -> Iterable[tuple[Reconciler, Reconciled]]:
        for reconciler in self.reconcilers:
            if context.stopping:
                return  # its actions could not be executed: do not ask
            name = reconciler.name
            # The data-age gate looks at what this reconciler reads (set for its actions),
            # as old as it is now: earlier reconcilers' actions may have taken a while.
            context.reading = self._read_by(reconciler, snapshots)
            age, context.stale_reason = self._age(context.reading, self.clock.now())
            refused = self.audit.refused(context.now_s)  # with this tick's earlier refusals
            view = self.world.view(
                tick=context.number,
                now_s=context.now_s,
                snapshots=snapshots,
                data_age_s=age,
                memory=self._memory.get(name, {}),
                refused=refused,
            )
            try:
                answer = reconciler.reconcile(view)
            except Exception as exc:  # one broken reconciler must not stop the others
                log.exception("reconciler %s failed", name)
                metrics.LOOP_RECONCILER_ERRORS.labels(name).inc()
                errors[name] = f"{type(exc).__name__}: {exc}"
                context.note(name, (f"raised {errors[name]}",), outcome="failed")
                continue
            self._memory[name] = answer.memory
            yield reconciler, answer

    # -- acting -----------------------------------------------------------------------

    def _lone(self, action: Action, context: TickContext) -> None:
        """One action outside a plan, through the gates."""
        if context.stopping:
            context.record(action, Outcome.STOPPED, _STOPPING)
            return
        if self._done(action.key, context):
            context.record(action, Outcome.ALREADY_DONE, "the audit log records it done")
            return
        stale = self._stale(context)
        if stale is not None:
            context.record(action, Outcome.STALE, stale)
            return
        refusal = context.budget.refusal([action.kind])
        if refusal is not None:
            context.record(action, Outcome.OVER_BUDGET, refusal)
            return
        if self.dry_run:
            context.budget.spend(action.kind)
            context.record(action, Outcome.DRY_RUN, "dry run: nothing executed")
            return
        result = self._act(action, context)
        context.record(action, result.outcome, result.detail)

    def _plan(self, plan: Plan, context: TickContext) -> None:
        """A plan: reserve, run the steps in order, stop at a failure, release."""
        if context.stopping:
            context.record(plan, Outcome.STOPPED, _STOPPING)
            return
        todo = [step for step in plan.steps if not self._done(step.key, context)]
        # Done only while every step is still the last done on its target (not by its
        # id); one whose end was not recorded (the leader died) runs through its steps.
        if plan.steps and not todo and self._done(plan.key, context):
            detail = "the audit log records it and every step done, each the last on its target"
            context.record(plan, Outcome.ALREADY_DONE, detail)
            return
        stale = self._stale(context)
        if stale is not None:
            context.record(plan, Outcome.STALE, stale)
            return
        refusal = context.budget.refusal(step.kind for step in todo)
        if refusal is not None:
            context.record(plan, Outcome.OVER_BUDGET, refusal)
            return
        if self.dry_run:
            for step in plan.steps:
                if self._done(step.key, context):
                    context.record(step, Outcome.ALREADY_DONE, "done before", plan=plan.id)
                else:
                    context.budget.spend(step.kind)
                    context.record(step, Outcome.DRY_RUN, "dry run", plan=plan.id)
            context.record(plan, Outcome.DRY_RUN, "dry run: nothing executed")
            return
        state = self.world.state
        if state is None:
            context.record(plan, Outcome.REFUSED, "no cluster state to reserve in")
            return
        ledger = PlanLedger(state, self.world.pods, plan)
        refused = ledger.check() or self._rehearse(plan, todo, context)
        if refused is not None:
            context.record(plan, Outcome.REFUSED, f"{refused}; the plan was not started")
            return
        stale = self._stale(context)  # the rehearsal's API calls took time too
        if stale is not None:
            context.record(plan, Outcome.STALE, stale)
            return
        ledger.reserve_free()
        failed: str | None = None
        outcome: Outcome = Outcome.ROLLED_BACK
        done_steps: list[str] = []
        try:
            for number, step in enumerate(plan.steps, 1):
                if self._done(step.key, context):
                    context.record(step, Outcome.ALREADY_DONE, "done before", plan=plan.id)
                    ledger.done(step)
                    continue
                where = f"step {number}/{len(plan.steps)} ({step.kind} {step.target})"
                if context.stopping:
                    outcome, failed = (
                        Outcome.STOPPED,
                        f"stopped before {where}: the loop is stopping",
                    )
                    break
                ledger.before(step)
                result = self._act(step, context)
                context.record(step, result.outcome, result.detail, plan=plan.id)
                if result.outcome in _STOPS_A_PLAN:
                    failed = f"{where} {result.outcome}: {result.detail or 'no detail'}"
                    break
                ledger.done(step)
                done_steps.append(f"{step.kind} {step.target}")
        finally:
            ledger.release()
        if failed is None:
            context.record(plan, Outcome.DONE, f"{len(plan.steps)} steps done")
        else:
            before = f"; done before it: {', '.join(done_steps)}" if done_steps else ""
            context.record(plan, outcome, f"{failed}{before}; reservations released")

    def _rehearse(self, plan: Plan, todo: Sequence[Action], context: TickContext) -> str | None:
        """Why the plan would be refused after its first step (a rehearsal refused, audited
        as that step's refusal so reconcilers plan around it); None to go ahead."""
        for number, step in enumerate(todo[1:], 1):
            actuator = self._actuators.get(step.kind)
            if not isinstance(actuator, Rehearses):
                continue
            try:
                result = actuator.rehearse(step, todo[:number])
            except Exception:  # must not raise; one that does cannot tell, so go ahead
                log.exception("rehearsing %s on %s failed", step.kind, step.target)
                continue
            if result is not None and result.outcome == Outcome.REFUSED:
                context.record(step, Outcome.REFUSED, f"dry run: {result.detail}", plan=plan.id)
                where = f"step {plan.steps.index(step) + 1}/{len(plan.steps)}"
                return f"{where} ({step.kind} {step.target}) would be refused"
        return None

    def _act(self, action: Action, context: TickContext) -> Result:
        """Execute through the kind's actuator; spend the budget unless refused."""
        actuator = self._actuators.get(action.kind)
        if actuator is None:
            return Result(Outcome.FAILED, f"no actuator executes '{action.kind}' actions")
        try:
            result = actuator.execute(action)
        except Exception as exc:  # an actuator must not raise, but one that does is a failure
            log.exception("actuator for %s failed on %s", action.kind, action.target)
            result = Result(Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        if result.outcome != Outcome.REFUSED:
            context.budget.spend(action.kind)
        return result

    def _stale(self, context: TickContext) -> str | None:
        """Why the data the current reconciler decided from is too old to act on now
        (None: it is not): the age is taken when the action would start, not when the
        tick began, since earlier actions (API calls of up to 10 s each) take time."""
        if context.stale_reason is not None:
            return context.stale_reason
        return self._age(context.reading, self.clock.now())[1]

    def _done(self, key: str, context: TickContext) -> bool:
        """The audit log records ``key`` done (by this loop or an earlier leader)."""
        return self.audit.is_done(key, context.now_s)

    # -- records ----------------------------------------------------------------------

    def forecaster_words(self) -> str:
        """The forecaster in use, in words (cheap: ``/healthz`` reads it on every probe)."""
        panel = self.world.forecasts
        if panel.cold_start:
            return f"{panel.source} (cold start)"
        return f"{panel.source} ({panel.answered} of {panel.seen} series)"

    # -- running ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Tick every ``tick_s`` on the clock until ``stop`` is set (looked at before
        every action, too); a tick that raises is logged and the loop goes on."""
        next_at = self.clock.now()
        while not stop.is_set():
            try:
                self.tick(stop)
            except Exception:  # the loop outlives any one tick
                log.exception("control-loop tick failed")
            next_at += self.tick_s
            now = self.clock.now()
            next_at = max(next_at, now)  # a slow tick skips the missed ones
            if next_at - now > self.tick_s:  # the clock stepped back: not a longer wait
                next_at = now + self.tick_s
            if self.clock.sleep(next_at - now, stop):
                break

    def start(self) -> Callable[[], None]:
        """Run in a daemon thread; return the function that stops it. It may be started
        again after (a replica that leads again); the audit log stays open, and is read
        again for what another replica wrote meanwhile.

        The stopper returns only once the tick in flight has ended: no action starts
        after it is called, but one already executing (an API request: 10 s at most; a
        bind with its retries and reads: about two minutes at worst) is waited for,
        saying so every ``_STOP_WAIT_S`` seconds."""
        self.audit.reload()
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(stop,), name="control-loop", daemon=True)
        thread.start()

        def stopper() -> None:
            stop.set()
            while thread.is_alive() and thread is not threading.current_thread():
                thread.join(_STOP_WAIT_S)
                if thread.is_alive():
                    log.warning("control loop stopping: still waiting for the action in flight")

        return stopper

    def close(self) -> None:
        """Close the audit log and every collector and actuator that has a ``close()``
        (their clients and connection pools); call it once the loop has stopped."""
        parts: list[Any] = [*self.collectors.values(), *self._actuators.values()]
        for part in {id(part): part for part in parts}.values():
            close = getattr(part, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # shutting down: log and close the rest
                    log.exception("closing %s failed", type(part).__name__)
        self.audit.close()

    def debug(self) -> dict[str, Any]:
        """What ``GET /debug/loop`` answers."""
        return {
            "ticks": self.ticks,
            "clock": self.clock.kind,
            "forecaster": self.forecaster_words(),
            "dry_run": self.dry_run,
            "reconcilers": self.reconciler_names,
            "actions": [record.to_json() for record in self.audit.recent()],
        }
