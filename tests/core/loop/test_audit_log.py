"""Fixes to the audit log: a failed write (a full volume) is logged and counted and the
tick goes on; the done-memory forgets what is older than ``remember_s``; reading the
file back keeps only that window, and a file much larger than it is compacted
atomically — at start and while running — with a writer on the replaced file
following it to the new one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kubesage.core.loop.actions import Evict
from kubesage.core.loop.audit import KEEP, REFUSAL_MEMORY_S, AuditLog, AuditRecord
from kubesage.core.loop.reconciler import Outcome, Result
from kubesage.core.loop.view import WorldView
from kubesage.core.observability import metrics
from tests.core.loop.doubles import RecordingActuator, Scripted, evict
from tests.core.loop.test_control import make_loop, outcomes


def done(number: int, target: str | None = None, action: str = "bind") -> AuditRecord:
    return AuditRecord(
        number, float(number), "forecast-placement", action,
        target or f"default/pod-{number}", f"{number:016x}", None, "why", "done",
    )  # fmt: skip


def write_errors() -> float:
    return float(metrics.ERRORS.labels("loop_audit", "write")._value.get())


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_failed_audit_write_is_counted_and_the_tick_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    first = Scripted("defrag", lambda view: [evict("p0"), evict("p1")])
    second = Scripted("elastic", lambda view: [evict("q0", reconciler="elastic")])
    actuator = RecordingActuator()
    loop, clock, _ = make_loop([first, second], actuator, audit=audit)
    errors = write_errors()
    assert audit._file is not None
    audit._file.close()
    audit._file = open("/dev/full", "w")  # noqa: SIM115 - the write in flight fails
    report = loop.tick()
    assert [a.target for a in actuator.executed] == ["default/p0", "default/p1", "default/q0"]
    assert [o for _, _, o in outcomes(report.records)] == ["done"] * 3
    assert write_errors() == errors + 1 and audit.file_errors == 1
    # The file is opened again for the next record: the rest are written.
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert [line["target"] for line in lines] == ["default/p0", "default/p1", "default/q0"]

    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    os.replace(full, path)  # the volume is full from now on
    wants = [evict("p2"), evict("p3")]
    first.answer = lambda view: wants
    clock.advance(5.0)
    report = loop.tick()
    assert [o for _, _, o in outcomes(report.records)] == ["done"] * 2 + ["already-done"]
    assert write_errors() == errors + 1 + len(report.records)
    clock.advance(5.0)  # done in memory: not repeated
    assert [o for _, _, o in outcomes(loop.tick().records)] == ["already-done"] * 3

    path.unlink()  # space again: the next record is written
    clock.advance(5.0)
    loop.tick()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert [line["outcome"] for line in lines] == ["already-done"] * 3


def test_the_done_memory_forgets_what_is_older_than_remember_s() -> None:
    audit = AuditLog(remember_s=900.0)
    for number in range(20_000):
        audit.append(done(number))
    assert len(audit.done_keys(19_999.0)) == 901
    assert len(audit._last_done) <= 4096  # pruned when it doubles: a few windows at most
    assert len(audit._slot) == len(audit._last_done)
    assert audit.is_done(f"{19_999:016x}", 19_999.0)
    # One target scaled back and forth: only its last key is kept.
    for number in range(20_000, 30_000):
        audit.append(done(number, target="PyTorchJob/default/train", action="scale"))
    assert audit.is_done(f"{29_999:016x}", 29_999.0)
    assert len(audit._slot) <= 4096  # pruned when it doubles: a few windows at most


def write_records(path: Path, count: int, *, torn_at: int | None = None) -> None:
    with path.open("w", encoding="utf-8") as file:
        for number in range(count):
            if number == torn_at:
                file.write('{"tick": 1, "time"\n')
            file.write(json.dumps(done(number).to_json()) + "\n")


def test_reading_back_keeps_the_window_and_compacts_a_much_larger_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_records(path, 5000, torn_at=10)
    path.chmod(0o640)
    audit = AuditLog(path, remember_s=100.0, compact_min_bytes=10_000)
    assert len(audit._last_done) == 101  # times 4899..4999
    assert audit.is_done(f"{4999:016x}", 4999.0) and not audit.is_done(f"{4000:016x}")
    assert [r.tick for r in audit.recent()] == list(range(4900, 5000))
    kept = [json.loads(line)["tick"] for line in path.read_text().splitlines()]
    assert kept == list(range(4899, 5000))  # the window (and the last KEEP in it)
    assert path.stat().st_mode & 0o777 == 0o640
    assert not [name for name in os.listdir(tmp_path) if name != path.name]  # no temp left
    audit.append(done(5000))  # still appended to the (new) file
    assert json.loads(path.read_text().splitlines()[-1])["tick"] == 5000

    small = tmp_path / "small.jsonl"
    write_records(small, 300)
    before = small.read_text()
    AuditLog(small, remember_s=100.0, compact_min_bytes=10**9).close()
    assert small.read_text() == before  # not much larger than kept: left as it is


def test_the_last_records_are_kept_even_when_older_than_the_window(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_records(path, 3000)
    with path.open("a", encoding="utf-8") as file:  # a leader long after: one record
        file.write(json.dumps(done(100_000).to_json()) + "\n")
    AuditLog(path, remember_s=100.0, compact_min_bytes=10_000).close()
    kept = [json.loads(line)["tick"] for line in path.read_text().splitlines()]
    assert kept == [*range(3000 - KEEP + 1, 3000), 100_000]


def test_a_running_log_compacts_its_file_when_it_has_doubled(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, remember_s=50.0, compact_min_bytes=20_000)
    for number in range(3000):
        audit.append(done(number))
    lines = path.read_text().splitlines()
    assert len(lines) < 400 and path.stat().st_size <= 2 * 20_000
    assert json.loads(lines[-1])["tick"] == 2999
    assert [json.loads(line)["tick"] for line in lines] == sorted(
        json.loads(line)["tick"] for line in lines
    )


def test_a_writer_follows_the_file_another_replica_compacted(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    leader = AuditLog(path, remember_s=10.0)
    for number in range(2000):
        leader.append(done(number))
    # The other replica restarts, reads the shared file back and compacts it.
    AuditLog(path, remember_s=10.0, compact_min_bytes=10_000).close()
    assert len(path.read_text().splitlines()) == KEEP
    leader.append(done(2000))  # lands in the compacted file, not the replaced one
    assert json.loads(path.read_text().splitlines()[-1])["tick"] == 2000


def test_an_evicted_pods_bind_is_done_again(tmp_path: Path) -> None:
    # Bound, then evicted (a plan that rolled back after its eviction): the same bind,
    # the same key, must run again, not count as done for 15 minutes.
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append(done(1, target="default/p", action="bind"))
    assert audit.is_done(f"{1:016x}")
    audit.append(done(2, target="default/p", action="evict"))
    assert not audit.is_done(f"{1:016x}") and audit.is_done(f"{2:016x}")
    # As read back by the next leader too.
    assert not AuditLog(tmp_path / "audit.jsonl").is_done(f"{1:016x}")


def test_the_last_record_appended_is_the_last_done_whatever_its_clock(tmp_path: Path) -> None:
    # Scaled to 4 at t=1000, then to 2 by a clock stepped back (t=995): the job is at 2.
    audit = AuditLog(tmp_path / "audit.jsonl")
    target = "PyTorchJob/default/train"
    audit.append(done(1000, target=target, action="scale"))
    audit.append(done(995, target=target, action="scale"))
    assert audit.is_done(f"{995:016x}") and not audit.is_done(f"{1000:016x}")


def test_a_line_an_earlier_process_left_torn_takes_no_later_record_with_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    write_records(path, 2)
    with path.open("a", encoding="utf-8") as file:
        file.write('{"tick": 3, "time": 3.0, "reco')  # killed mid-write
    AuditLog(path).append(done(4, target="default/pod-1", action="evict"))
    again = AuditLog(path)
    assert again.is_done(f"{4:016x}")  # not glued to the torn line and lost
    assert again.is_done(f"{0:016x}")


def test_a_refusal_is_shown_to_the_reconcilers_for_a_while_and_across_leaders(
    tmp_path: Path,
) -> None:
    """A PodDisruptionBudget refused the eviction of p0: the next ticks' views say so
    (asked again now, it would be refused again), the next leader's too; five minutes
    later, or once an eviction of it is done, they no longer do."""
    path = tmp_path / "audit.jsonl"
    seen: list[dict[str, float]] = []

    def decide(view: WorldView) -> list[Evict]:
        seen.append(dict(view.refused))
        return [evict("p0")] if view.tick == 1 else []

    refusing = RecordingActuator({"default/p0": Result(Outcome.REFUSED, "429 DisruptionBudget")})
    loop, clock, _ = make_loop([Scripted("defrag", decide)], refusing, audit=AuditLog(path))
    loop.tick()
    refused_at = clock.now()
    clock.advance(10.0)
    loop.tick()
    assert seen == [{}, {"evict:default/p0": refused_at}]
    assert AuditLog(path).refused(clock.now()) == {"evict:default/p0": refused_at}
    assert AuditLog(path).refused(refused_at + REFUSAL_MEMORY_S + 1) == {}
    audit = AuditLog(path)
    audit.append(done(int(refused_at) + 20, target="default/p0", action="evict"))
    assert audit.refused(clock.now()) == {}
