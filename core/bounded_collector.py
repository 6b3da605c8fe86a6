"""A collector the control loop waits for at most a bound: a slow source cannot hold a tick.

A slow or hung source — a Prometheus that answers in seconds, or not until its timeouts
run out — would hold every tick of the control loop for as long as it takes (two 5 s
timeouts against a 5 s tick). :class:`BoundedCollector` runs each reading of its source
on a thread of its own and waits for it at most ``wait_s``:

- a reading that finishes in time is handed over as it is (a healthy source is read
  every tick, as before);
- one that does not goes on in the background, and ``collect`` hands over the latest
  snapshot instead; the late reading's result is kept for a later tick, and no new
  reading starts while it runs (a hung source is asked once, not once per tick);
- the very first call waits ``first_wait_s`` instead, so that a single tick
  (``kubesage loop --once``) still sees the source.

Data handed over late is judged by the loop's data-age rule (``max_data_age_s``) as any
collector's is. A source that has never given a snapshot raises what it raised (a
``DependencyError``), as the :class:`~kubesage.core.perception.Collector` protocol says;
one that fails after a good snapshot keeps handing over that snapshot, marked stale with
the reason. ``close`` closes the source.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from kubesage.core.errors import DependencyError
from kubesage.core.perception import Collector, Snapshot

T = TypeVar("T")


class BoundedCollector(Generic[T]):
    """``source``, waited for at most ``wait_s`` per reading (see the module docstring)."""

    def __init__(self, source: Collector[T], *, wait_s: float, first_wait_s: float) -> None:
        self.source = source
        self.wait_s = wait_s
        self.first_wait_s = first_wait_s
        self._lock = threading.Lock()
        self._latest: Snapshot[T] | None = None
        self._error: Exception | None = None
        self._reading: threading.Event | None = None
        """Set when the reading in progress (if any) has finished."""
        self._first = True

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def failures(self) -> int:
        return self.source.failures

    def collect(self) -> Snapshot[T]:
        with self._lock:
            if self._reading is None or self._reading.is_set():
                self._reading = threading.Event()
                threading.Thread(
                    target=self._read, args=(self._reading,), name=f"collect-{self.name}",
                    daemon=True,
                ).start()  # fmt: skip
            reading = self._reading
            wait_s, self._first = (self.first_wait_s if self._first else self.wait_s), False
        reading.wait(wait_s)
        with self._lock:
            latest, error = self._latest, self._error
        if latest is not None:
            return latest
        if error is not None:
            raise error
        raise DependencyError(
            f"{self.name}: no snapshot yet (its first reading is still running after {wait_s:g} s)"
        )

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if callable(close):
            close()

    def _read(self, done: threading.Event) -> None:
        try:
            snapshot = self.source.collect()
        except Exception as exc:  # kept for collect(): the loop reports it
            with self._lock:
                self._error = exc
                if self._latest is not None:
                    last = self._latest
                    reason = f"{type(exc).__name__}: {exc}"
                    self._latest = Snapshot(last.data, last.taken_at, stale=True, reason=reason)
        else:
            with self._lock:
                self._latest, self._error = snapshot, None
        finally:
            done.set()
