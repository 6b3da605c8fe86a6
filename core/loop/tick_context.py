"""What one control-loop tick carries from gate to gate, and how it records what it did.

Every action and plan the loop considers gets an audit record (and a count in
``kubesage_loop_actions_total``); a reconciler's notes are audited when they change,
not the same words every tick — notes that stop and come back are audited again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesage.core.loop.actions import Action, Plan
from kubesage.core.loop.audit import AuditLog, AuditRecord, note_of, record_of
from kubesage.core.loop.budgets import TickBudget
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.observability import metrics
from kubesage.core.observability.logging import log_event
from kubesage.core.perception import Snapshot

log = logging.getLogger("kubesage.core.loop.control")  # the loop's events keep its name

_LOGGED = ("tick", "reconciler", "action", "target", "outcome", "detail")
"""The fields of an audit record the ``loop_action`` log event carries."""


@dataclass
class TickContext:
    """One tick: its number and time, why its data is stale (if it is), its budget and
    stop signal, the audit log it writes to, and the records it wrote."""

    number: int
    now_s: float
    stale_reason: str | None
    budget: TickBudget
    audit: AuditLog
    last_notes: dict[str, tuple[str, ...]]
    """Each reconciler's notes as last audited (the loop's, kept across ticks)."""
    stop: threading.Event | None = None
    records: list[AuditRecord] = field(default_factory=list)
    reading: Mapping[str, Snapshot[Any]] = field(default_factory=dict)
    """The snapshots the reconciler whose actions run now decided from."""

    @property
    def stopping(self) -> bool:
        """The loop was told to stop (leadership lost): no action starts any more."""
        return self.stop is not None and self.stop.is_set()

    def record(
        self, item: Action | Plan, outcome: Outcome, detail: str, *, plan: str | None = None
    ) -> None:
        """Audit what became of ``item`` (a step of ``plan`` when given)."""
        record = record_of(self.number, self.now_s, item, outcome, detail, plan=plan)
        self._append(record)
        metrics.LOOP_ACTIONS.labels(item.reconciler, record.action, record.outcome).inc()

    def note(self, reconciler: str, notes: Sequence[str], *, outcome: str = "noted") -> None:
        """Audit a reconciler's notes when they change (not the same words every tick);
        a tick without notes forgets them, so the same words coming back are audited."""
        words = tuple(notes)
        if not words:
            self.last_notes.pop(reconciler, None)
            return
        if self.last_notes.get(reconciler) == words:
            return
        self.last_notes[reconciler] = words
        for note in words:
            self._append(note_of(self.number, self.now_s, reconciler, note, outcome))

    def _append(self, record: AuditRecord) -> None:
        self.records.append(record)
        self.audit.append(record)
        if record.action != "note":
            fields = {name: getattr(record, name) for name in _LOGGED}
            log_event(log, logging.INFO, "loop_action", **fields)
