"""What one tick did: the :class:`TickReport` ``ControlLoop.tick`` returns.

``kubesage loop --once`` prints it (a table, or ``--format json``); tests read it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesage.core.loop.audit import AuditRecord
from kubesage.core.perception import Snapshot


@dataclass(frozen=True)
class CollectorStatus:
    """How one collector answered this tick."""

    name: str
    ok: bool
    """False: it raised and had no earlier snapshot, so it was skipped."""
    stale: bool = False
    age_s: float | None = None
    detail: str = ""

    @classmethod
    def of(cls, name: str, snapshot: Snapshot[Any], now: float) -> CollectorStatus:
        """A collector that answered ``snapshot`` (perhaps an earlier one, stale)."""
        age = max(0.0, now - snapshot.taken_at)
        return cls(name, ok=True, stale=snapshot.stale, age_s=age, detail=snapshot.reason or "")


@dataclass(frozen=True)
class TickReport:
    """One tick: its inputs' state, the reconcilers' failures and every audit record."""

    tick: int
    time: float
    duration_s: float
    data_age_s: float
    stale: bool
    """Some snapshot was older than the loop's maximum: the actions of the reconcilers
    that read it were not executed (those reading only fresh sources were)."""
    forecaster: str
    collectors: tuple[CollectorStatus, ...] = ()
    reconcilers: tuple[str, ...] = ()
    reconciler_errors: Mapping[str, str] = field(default_factory=dict)
    records: tuple[AuditRecord, ...] = ()
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Each reconciler's notes this tick (why it did nothing)."""
    dry_run: bool = False
    stopped: bool = False
    """The loop was told to stop during the tick (leadership lost): what was left was
    audited ``stopped``, not executed, and the later reconcilers were not asked."""

    def to_json(self) -> dict[str, Any]:
        return {
            "tick": self.tick,
            "time": self.time,
            "duration_s": self.duration_s,
            "data_age_s": self.data_age_s if math.isfinite(self.data_age_s) else None,
            "stale": self.stale,
            "dry_run": self.dry_run,
            "stopped": self.stopped,
            "forecaster": self.forecaster,
            "collectors": [
                {
                    "name": c.name,
                    "ok": c.ok,
                    "stale": c.stale,
                    "age_s": c.age_s,
                    "detail": c.detail,
                }
                for c in self.collectors
            ],
            "reconcilers": list(self.reconcilers),
            "reconciler_errors": dict(self.reconciler_errors),
            "notes": {name: list(notes) for name, notes in self.notes.items()},
            "actions": [record.to_json() for record in self.records],
        }
