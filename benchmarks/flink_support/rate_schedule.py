"""Input rates that change over time: the sample job's rate schedule.

A :class:`RateSchedule` is a piecewise-linear curve of records/s against seconds since
record 0, held at its last rate after its last point. The paced source of
``sample_job.py`` releases record ``n`` at ``start + time_of(n)`` and owes
``records_due(now - start) - n`` records when it falls behind, so the demand follows
the curve whatever the job does.

:func:`parse_schedule` reads ``"0:20,60:20,180:60"`` (time s : records/s, piecewise
linear) or a named shape scaled to a peak rate and a length:

- ``ramp``: a quarter of the peak, a linear rise to the peak, the peak held;
- ``daily``: a day compressed to the length: a quiet night, a morning ramp to the peak,
  a dip in the afternoon, an evening peak and the decline into the night.

This module imports only the standard library: it runs in the Flink venv too, inside
the job (``sample_job.py`` ships it to the Python workers by value).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field

SHAPES: dict[str, tuple[tuple[float, float], ...]] = {
    "ramp": ((0.0, 0.25), (0.2, 0.25), (0.6, 1.0), (1.0, 1.0)),
    # Hours of the day as fractions of it (6 h = 0.25): night until 06:00, a morning
    # ramp to the peak at noon, an afternoon dip, a second peak at 18:00, then night.
    "daily": (
        (0.0, 0.2),
        (0.25, 0.2),
        (0.5, 1.0),
        (0.625, 0.8),
        (0.75, 1.0),
        (0.9, 0.3),
        (1.0, 0.2),
    ),
}
"""Named shapes: (fraction of the length, fraction of the peak rate)."""
SHAPE_DURATION_S = {"ramp": 180.0, "daily": 240.0}
"""Default length of each named shape: a few minutes."""


@dataclass(frozen=True)
class RateSchedule:
    """Records/s against seconds since record 0: piecewise linear, then held."""

    points: tuple[tuple[float, float], ...]
    """(time s, records/s), times strictly increasing from 0."""
    _times: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _cumulative: tuple[float, ...] = field(init=False, repr=False, compare=False)
    """Records due at each point."""

    def __post_init__(self) -> None:
        if not self.points or self.points[0][0] != 0.0:
            raise ValueError("a rate schedule starts at time 0")
        times = [t for t, _ in self.points]
        if any(b <= a for a, b in itertools.pairwise(times)):
            raise ValueError(f"times must increase: {times}")
        if any(rate < 0 or not math.isfinite(rate) for _, rate in self.points):
            raise ValueError("rates must be finite and ≥ 0")
        if self.points[-1][1] <= 0:
            raise ValueError("the last rate must be > 0 (it is held for ever)")
        cumulative = [0.0]
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            cumulative.append(cumulative[-1] + (r0 + r1) / 2 * (t1 - t0))
        object.__setattr__(self, "_times", tuple(times))
        object.__setattr__(self, "_cumulative", tuple(cumulative))

    @property
    def duration_s(self) -> float:
        """Time of the last point (the rate is held after it)."""
        return self.points[-1][0]

    @property
    def peak_rate(self) -> float:
        return max(rate for _, rate in self.points)

    def delayed(self, lead_s: float) -> RateSchedule:
        """This schedule ``lead_s`` later, its first rate held until then."""
        if lead_s <= 0:
            return self
        first = self.points[0][1]
        return RateSchedule(((0.0, first), *((t + lead_s, rate) for t, rate in self.points)))

    def repeated(self, periods: int) -> RateSchedule:
        """This schedule ``periods`` times back to back (a day, then the next day).

        Each repeat starts at the previous one's end at its own first rate: where the
        two rates differ, the step between them is 1 ms long."""
        if periods < 1:
            raise ValueError(f"periods must be ≥ 1, got {periods}")
        length = self.duration_s
        points = list(self.points)
        for period in range(1, periods):
            offset = period * length
            for t, rate in self.points:
                if t == 0.0:
                    if rate == points[-1][1]:
                        continue  # the day ends where the next begins
                    t = 1e-3
                points.append((t + offset, rate))
        return RateSchedule(tuple(points))

    def spec(self) -> str:
        """The ``T:R,T:R,…`` text that :func:`parse_schedule` reads back."""
        return ",".join(f"{t:g}:{rate:g}" for t, rate in self.points)

    def rate_at(self, time_s: float) -> float:
        """Records/s offered at ``time_s`` (the first rate before 0)."""
        index = self._segment(time_s)
        if index < 0:
            return self.points[0][1]
        if index >= len(self.points) - 1:
            return self.points[-1][1]
        (t0, r0), (t1, r1) = self.points[index], self.points[index + 1]
        return r0 + (r1 - r0) * (time_s - t0) / (t1 - t0)

    def records_due(self, time_s: float) -> float:
        """Records released from 0 to ``time_s``: the integral of the rate."""
        if time_s <= 0:
            return 0.0
        index = min(self._segment(time_s), len(self.points) - 1)
        t0, r0 = self.points[index]
        elapsed = time_s - t0
        return self._cumulative[index] + (r0 + self.rate_at(time_s)) / 2 * elapsed

    def time_of(self, records: float) -> float:
        """The time at which ``records`` records are due (inverse of :meth:`records_due`)."""
        if records <= 0:
            return 0.0
        cumulative = self._cumulative
        index = bisect.bisect_right(cumulative, records) - 1
        t0, r0 = self.points[index]
        left = records - cumulative[index]
        if index >= len(self.points) - 1:
            return t0 + left / r0
        t1, r1 = self.points[index + 1]
        slope = (r1 - r0) / (t1 - t0)
        if abs(slope) < 1e-12:
            return t0 + left / r0
        # Solve r0·x + slope·x²/2 = left for the elapsed x ≥ 0 (the root on this segment).
        root = math.sqrt(max(r0 * r0 + 2 * slope * left, 0.0))
        return t0 + 2 * left / (r0 + root)

    def _segment(self, time_s: float) -> int:
        """Index of the point that starts the segment holding ``time_s`` (-1: before 0)."""
        return bisect.bisect_right(self._times, time_s) - 1


def parse_schedule(
    text: str, *, peak_rate: float | None = None, duration_s: float | None = None
) -> RateSchedule:
    """A schedule from ``"T:R,T:R,…"`` or a named shape (``ramp``, ``daily``).

    A named shape needs ``peak_rate``; ``duration_s`` stretches it (default: its own
    length in ``SHAPE_DURATION_S``). ValueError says what is wrong with ``text``.
    """
    name = text.strip().lower()
    if name in SHAPES:
        if peak_rate is None or peak_rate <= 0:
            raise ValueError(f"the '{name}' shape needs a peak rate > 0")
        length = duration_s if duration_s is not None else SHAPE_DURATION_S[name]
        if length <= 0:
            raise ValueError("the schedule's duration must be > 0")
        return RateSchedule(
            tuple((fraction * length, share * peak_rate) for fraction, share in SHAPES[name])
        )
    points = []
    for item in text.split(","):
        time_text, sep, rate_text = item.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            points.append((float(time_text), float(rate_text)))
        except ValueError:
            raise ValueError(
                f"'{item.strip()}' is not TIME_S:RATE (schedule '{text}'; or one of "
                f"{', '.join(SHAPES)})"
            ) from None
    return RateSchedule(tuple(points))
