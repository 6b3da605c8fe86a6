"""One duration syntax for every option, annotation and config field.

A duration is a plain number of seconds (``90``, ``1.5``) or Go's ``time.Duration``
spelling, which Kubernetes annotations and Prometheus both use: one or more
``<number><unit>`` parts with units ``ms``, ``s``, ``m``, ``h`` and (Prometheus')
``d`` — ``500ms``, ``90s``, ``15m``, ``1h30m``, ``2d``. Infinite or overflowing
values (``inf``, ``1e400``) are refused.

A PromQL duration (a range selector's ``[1h30m]``, the metric map's ``rate_window``)
is stricter: whole numbers with units ``ms``, ``s``, ``m``, ``h``, ``d``, ``w``, ``y``,
largest first, each at most once (Prometheus' ``model.ParseDuration``) — no bare
seconds, no fractions. :func:`promql_duration_problem` says what is wrong with one.
"""

from __future__ import annotations

import math
import re

from kubesage.core.errors import InputError

UNIT_S: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds per unit."""

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
EXAMPLES = "90s, 15m, 1h30m or 2d"
PROMQL_EXAMPLES = "30s, 1m, 1h30m or 2d"

_PROMQL_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_PROMQL = re.compile("".join(rf"(?:(\d+){unit})?" for unit in _PROMQL_UNITS))


class DurationError(InputError):
    """Text that is not a duration, or one outside the allowed range."""


def parse_duration_s(text: str, where: str, *, maximum_s: float | None = None) -> float:
    """Seconds in ``text``; must be > 0 (and ≤ ``maximum_s``). ``where`` names the option,
    annotation or field in the error."""
    stripped = text.strip()
    try:
        value = float(stripped)
    except ValueError:
        parts = _PART.findall(stripped)
        if not parts or "".join(number + unit for number, unit in parts) != stripped:
            raise DurationError(
                f"{where}: '{text[:40]}' is not a duration (e.g. {EXAMPLES})"
            ) from None
        value = sum(float(number) * UNIT_S[unit] for number, unit in parts)
    if not value > 0:
        raise DurationError(f"{where}: duration '{text[:40]}' must be positive")
    if not math.isfinite(value):
        raise DurationError(f"{where}: duration '{text[:40]}' must be finite (e.g. {EXAMPLES})")
    if maximum_s is not None and value > maximum_s:
        longest = format_duration(maximum_s)
        raise DurationError(f"{where}: duration '{text[:40]}' is longer than the maximum {longest}")
    return value


def format_duration(seconds: float) -> str:
    """The shortest exact spelling in whole units (``5400`` → ``1h30m``); fractions in ms."""
    remaining_ms = round(seconds * 1000)
    if remaining_ms <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        size = round(UNIT_S[unit] * 1000)
        count, remaining_ms = divmod(remaining_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def promql_duration_problem(text: str) -> str | None:
    """Why ``text`` is not a positive PromQL duration (``None``: it is one)."""
    match = _PROMQL.fullmatch(text)
    if not text or match is None:
        return f"'{text[:40]}' is not a PromQL duration (e.g. {PROMQL_EXAMPLES})"
    if not any(int(count) for count in match.groups() if count):
        return f"PromQL duration '{text[:40]}' must be positive"
    return None


def parse_promql_duration(text: str, where: str) -> str:
    """``text`` when it is a positive PromQL duration; else a DurationError naming ``where``."""
    problem = promql_duration_problem(text)
    if problem is not None:
        raise DurationError(f"{where}: {problem}")
    return text
