"""What an error answer of the API server says: the ``metav1.Status`` it carries.

Read once for every caller (the Binder, the claim allocator, the live actuators): its
``message``, the messages of its ``details.causes`` (a PodDisruptionBudget's, say), and
how long a throttled client is asked to wait (``Retry-After``, else
``details.retryAfterSeconds``).
"""

from __future__ import annotations

import json
from typing import Any

from kubesage.core import retry_after
from kubesage.core.k8s.apiclient import ApiException


def api_status(exc: ApiException) -> dict[str, Any]:
    """The Status object the API server answered with (empty when the body is not one)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_message(exc: ApiException) -> str:
    """The ``message`` of the Status the API server answered (else its reason or code)."""
    return str(api_status(exc).get("message") or exc.reason or exc.status)


def has_cause(exc: ApiException, reason: str) -> bool:
    """Whether the Status's ``details.causes`` hold one of type ``reason`` (a
    ``StatusCause``'s type is its JSON ``reason``)."""
    details = api_status(exc).get("details") or {}
    causes = details.get("causes") if isinstance(details, dict) else None
    return any(isinstance(c, dict) and c.get("reason") == reason for c in causes or [])


def api_causes(exc: ApiException) -> list[str]:
    """The messages of the Status's ``details.causes``."""
    details = api_status(exc).get("details") or {}
    causes = details.get("causes") if isinstance(details, dict) else None
    return [str(c["message"]) for c in causes or [] if isinstance(c, dict) and c.get("message")]


def retry_after_s(exc: ApiException) -> float | None:
    """Seconds the API server asked to wait (``Retry-After`` header, else the
    Status' ``details.retryAfterSeconds``); None when it did not say."""
    header = (exc.headers or {}).get("Retry-After")
    asked = retry_after.retry_after_s(None if header is None else str(header))
    if asked is not None:
        return asked
    details = api_status(exc).get("details")
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return float(seconds) if isinstance(seconds, int) and seconds > 0 else None
