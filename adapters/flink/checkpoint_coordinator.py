"""Drives checkpoints of many Flink jobs over REST on a staggered schedule.

Flink schedules each job's checkpoints on its own (FLINK-9352 only randomises the
first one); nothing keeps jobs apart. The :class:`CheckpointCoordinator` triggers
``POST /jobs/<id>/checkpoints`` for every job at ``epoch + φ_i + k·T_i`` (a
:class:`~kubesage.adapters.flink.stagger.StaggerPlan`), polls each request, and
records when every checkpoint really started and ended from the job's checkpoint
history (``trigger_timestamp`` and ``end_to_end_duration``), so the concurrency it
achieved is measured by Flink, not assumed.

A trigger that Flink reports ``COMPLETED`` without a ``checkpointId`` failed (its
``failureCause`` says why). A ``FlinkError`` on any call is logged, counted and the
loop goes on with the next due trigger: a flaky JobManager never stops the loop.
A job whose previous checkpoint is still in flight skips that slot (Flink would queue
it behind ``max-concurrent-checkpoints`` and shift its phase). So does a slot the loop
reaches later than :func:`late_limit_ms` (a call that stalled, a JobManager failover):
firing every overdue slot at once would start the synchronised checkpoints the plan
exists to keep apart, so the job goes on from its next slot on the plan instead.

Jobs the coordinator does not drive get submit-time configuration instead
(:mod:`~kubesage.adapters.flink.checkpoint_settings`); what a job's checkpoints look
like is read from its history (:mod:`~kubesage.adapters.flink.checkpoint_history`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from kubesage.adapters.flink.errors import FlinkError, StaggerInputError
from kubesage.adapters.flink.rest_models import (
    CheckpointConfig,
    CheckpointStats,
    CheckpointTrigger,
)
from kubesage.adapters.flink.stagger import StaggerPlan, peak_concurrent

log = logging.getLogger(__name__)

FLINK_TIMEOUT_MARGIN_MS = 5_000
"""Past a job's own checkpoint timeout, how long before a trigger is given up."""
RESOLVE_EVERY_MS = 500
"""How often to re-read a job's history for checkpoints it does not show yet."""
LATE_SHARE = 0.05
"""How late, as a share of the job's interval, a slot may still be triggered."""
LATE_MIN_MS = 250
"""…and at least this late: the loop's own polling may hold a slot back this long."""


def late_limit_ms(interval_ms: int) -> int:
    """How far past its time a slot of a job checkpointing every ``interval_ms`` is still
    triggered; a later one is skipped (see the module docstring)."""
    return max(LATE_MIN_MS, int(interval_ms * LATE_SHARE))


Outcome = Literal["completed", "failed", "trigger-error", "skipped", "timed-out"]


class CheckpointClient(Protocol):
    """The part of :class:`~kubesage.adapters.flink.client.FlinkClient` the coordinator uses."""

    def trigger_checkpoint(self, job_id: str) -> str: ...

    def checkpoint_trigger_status(self, job_id: str, request_id: str) -> CheckpointTrigger: ...

    def checkpoints(self, job_id: str) -> CheckpointStats: ...

    def checkpoint_config(self, job_id: str) -> CheckpointConfig: ...


@dataclass(frozen=True)
class CheckpointRecord:
    """One scheduled slot of one job and what became of it (times: epoch ms)."""

    job_id: str
    outcome: Outcome
    scheduled_ms: int
    triggered_ms: int | None = None
    checkpoint_id: int | None = None
    start_ms: int | None = None
    """Flink's ``trigger_timestamp`` of the checkpoint."""
    end_ms: int | None = None
    """``trigger_timestamp + end_to_end_duration``."""
    size_bytes: int | None = None
    """``checkpointed_size``: bytes this checkpoint wrote."""
    detail: str = ""

    @property
    def duration_ms(self) -> int | None:
        if self.start_ms is None or self.end_ms is None:
            return None
        return self.end_ms - self.start_ms


@dataclass
class CoordinatorReport:
    """Everything the coordinator did; counters for logs and metrics."""

    records: list[CheckpointRecord] = field(default_factory=list)
    flink_errors: int = 0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for record in self.records if record.outcome == outcome)

    def windows(self) -> list[tuple[int, int]]:
        """``[start, end)`` of every completed checkpoint whose times Flink reported."""
        return [
            (r.start_ms, r.end_ms)
            for r in self.records
            if r.outcome == "completed" and r.start_ms is not None and r.end_ms is not None
        ]

    def peak_concurrent(self) -> int:
        return peak_concurrent(self.windows())


@dataclass
class _Pending:
    job_id: str
    request_id: str
    scheduled_ms: int
    triggered_ms: int


class CheckpointCoordinator:
    """Triggers checkpoints of the plan's jobs at ``epoch_ms + phase + k·interval``.

    ``epoch_ms`` defaults to the Unix epoch, so phases kept in the registry mean the
    same to every coordinator; tests and benchmarks pass a near-future epoch.
    """

    def __init__(
        self,
        client: CheckpointClient,
        plan: StaggerPlan,
        *,
        epoch_ms: int = 0,
        poll_s: float = 0.05,
        trigger_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        on_record: Callable[[CheckpointRecord], None] | None = None,
    ) -> None:
        if poll_s <= 0 or trigger_timeout_s <= 0:
            raise StaggerInputError("poll_s and trigger_timeout_s must be positive")
        self.client = client
        self.plan = plan
        self.epoch_ms = epoch_ms
        self.poll_s = poll_s
        self.trigger_timeout_ms = int(trigger_timeout_s * 1000)
        self.clock = clock
        self.on_record = on_record
        self.report = CoordinatorReport()
        self._pending: dict[str, _Pending] = {}
        self._untimed: dict[str, list[int]] = {}
        """Job → indices of completed records still waiting for their times."""
        self._resolved_at: dict[str, int] = {}
        self._flink_timeouts_ms: dict[str, int] = {}
        """Job → its checkpoint timeout in Flink plus a margin (0: unknown)."""

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def run(
        self,
        *,
        duration_s: float | None = None,
        stop: threading.Event | None = None,
        drain_s: float = 30.0,
        started_ms: int | None = None,
    ) -> CoordinatorReport:
        """Trigger the slots in ``[started_ms, started_ms + duration_s)`` (from now by
        default; for ever without a duration) until ``stop`` is set. A slot of that
        window the loop reaches late is still triggered, within the late limit.

        Checkpoints still in flight at the end are awaited for up to ``drain_s``.
        """
        stop = stop or threading.Event()
        started = self.now_ms() if started_ms is None else started_ms
        until = started + int(duration_s * 1000) if duration_s is not None else None
        due = {
            job: self.epoch_ms + self.plan.first_trigger_ms(job, started - self.epoch_ms)
            for job in sorted(self.plan.phases_ms)
        }
        while not stop.is_set():
            now = self.now_ms()
            if until is not None and now >= until and min(due.values(), default=until) >= until:
                break
            for job in sorted(due, key=lambda j: (due[j], j)):
                if due[job] > now or (until is not None and due[job] >= until):
                    continue
                interval = self.plan.intervals_ms[job]
                if now - due[job] > late_limit_ms(interval):
                    due[job] = self._skip_late(job, due[job], now)
                    continue
                self._trigger(job, due[job])
                due[job] += interval
            self._poll()
            self._resolve_due()
            next_due = min(due.values(), default=now + 1000)
            wait_ms = next_due - self.now_ms()
            if self._busy:
                wait_ms = min(wait_ms, int(self.poll_s * 1000))
            if until is not None:
                wait_ms = min(wait_ms, until - self.now_ms())
            if wait_ms > 0:
                stop.wait(wait_ms / 1000)
        self._settle(
            outcome_s=drain_s,
            timing_s=drain_s,
            poll_s=self.poll_s,
            detail="still in flight when the coordinator ended",
        )
        return self.report

    def checkpoint_now(
        self,
        job_id: str,
        *,
        timeout_s: float = 60.0,
        poll_s: float = 0.1,
        timing_wait_s: float = 10.0,
    ) -> CheckpointRecord:
        """Trigger one checkpoint of ``job_id`` now and wait for its outcome and times.

        ``timing_wait_s`` bounds the wait for the history to show a completed checkpoint.
        """
        before = len(self.report.records)
        self._trigger(job_id, self.now_ms())
        self._settle(
            outcome_s=timeout_s,
            timing_s=timing_wait_s,
            poll_s=poll_s,
            detail=f"no outcome within {timeout_s:.0f} s",
        )
        return self.report.records[before]

    def _settle(self, *, outcome_s: float, timing_s: float, poll_s: float, detail: str) -> None:
        """Wait for the triggers in flight (≤ ``outcome_s``), then for the history to time
        their checkpoints (≤ ``timing_s`` more); close what is still open with ``detail``.
        """
        deadline = time.monotonic() + outcome_s
        while self._pending and time.monotonic() < deadline:
            time.sleep(poll_s)
            self._poll()
            self._resolve_due()
        for pending in list(self._pending.values()):
            self._finish(pending, "timed-out", detail=detail)
        deadline = time.monotonic() + timing_s
        while self._busy and time.monotonic() < deadline:
            time.sleep(poll_s)
            self._resolve_due()
        self._give_up_timing()

    def _skip_late(self, job_id: str, scheduled_ms: int, now_ms: int) -> int:
        """Record the slots of ``job_id`` from ``scheduled_ms`` that the loop reached too
        late as one skip; the job's next slot on the plan at or after ``now_ms``."""
        following = self.epoch_ms + self.plan.first_trigger_ms(job_id, now_ms - self.epoch_ms)
        missed = -(-(following - scheduled_ms) // self.plan.intervals_ms[job_id])
        self._record(
            CheckpointRecord(
                job_id,
                "skipped",
                scheduled_ms,
                detail=(
                    f"the coordinator reached this slot {now_ms - scheduled_ms} ms late "
                    f"(a call stalled); {missed} slot(s) skipped to keep the plan's phase"
                ),
            )
        )
        return following

    def _trigger(self, job_id: str, scheduled_ms: int) -> None:
        if job_id in self._pending:
            self._record(
                CheckpointRecord(
                    job_id, "skipped", scheduled_ms, detail="the previous checkpoint is in flight"
                )
            )
            return
        triggered = self.now_ms()
        try:
            request_id = self.client.trigger_checkpoint(job_id)
        except FlinkError as exc:
            self._flink_error(job_id, "trigger", exc)
            self._record(
                CheckpointRecord(job_id, "trigger-error", scheduled_ms, triggered, detail=str(exc))
            )
            return
        self._pending[job_id] = _Pending(job_id, request_id, scheduled_ms, triggered)

    def _poll(self) -> None:
        for pending in list(self._pending.values()):
            try:
                status = self.client.checkpoint_trigger_status(pending.job_id, pending.request_id)
            except FlinkError as exc:
                self._flink_error(pending.job_id, "trigger status", exc)
                status = None
            if status is not None and status.status == "COMPLETED":
                if status.checkpoint_id is None:
                    cause = status.failure_cause or "Flink gave no failure cause"
                    self._finish(pending, "failed", detail=cause)
                else:
                    self._finish(pending, "completed", checkpoint_id=status.checkpoint_id)
            elif self.now_ms() - pending.triggered_ms > self._timeout_ms(pending.job_id):
                self._finish(pending, "timed-out", detail="no answer within the trigger timeout")

    def _timeout_ms(self, job_id: str) -> int:
        """How long a trigger may go unanswered: at least ``trigger_timeout_s``, and past
        the job's own checkpoint timeout (``execution.checkpointing.timeout``, 10 min by
        default), since Flink may still be writing it until then; a slot given up
        earlier would queue the next trigger behind it, off the plan."""
        known = self._flink_timeouts_ms.get(job_id)
        if known is None:
            try:
                known = self.client.checkpoint_config(job_id).timeout_ms + FLINK_TIMEOUT_MARGIN_MS
            except FlinkError as exc:
                self._flink_error(job_id, "checkpoint config", exc)
                known = 0
            self._flink_timeouts_ms[job_id] = known
        return max(self.trigger_timeout_ms, known)

    def _finish(
        self,
        pending: _Pending,
        outcome: Outcome,
        *,
        checkpoint_id: int | None = None,
        detail: str = "",
    ) -> None:
        del self._pending[pending.job_id]
        record = CheckpointRecord(
            pending.job_id,
            outcome,
            pending.scheduled_ms,
            pending.triggered_ms,
            checkpoint_id,
            detail=detail,
        )
        if checkpoint_id is None:
            self._record(record)
            return
        # Timed from the history, which the REST cache may serve a few seconds late.
        self.report.records.append(record)
        self._untimed.setdefault(pending.job_id, []).append(len(self.report.records) - 1)
        self._resolve(pending.job_id)

    def _resolve(self, job_id: str) -> None:
        """Fill in start, end and size of the job's completed checkpoints from its history."""
        indices = self._untimed.get(job_id)
        if not indices:
            return
        self._resolved_at[job_id] = self.now_ms()
        try:
            history = {e.id: e for e in self.client.checkpoints(job_id).history}
        except FlinkError as exc:
            self._flink_error(job_id, "checkpoint history", exc)
            return
        for index in list(indices):
            record = self.report.records[index]
            entry = history.get(record.checkpoint_id or -1)
            if entry is None:
                continue
            timed = dataclasses.replace(
                record,
                start_ms=entry.trigger_timestamp_ms,
                end_ms=entry.trigger_timestamp_ms + entry.end_to_end_duration_ms,
                size_bytes=entry.checkpointed_size_bytes,
            )
            self.report.records[index] = timed
            indices.remove(index)
            self._emit(timed)

    def _resolve_due(self) -> None:
        for job_id, indices in self._untimed.items():
            if indices and self.now_ms() - self._resolved_at.get(job_id, 0) >= RESOLVE_EVERY_MS:
                self._resolve(job_id)

    def _give_up_timing(self) -> None:
        for indices in self._untimed.values():
            for index in indices:
                record = dataclasses.replace(
                    self.report.records[index],
                    detail="not in the checkpoint history (evicted, or the run ended first)",
                )
                self.report.records[index] = record
                self._emit(record)
            indices.clear()

    @property
    def _busy(self) -> bool:
        return bool(self._pending) or any(self._untimed.values())

    def _flink_error(self, job_id: str, what: str, exc: FlinkError) -> None:
        self.report.flink_errors += 1
        log.warning("job %s: %s failed, going on: %s", job_id, what, exc)

    def _record(self, record: CheckpointRecord) -> None:
        self.report.records.append(record)
        self._emit(record)

    def _emit(self, record: CheckpointRecord) -> None:
        if self.on_record is not None:
            self.on_record(record)


def single_job_plan(job_id: str, interval_ms: int) -> StaggerPlan:
    """A plan for one job at phase 0 (probing, or a coordinator for one job)."""
    return StaggerPlan(
        phases_ms={job_id: 0},
        intervals_ms={job_id: interval_ms},
        durations_ms={job_id: 0},
        resolution_ms=1,
        horizon_ms=interval_ms,
        peak_concurrent=1,
        peak_bytes=0,
        lower_bound_concurrent=1,
        lower_bound_bytes=0,
        optimum_concurrent=1,
        method="single",
        exact_horizon=True,
    )
