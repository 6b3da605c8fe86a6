"""The audit log: one record per action the loop considered, and what became of it.

Every action (and every plan) a reconciler asks for gets a record — executed, refused,
over budget, stale, dry run or already done — with the tick, the clock's time, the
reconciler, the action's kind, target, key and plan, the reconciler's explanation and
the outcome with its detail. Records go to an append-only JSON-lines file when a path
is given (one object per line, flushed per record) and the last :data:`KEEP` stay in
memory for ``GET /debug/loop``.

The file is also the loop's memory across leaders: a new :class:`AuditLog` on the same
path reads it back, and :meth:`AuditLog.done_keys` tells the loop which actions an
earlier leader finished, so it does not repeat them. A key counts as done only while
it is the last action done on its target (a later Scale back to 4 replicas makes an
earlier Scale to 2 wanted again) and for :attr:`AuditLog.remember_s` seconds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from kubesage.core.loop.reconciler import Outcome

log = logging.getLogger(__name__)

KEEP = 100
"""Records kept in memory (what ``/debug/loop`` shows)."""
REMEMBER_S = 900.0
"""How long a done action stays done for the skip check (15 minutes)."""


@dataclass(frozen=True)
class AuditRecord:
    """One line of the audit log."""

    tick: int
    time: float
    reconciler: str
    action: str
    """The action's kind (``evict``, ``bind`` …), ``plan`` for a plan, ``note`` for a note."""
    target: str
    key: str
    plan: str | None
    explanation: str
    outcome: str
    """An :class:`~kubesage.core.loop.reconciler.Outcome` value (``noted`` for a note)."""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> AuditRecord:
        return cls(
            tick=int(document["tick"]),
            time=float(document["time"]),
            reconciler=str(document["reconciler"]),
            action=str(document["action"]),
            target=str(document["target"]),
            key=str(document["key"]),
            plan=None if document.get("plan") is None else str(document["plan"]),
            explanation=str(document.get("explanation", "")),
            outcome=str(document["outcome"]),
            detail=str(document.get("detail", "")),
        )


class AuditLog:
    """Append-only audit records: a JSON-lines file (optional) and the last few in memory."""

    def __init__(self, path: Path | None = None, *, remember_s: float = REMEMBER_S) -> None:
        self.path = path
        self.remember_s = remember_s
        self._recent: deque[AuditRecord] = deque(maxlen=KEEP)
        self._lock = threading.Lock()
        self._last_done: dict[str, tuple[str, float]] = {}
        """Action kind and target → (key, time) of the last action done on it."""
        self._slot: dict[str, str] = {}
        """Key → its entry in ``_last_done``."""
        self._file: IO[str] | None = None
        if path is not None:
            for record in _read(path):
                self._remember(record)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def append(self, record: AuditRecord) -> None:
        """Record ``record`` (written and flushed at once when there is a file)."""
        with self._lock:
            self._remember(record)
            if self._file is not None:
                self._file.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
                self._file.flush()

    def recent(self) -> list[AuditRecord]:
        """The last :data:`KEEP` records, oldest first."""
        with self._lock:
            return list(self._recent)

    def done_keys(self, now_s: float | None = None) -> frozenset[str]:
        """Keys of actions done, each the last done on its target, within ``remember_s``
        of ``now_s`` (all of them when ``now_s`` is None)."""
        with self._lock:
            return frozenset(
                key
                for key, at in self._last_done.values()
                if now_s is None or now_s - at <= self.remember_s
            )

    def is_done(self, key: str, now_s: float | None = None) -> bool:
        """Whether ``key`` is done: the last done on its target, within ``remember_s``."""
        with self._lock:
            slot = self._slot.get(key)
            if slot is None:
                return False
            last, at = self._last_done[slot]
            return last == key and (now_s is None or now_s - at <= self.remember_s)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _remember(self, record: AuditRecord) -> None:
        self._recent.append(record)
        if record.outcome == Outcome.DONE and record.key:
            slot = f"{record.action}:{record.target}"
            self._last_done[slot] = (record.key, record.time)
            self._slot[record.key] = slot


def _read(path: Path) -> Iterator[AuditRecord]:
    """The records already in ``path``; a torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield AuditRecord.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable audit record %s:%d: %s", path, number, exc)
