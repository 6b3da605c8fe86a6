"""The audit log: one record per action the loop considered, and what became of it.

Every action (and every plan) a reconciler asks for gets a record — executed, refused,
over budget, stale, dry run, already done or stopped — with the tick, the clock's
time, the reconciler, the action's kind, target, key and plan, the reconciler's
explanation and the outcome with its detail. Records go to an append-only JSON-lines
file when a path is given (one object per line, flushed per record) and the last
:data:`KEEP` stay in memory for ``GET /debug/loop``.

The file is also the loop's memory across leaders: a new :class:`AuditLog` on the same
path reads it back (and :meth:`AuditLog.reload` catches up with what another replica
appended since), and :meth:`AuditLog.is_done` tells the loop which actions an earlier
leader finished, so it does not repeat them. A key counts as done only while it is the
last action done on its target (a later Scale back to 4 replicas makes an earlier Scale
to 2 wanted again) and for :attr:`AuditLog.remember_s` seconds. A plan is remembered by
its id, but the loop takes it as done only while its steps are.

Bounded: the done-memory forgets what is older than ``remember_s`` (before the newest
record; pruned whenever it has doubled since the last prune), reading the file back
keeps only that window in memory, and the file is compacted — rewritten atomically with
the window and the last :data:`KEEP` records — when it is more than twice that and over
``compact_min_bytes``. Every record is also logged (``loop_action``): the log pipeline,
not this file, is the long-term trail.

A failing write (a full or read-only volume) does not stop the loop: it is logged,
counted in ``kubesage_errors_total{component="loop_audit",kind="write"}``, and the
record stays in memory; the file is reopened on the next record.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from stat import S_IMODE
from typing import IO, Any

from kubesage.core.loop.actions import Action, ActionKind, Plan
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.observability import metrics

log = logging.getLogger(__name__)

KEEP = 100
"""Records kept in memory (what ``/debug/loop`` shows)."""
REMEMBER_S = 900.0
"""How long a done action stays done for the skip check (15 minutes)."""
REFUSAL_MEMORY_S = 300.0
"""How long the world's refusal of an action (a PodDisruptionBudget) is shown to the
reconcilers (:attr:`~kubesage.core.loop.view.WorldView.refused`): five minutes."""
PRUNE_MIN = 1024
"""Done-memory entries below which it is never pruned."""
COMPACT_MIN_BYTES = 16 * 2**20
"""The audit file is never compacted below this size (16 MiB)."""
ERRORS_COMPONENT = "loop_audit"
"""The ``component`` label of this log's errors in ``kubesage_errors_total``."""


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
    """An :class:`~kubesage.core.loop.reconciler.Outcome` value (``noted`` for a note,
    ``stopped`` for what a loop told to stop did not execute)."""
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


def record_of(
    tick: int, time: float, item: Action | Plan, outcome: str, detail: str, *, plan: str | None
) -> AuditRecord:
    """The record of ``item`` (an action, a step of plan ``plan``, or a plan)."""
    if isinstance(item, Plan):
        action, target, plan = "plan", item.id, item.id
    else:
        action, target, plan = str(item.kind), item.target, plan or item.plan
    return AuditRecord(
        tick=tick,
        time=time,
        reconciler=item.reconciler,
        action=action,
        target=target,
        key=item.key,
        plan=plan,
        explanation=item.explanation,
        outcome=str(outcome),
        detail=detail,
    )


def note_of(tick: int, time: float, reconciler: str, note: str, outcome: str) -> AuditRecord:
    """The record of a reconciler's note (``outcome``: ``noted``, or ``failed``)."""
    return AuditRecord(tick, time, reconciler, "note", "", "", None, note, outcome)


class AuditLog:
    """Append-only audit records: a JSON-lines file (optional) and the last few in memory."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        remember_s: float = REMEMBER_S,
        compact_min_bytes: int = COMPACT_MIN_BYTES,
    ) -> None:
        self.path = path
        self.remember_s = remember_s
        self.compact_min_bytes = compact_min_bytes
        self.file_errors = 0
        """Records not written to the file, and failed reads back and compactions."""
        self._recent: deque[AuditRecord] = deque(maxlen=KEEP)
        self._lock = threading.Lock()
        self._last_done: dict[str, tuple[str, float]] = {}
        """Action kind and target → (key, time) of the last action done on it."""
        self._slot: dict[str, str] = {}
        """Key → its entry in ``_last_done`` (only keys still the last on their slot)."""
        self._last_refused: dict[str, float] = {}
        """Action kind and target → when an action on it was last refused (until one on
        it is done)."""
        self._prune_at = PRUNE_MIN
        self._newest = -math.inf
        """The newest record's time: what "older than ``remember_s``" is measured from."""
        self._file: IO[str] | None = None
        self._opened: tuple[int, int] | None = None
        """Device and inode of the file ``_file`` was opened on."""
        self._seen: tuple[int, int, int] | None = None
        """Device, inode and size of the file as this log last read or wrote it."""
        self._compact_at = compact_min_bytes
        self._torn = False
        """A write failed: the file may end in a partial line, so the next starts anew."""
        self._closed = False
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock:
                self._load(path)
                self._reopen(path)

    def append(self, record: AuditRecord) -> None:
        """Record ``record``: in memory, and written and flushed at once when there is a
        file. A write that fails is logged and counted; the record stays in memory."""
        with self._lock:
            self._remember(record)
            if self.path is None or self._closed:
                return
            line = json.dumps(record.to_json(), sort_keys=True) + "\n"
            try:
                self._write(self.path, line)
            except OSError as exc:
                self._write_failed(exc)

    def recent(self) -> list[AuditRecord]:
        """The last :data:`KEEP` records, oldest first."""
        with self._lock:
            return list(self._recent)

    def done_keys(self, now_s: float | None = None) -> frozenset[str]:
        """Keys of actions done, each the last done on its target, within ``remember_s``
        of ``now_s`` (all those remembered when ``now_s`` is None)."""
        with self._lock:
            return frozenset(
                key
                for key, at in self._last_done.values()
                if now_s is None or now_s - at <= self.remember_s
            )

    def refused(self, now_s: float, within_s: float = REFUSAL_MEMORY_S) -> dict[str, float]:
        """``kind:target`` → when the last action on it was refused (a
        PodDisruptionBudget, a conflict), for those refused within ``within_s`` of
        ``now_s`` and not done since."""
        with self._lock:
            return {slot: at for slot, at in self._last_refused.items() if now_s - at <= within_s}

    def is_done(self, key: str, now_s: float | None = None) -> bool:
        """Whether ``key`` is done: the last done on its target, within ``remember_s``."""
        with self._lock:
            slot = self._slot.get(key)
            if slot is None:
                return False
            last, at = self._last_done[slot]
            return last == key and (now_s is None or now_s - at <= self.remember_s)

    def reload(self) -> None:
        """Catch up with the file when another process wrote it since this log last read
        or wrote it (a replica that starts leading, on a volume both mount)."""
        with self._lock:
            if self.path is None or self._closed:
                return
            try:
                stat = os.stat(self.path)
                if self._seen == (*_ident(stat), stat.st_size):
                    return
                self._load(self.path)
                self._reopen(self.path)
            except FileNotFoundError:
                return  # nothing written yet: the next record creates it
            except OSError as exc:
                self._count("read")
                log.warning("could not read the audit log %s back: %s", self.path, exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_file()

    # -- memory -----------------------------------------------------------------------

    def _remember(self, record: AuditRecord, *, read_back: bool = False) -> None:
        """Take ``record`` into memory. One appended now is the newest on its target,
        whatever its time says (a clock stepped back, another replica's clock); one
        read back from the file does not replace a record remembered with a later time
        (one kept in memory only, when the volume was full)."""
        self._recent.append(record)
        self._newest = max(self._newest, record.time)
        if not record.key:
            return  # notes have no key
        slot = f"{record.action}:{record.target}"
        if record.outcome == Outcome.REFUSED and record.action != "plan":
            self._last_refused[slot] = max(record.time, self._last_refused.get(slot, record.time))
            return
        if record.outcome != Outcome.DONE:
            return
        refused = self._last_refused.get(slot)
        if refused is not None and not (read_back and refused > record.time):
            del self._last_refused[slot]
        last = self._last_done.get(slot)
        if read_back and last is not None and last[1] > record.time:
            return  # read back after a newer record on the same target
        if last is not None and self._slot.get(last[0]) == slot:
            del self._slot[last[0]]  # no longer the last on its target: never done again
        self._last_done[slot] = (record.key, record.time)
        self._slot[record.key] = slot
        if record.action == ActionKind.EVICT:
            # An evicted pod is bound no more: a bind of it (to the same place, the
            # same key) must run again, not count as done (an embedded or simulated
            # cluster gives the evicted pod back pending under the same name and UID).
            bind_slot = f"{ActionKind.BIND}:{record.target}"
            bound = self._last_done.get(bind_slot)
            if bound is not None and not (read_back and bound[1] > record.time):
                del self._last_done[bind_slot]
                self._slot.pop(bound[0], None)
        if len(self._last_done) + len(self._last_refused) >= self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Forget what is done longer than ``remember_s`` before the newest record."""
        cutoff = self._newest - self.remember_s
        self._last_done = {
            slot: (key, at) for slot, (key, at) in self._last_done.items() if at >= cutoff
        }
        self._slot = {key: slot for slot, (key, _) in self._last_done.items()}
        self._last_refused = {slot: at for slot, at in self._last_refused.items() if at >= cutoff}
        self._prune_at = max(PRUNE_MIN, 2 * len(self._last_done))

    # -- the file ---------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        """Read the file back: the last :data:`KEEP` records into :meth:`recent`, the
        done ones within ``remember_s`` of the newest into the done-memory; compact the
        file when it is much larger than that."""
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return
        self._recent.clear()
        window: deque[tuple[float, int]] = deque()
        tail: deque[int] = deque(maxlen=KEEP)
        for record, size in _read(path):
            self._remember(record, read_back=True)
            window.append((record.time, size))
            tail.append(size)
            while window and window[0][0] < self._newest - self.remember_s:
                window.popleft()
        self._prune()
        self._seen = (*_ident(stat), stat.st_size)
        kept = sum(size for _, size in window) + sum(tail)
        self._compact_at = max(self.compact_min_bytes, 2 * kept)
        if stat.st_size > self._compact_at:
            self._compact(path)

    def _compact(self, path: Path) -> None:
        """Rewrite ``path`` atomically with the records within ``remember_s`` of the
        newest and the last :data:`KEEP`; on failure the file stays as it was."""
        cutoff = self._newest - self.remember_s
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for line in _kept_lines(path, cutoff):
                    out.write(line)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(name, S_IMODE(os.stat(path).st_mode))  # as readable as it was
            os.replace(name, path)
        except OSError as exc:
            with suppress(OSError):
                os.unlink(name)
            self._count("compact")
            self._compact_at *= 2  # not again at once
            log.warning("could not compact the audit log %s: %s", path, exc)
            return
        stat = os.stat(path)
        self._seen = (*_ident(stat), stat.st_size)
        self._compact_at = max(self.compact_min_bytes, 2 * stat.st_size)
        log.info("compacted the audit log %s to %d bytes", path, stat.st_size)

    def _reopen(self, path: Path) -> None:
        """(Re)open the file for appending, unless the one open is still ``path``'s."""
        try:
            stat: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            stat = None
        if self._file is not None and stat is not None and self._opened == _ident(stat):
            return
        self._close_file()
        self._file = path.open("a", encoding="utf-8")
        opened = os.fstat(self._file.fileno())
        self._opened = _ident(opened)
        if opened.st_size and not self._torn:
            # A line another process left torn (killed mid-write, its disk full):
            # the next record starts on a line of its own, not glued to it.
            with path.open("rb") as file:
                file.seek(-1, os.SEEK_END)
                self._torn = file.read(1) != b"\n"
        if stat is None:
            self._seen = (*_ident(opened), opened.st_size)

    def _write(self, path: Path, line: str) -> None:
        # Another replica may have compacted (replaced) the file: append to the new one.
        self._reopen(path)
        assert self._file is not None
        self._file.write(("\n" if self._torn else "") + line)
        self._file.flush()
        if self._torn:
            self._torn = False
            log.info("the audit log %s is written again", path)
        stat = os.fstat(self._file.fileno())
        self._seen = (*_ident(stat), stat.st_size)
        if stat.st_size > self._compact_at:
            self._compact(path)
            self._reopen(path)

    def _write_failed(self, exc: OSError) -> None:
        self._count("write")
        if not self._torn:
            log.error(
                "could not write to the audit log %s (%s): records stay in memory only, "
                "failures are counted in kubesage_errors_total{component=%r}",
                self.path,
                exc,
                ERRORS_COMPONENT,
            )
        self._torn = True
        self._close_file()  # drop what is buffered; reopened on the next record

    def _count(self, kind: str) -> None:
        self.file_errors += 1
        metrics.ERRORS.labels(ERRORS_COMPONENT, kind).inc()

    def _close_file(self) -> None:
        if self._file is not None:
            with suppress(OSError):  # a failing flush (the disk is full): already counted
                self._file.close()
            self._file = None
            self._opened = None


def _read(path: Path) -> Iterator[tuple[AuditRecord, int]]:
    """The records in ``path`` with their lines' sizes; an unreadable line (a crash
    mid-write) is skipped."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield AuditRecord.from_json(json.loads(line)), len(line)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable audit record %s:%d: %s", path, number, exc)


def _kept_lines(path: Path, cutoff: float) -> list[str]:
    """The lines of ``path`` a compaction keeps, in order: records at ``cutoff`` or
    later, and the last :data:`KEEP` records."""
    window: list[tuple[int, str]] = []
    tail: deque[tuple[int, str]] = deque(maxlen=KEEP)
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines):
            try:
                at = float(json.loads(line)["time"])
            except (ValueError, KeyError, TypeError):
                continue  # unreadable lines are not kept
            entry = (number, line if line.endswith("\n") else line + "\n")
            tail.append(entry)
            if at >= cutoff:
                window.append(entry)
    return [line for _, line in sorted({*window, *tail})]


def _ident(stat: os.stat_result) -> tuple[int, int]:
    """Which file: its device and inode (a compacted file is a new one)."""
    return stat.st_dev, stat.st_ino
