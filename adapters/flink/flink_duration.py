"""Flink's duration syntax (``TimeUtils.parseDuration``), as config values use it.

A number, optional whitespace, then an optional unit: no unit is milliseconds;
``d``/``day``, ``h``/``hour``, ``min``/``m``/``minute``, ``s``/``sec``/``second``,
``ms``/``milli``/``millisecond``, ``µs``/``micro``/``microsecond`` and
``ns``/``nano``/``nanosecond``, each also in the plural (``7 d``, ``3600000 ms``,
``2 hours``). Units are case-insensitive.
"""

from __future__ import annotations

import re

_UNITS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("d", "day"), 86_400_000.0),
    (("h", "hour"), 3_600_000.0),
    (("min", "m", "minute"), 60_000.0),
    (("s", "sec", "second"), 1_000.0),
    (("ms", "milli", "millisecond"), 1.0),
    (("µs", "micro", "microsecond"), 1e-3),
    (("ns", "nano", "nanosecond"), 1e-6),
)
_UNIT_MS = {spelled: ms for names, ms in _UNITS for name in names for spelled in (name, name + "s")}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-zµ]*)\s*$")


def flink_duration_ms(text: str) -> float | None:
    """Milliseconds in ``text``; None when it is not a Flink duration."""
    match = _DURATION.match(text.lower())
    if match is None:
        return None
    number, unit = match.groups()
    scale = _UNIT_MS.get(unit) if unit else 1.0
    return None if scale is None else int(number) * scale
