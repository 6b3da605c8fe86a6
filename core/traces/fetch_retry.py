"""When a trace download is tried again, and after how long.

A dropped connection or a timeout, a 5xx, and the 4xx answers that mean "not now" (408
Request Timeout, 429 Too Many Requests) are tried again; any other 4xx, and a redirect to
a scheme httpx cannot fetch, give the same answer every time and are not. The wait is
exponential (0.5 s doubling, at most 8 s), or what the mirror asked for in its
``Retry-After`` when that is longer, capped at :data:`MAX_RETRY_AFTER_S`.
"""

from __future__ import annotations

import httpx
from tenacity import RetryCallState, wait_exponential

from kubesage.core.retry_after import retry_after_s

_ASK_AGAIN = frozenset({408, 429})
"""4xx answers that mean "not now" (Request Timeout, Too Many Requests), retried."""
MAX_RETRY_AFTER_S = 60.0
"""The longest a mirror's ``Retry-After`` makes the download wait between attempts."""
_backoff = wait_exponential(multiplier=0.5, max=8.0)


def is_transient(exc: BaseException) -> bool:
    """Whether asking again may give another answer."""
    if isinstance(exc, httpx.UnsupportedProtocol):
        return False  # e.g. a redirect to file://: asking again gives the same answer
    if isinstance(exc, httpx.TransportError):
        return True
    if not isinstance(exc, httpx.HTTPStatusError):
        return False
    code = exc.response.status_code
    return code >= 500 or code in _ASK_AGAIN


def wait_s(state: RetryCallState) -> float:
    """The exponential backoff, or longer when the mirror asked (``Retry-After``), capped."""
    backoff = float(_backoff(state))
    exc = state.outcome.exception() if state.outcome else None
    if not isinstance(exc, httpx.HTTPStatusError):
        return backoff
    asked = retry_after_s(exc.response.headers.get("Retry-After"))
    return backoff if asked is None else max(backoff, min(asked, MAX_RETRY_AFTER_S))
