"""The loop's clock: the wall clock in ``kubesage serve``, a simulated one in simulations.

The control loop never reads ``time`` itself. It asks its :class:`Clock` for the time
at the start of a tick (stamped on every view and audit record) and to wait until the
next tick, so the simulator can drive the very loop that runs live by advancing a
:class:`SimulatedClock` by hand.
"""

from __future__ import annotations

import threading
import time
from typing import Literal, Protocol

ClockKind = Literal["wall", "simulated"]


class Clock(Protocol):
    """Where the loop's time comes from."""

    @property
    def kind(self) -> ClockKind:
        """``wall`` or ``simulated`` (``/debug/loop`` reports it)."""
        ...

    def now(self) -> float:
        """Seconds (unix time on the wall clock)."""
        ...

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        """Let ``seconds`` pass, or less if ``stop`` is set; True when stopped."""
        ...


class WallClock:
    """Real time; :meth:`sleep` waits on the stop event so shutdown is immediate."""

    @property
    def kind(self) -> ClockKind:
        return "wall"

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds))


class SimulatedClock:
    """Time that moves only when told: :meth:`advance` (the simulator) or :meth:`sleep`."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = float(start_s)
        self._lock = threading.Lock()

    @property
    def kind(self) -> ClockKind:
        return "simulated"

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (never back); return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._now += seconds
            return self._now

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        # Simulated time passes at once: a loop run on this clock ticks back to back.
        if stop.is_set():
            return True
        self.advance(max(0.0, seconds))
        return stop.is_set()
