"""How long an HTTP answer asks the client to wait: its ``Retry-After`` header.

RFC 9110 §10.2.3 allows delay-seconds (``120``) or an HTTP-date
(``Fri, 31 Dec 1999 23:59:59 GMT``, or the obsolete forms a recipient must accept, such
as asctime's ``Fri Dec 31 23:59:59 1999``, read as GMT). One reading for every client
that retries (the Kubernetes binder and actuators, the trace downloader).
"""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime


def retry_after_s(header: str | None, *, now_s: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait (0 for a date already past); None
    when there is no header or it is neither form. ``now_s``: the current Unix time
    (default: the clock), against which a date is read."""
    if header is None:
        return None
    value = header.strip()
    if value.isdecimal():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; asctime's form and "-0000" carry no zone
        when = when.replace(tzinfo=UTC)
    now = time.time() if now_s is None else now_s
    return max(0.0, when.timestamp() - now)
