"""A collector the loop waits for at most a bound: a quick source is read every tick, a
hung one hands over its last snapshot and is not asked again while it hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from kubesage.core.bounded_collector import BoundedCollector
from kubesage.core.errors import DependencyError
from kubesage.core.perception import Snapshot


class Source:
    """A collector whose n-th reading runs ``read(n)`` (which may block or raise)."""

    name = "prometheus"

    def __init__(self, read: Callable[[int], Snapshot[int]]):
        self.read = read
        self.readings = 0
        self.failures = 0
        self.closed = False

    def collect(self) -> Snapshot[int]:
        self.readings += 1
        return self.read(self.readings)

    def close(self) -> None:
        self.closed = True


def test_a_quick_source_is_read_every_call() -> None:
    source = Source(lambda n: Snapshot(n, taken_at=float(n)))
    collector = BoundedCollector(source, wait_s=5, first_wait_s=5)
    assert [collector.collect().data for _ in range(3)] == [1, 2, 3]
    collector.close()
    assert source.closed


def test_a_hung_source_hands_over_its_last_snapshot_and_is_asked_once() -> None:
    release = threading.Event()

    def read(n: int) -> Snapshot[int]:
        if n == 2:  # the second reading hangs until released
            release.wait(30)
        return Snapshot(n, taken_at=float(n))

    source = Source(read)
    collector = BoundedCollector(source, wait_s=0.2, first_wait_s=5)
    try:
        assert collector.collect().data == 1
        started = time.monotonic()
        assert [collector.collect().data for _ in range(3)] == [1, 1, 1]
        assert time.monotonic() - started < 3  # three bounded waits, not the 30 s hang
        assert source.readings == 2  # not asked again while the reading hangs
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while (latest := collector.collect().data) == 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert latest >= 2  # once the source answers again, its readings are handed over


def test_before_any_snapshot_the_sources_error_is_raised() -> None:
    def read(n: int) -> Snapshot[int]:
        raise DependencyError("prometheus: http://prometheus:9090 unreachable")

    collector = BoundedCollector(Source(read), wait_s=5, first_wait_s=5)
    with pytest.raises(DependencyError, match="unreachable"):
        collector.collect()


def test_a_failure_after_a_good_snapshot_hands_it_over_stale() -> None:
    def read(n: int) -> Snapshot[int]:
        if n > 1:
            raise RuntimeError("connection reset")
        return Snapshot(7, taken_at=100.0)

    collector = BoundedCollector(Source(read), wait_s=5, first_wait_s=5)
    assert collector.collect() == Snapshot(7, taken_at=100.0)
    assert collector.collect() == Snapshot(
        7, 100.0, stale=True, reason="RuntimeError: connection reset"
    )


def test_a_first_reading_slower_than_first_wait_is_said() -> None:
    release = threading.Event()
    source = Source(lambda n: (release.wait(30), Snapshot(n, taken_at=0.0))[1])
    collector = BoundedCollector(source, wait_s=0.1, first_wait_s=0.5)
    try:
        with pytest.raises(DependencyError, match=r"first reading is still running after 0\.5 s"):
            collector.collect()
        with pytest.raises(DependencyError, match=r"after 0\.1 s"):
            collector.collect()  # later calls wait wait_s only
    finally:
        release.set()
